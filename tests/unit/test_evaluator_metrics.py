"""Validation metrics from gathered results, in the units the papers report."""

import math

import pytest

from alignmt.data.corpus import ParallelText
from alignmt.evaluation.evaluator import Evaluator
from alignmt.evaluation.results import Evaluation, SentenceResult
from alignmt.translator import Translation


def result(index: int, text: str) -> SentenceResult:
    words = text.split()
    return SentenceResult(index, Translation([], [], [], words, text, 0.0, None))


def test_validation_reports_nll_per_token_and_per_sentence():
    targets = ["the dog sees the cat", "a bird sings in the tree"]
    text = ParallelText(["s1", "s2"], targets)
    evaluation = Evaluation("valid", [result(0, targets[0]), result(1, targets[1])], 12.0, 8, 0.0)
    metrics = Evaluator(translator=None, texts={"valid": text}).validation_metrics(evaluation)
    assert metrics["val/loss"] == pytest.approx(12.0 / 8)  # per reference token ([EOS] too)
    assert metrics["val/ppl"] == pytest.approx(math.exp(12.0 / 8))
    assert metrics["val/nll_per_sentence"] == pytest.approx(6.0)  # Bahdanau et al.'s unit
    assert metrics["val/bleu"] == pytest.approx(100.0)
