"""What evaluation keeps of a split, the test metrics computed from it, and the files of a
run directory (hypotheses, BLEU by length, the exposure probe, heatmaps, metrics.json)."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from alignmt.atomic import write_text
from alignmt.data.corpus import ParallelText
from alignmt.evaluation.alignment import (
    alignment_error_rate,
    hard_alignment,
    parse_gold,
    word_attention,
)
from alignmt.evaluation.attention_stats import attention_statistics
from alignmt.evaluation.bleu import corpus_bleu
from alignmt.evaluation.by_length import (
    bleu_by_length,
    bucket_metric_key,
    source_lengths,
    write_bleu_by_length_csv,
)
from alignmt.evaluation.exposure import ExposureCurves, exposure_curves
from alignmt.evaluation.metrics import SCORE_DETAILS, SCORES, translation_scores
from alignmt.evaluation.search import length_ratio
from alignmt.evaluation.source_coverage import source_coverage_errors
from alignmt.plots import plot_attention, plot_bleu_by_length, plot_exposure
from alignmt.translator import Translation

log = logging.getLogger(__name__)

ALIGNMENT_UNITS = ("words", "tokens")  # what gold alignments index


@dataclass
class SentenceResult:
    """What evaluation keeps of one sentence until the corpus-level metrics are computed. It
    owns its storage (no views of batch tensors), so gathering it across processes is cheap."""

    index: int  # position in the split
    translation: Translation  # the best one
    forced_attention: np.ndarray | None = None  # teacher-forced, without [EOS] rows and columns
    no_unk: Translation | None = None  # decoded with [UNK] forbidden, if in the No-UNK subset
    exposure: tuple | None = None  # (reference, teacher-forced argmax, own output) ids


@dataclass
class Evaluation:
    """One split's results: every sentence (from every process, in split order) and metrics."""

    split: str
    sentences: list[SentenceResult]
    nll: float  # summed over the reference tokens
    tokens: int
    decode_seconds: float  # this process's decoding time
    metrics: dict = field(default_factory=dict)

    @property
    def loss(self) -> float:
        return self.nll / max(self.tokens, 1)


@dataclass
class TestResults:
    metrics: dict  # test/... scalars
    details: dict  # signatures and counts for metrics.json
    by_length: list[dict] = field(default_factory=list)  # rows of bleu_by_length
    exposure: ExposureCurves | None = None


def spread_by_length(lengths: Sequence[int], k: int) -> list[int]:
    """k positions whose lengths spread over the range: the quantiles (q + 1/2) / k."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    k = min(k, len(order))
    return [order[int((q + 0.5) / k * len(order))] for q in range(k)]


def test_results(
    evaluation: Evaluation,
    text: ParallelText,
    tokenizers: tuple,
    oracle: Callable | None = None,
    alignment_unit: str = "words",
) -> TestResults:
    """Every test metric, over all sentences (from every process), in split order.

    `tokenizers` (source, target) give the paper's length unit, source words after
    tokenisation, for BLEU by length, and bring token attention to the words that gold
    alignments index (`alignment_unit="words"`; `"tokens"` where the gold indexes the model's
    own tokens). `oracle(i, prefix)` gives the right next tokens after any prefix where the
    corpus knows them (the exposure probe's own-prefix column)."""
    outputs = evaluation.sentences
    hypotheses = [o.translation.text for o in outputs]
    if len(hypotheses) != len(text):
        raise RuntimeError(f"decoded {len(hypotheses)} of {len(text)} test sentences")
    references = list(text.targets)
    scores = translation_scores(hypotheses, references, text.extra_references)
    unit, label = length_unit(tokenizers[0])
    lengths = source_lengths(text.sources, tokenizers[0], unit)
    rows = bleu_by_length(hypotheses, references, lengths, length_unit=label)
    metrics = {
        **{f"test/{name}": scores[name] for name in SCORES},
        "test/length_ratio": length_ratio(hypotheses, references),
        "test/loss": evaluation.loss,
        "test/ppl": math.exp(min(evaluation.loss, 100)),
        "test/nll_per_sentence": evaluation.nll / len(outputs),
        **{
            f"test/{bucket_metric_key(r['lo'], r['hi'])}": r["bleu"]
            for r in rows
            if r["bleu"] is not None
        },
    }
    no_unk = [o for o in outputs if o.no_unk is not None]
    if no_unk:
        hyps, refs = [o.no_unk.text for o in no_unk], [references[o.index] for o in no_unk]
        if hyps == hypotheses:  # every sentence, each output already without [UNK]
            metrics["test/bleu_no_unk"] = scores["bleu"]
        else:
            more = [[extra[o.index] for o in no_unk] for extra in text.extra_references]
            metrics["test/bleu_no_unk"] = corpus_bleu(hyps, refs, extra_references=more).score
    exposure = None
    if outputs[0].exposure is not None:
        exposure = exposure_curves(*zip(*(o.exposure for o in outputs), strict=True), oracle)
        metrics.update({f"test/exposure/{k}": v for k, v in exposure.summary().items()})
    if outputs[0].translation.attention is not None:
        metrics.update(_attention_metrics(outputs))
    metrics.update(_decoding_speed(evaluation))
    if text.alignments is not None and outputs[0].forced_attention is not None:
        metrics.update(_alignment_errors(outputs, text, tokenizers, alignment_unit))
    details = {
        **{name: scores[name] for name in SCORE_DETAILS},
        "bleu_by_length_unit": label,
        "test_sentences": len(hypotheses),
        "no_unk_sentences": len(no_unk),
    }
    if exposure is not None and exposure.note:
        details["exposure_note"] = exposure.note
    if metrics.get("test/attention_degenerate"):
        details["attention_note"] = (
            "attention looks degenerate: most steps near uniform, or most sentences attending "
            "one position throughout (test/attention_uniform_steps, "
            "test/attention_collapsed_sentences)"
        )
    return TestResults(metrics, details, rows, exposure)


def _attention_metrics(outputs: list) -> dict:
    """Source words skipped or repeated by the outputs' attention, and its diagnostics."""
    attention = (o.translation.attention[:-1, :-1] for o in outputs)
    metrics = {f"test/{k}": v for k, v in source_coverage_errors(attention).items()}
    diagnostics = attention_statistics(o.translation.attention for o in outputs)
    return {**metrics, **{f"test/{k}": v for k, v in diagnostics.items()}}


def length_unit(tokenizer) -> tuple[str, str]:
    """Bahdanau et al. bucket by source words after tokenisation: a word-level tokeniser's
    tokens; for subword models, the raw words the pieces come from. (unit, label)."""
    if tokenizer.splits_words:
        return "words", "source words (whitespace-separated; the model reads subword pieces)"
    return "tokens", f"source words after tokenisation ({tokenizer.fingerprint})"


def _decoding_speed(evaluation: Evaluation) -> dict[str, float]:
    """This process's decoding speed (all processes decode at once)."""
    if evaluation.decode_seconds <= 0:
        return {}
    outputs = evaluation.sentences
    tokens = sum(len(o.translation.tokens) for o in outputs)
    return {
        "test/decode_sentences_per_sec": len(outputs) / evaluation.decode_seconds,
        "test/decode_tokens_per_sec": tokens / evaluation.decode_seconds,
    }


def _alignment_errors(outputs, text: ParallelText, tokenizers, unit: str) -> dict[str, float]:
    """AER (Och and Ney, sure and possible links) of teacher-forced attention, as argmax and
    as threshold links, against the corpus's gold alignments."""
    if unit not in ALIGNMENT_UNITS:
        raise ValueError(f"alignment unit must be one of {ALIGNMENT_UNITS}, got {unit!r}")
    gold = [parse_gold(line) for line in text.alignments]
    attention = [o.forced_attention for o in outputs]
    if unit == "words":
        source, target = tokenizers
        attention = [
            word_attention(a, target.word_ids(text.targets[i]), source.word_ids(text.sources[i]))
            for i, a in enumerate(attention)
        ]
    sure, possible = zip(*gold, strict=True)
    metrics = {}
    for method in ("argmax", "threshold"):
        predicted = [hard_alignment(a, method) for a in attention]
        key = "test/aer" if method == "argmax" else f"test/aer_{method}"
        metrics[key] = alignment_error_rate(predicted, sure, possible)
    return metrics


def write_test_files(
    out: Path,
    evaluation: Evaluation,
    text: ParallelText,
    results: TestResults,
    heatmaps: int = 4,
    heatmap_sentences: Sequence[int] = (),
) -> None:
    """The run directory's test files; the metrics are merged into its metrics.json."""
    outputs = evaluation.sentences
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "hypotheses.txt", "".join(o.translation.text + "\n" for o in outputs))
    write_bleu_by_length_csv(results.by_length, out / "bleu_by_length.csv")
    plot_bleu_by_length({"test": results.by_length}, out / "bleu_by_length.png")
    if results.exposure is not None:
        results.exposure.write_csv(out / "exposure.csv")
        plot_exposure(results.exposure, out / "exposure.png")
    chosen = set(spread_by_length([len(s.split()) for s in text.sources], heatmaps))
    for i in heatmap_sentences:
        if 0 <= i < len(outputs):
            chosen.add(i)
        else:
            log.warning("no heatmap for test sentence %d: the test set has %d", i, len(outputs))
    for i in sorted(chosen):
        t = outputs[i].translation
        if t.attention is not None:
            plot_attention(
                t.attention,
                t.source_labels,
                t.target_labels,
                out / "attention" / f"test_{i:05d}.png",
                title=f"test sentence {i}",
            )
    update_metrics_file(out / "metrics.json", {**results.metrics, **results.details})


def update_metrics_file(path: Path, values: dict) -> None:
    """Merge `values` into a run's metrics.json (written atomically: never half a file)."""
    previous = json.loads(path.read_text()) if path.exists() else {}
    write_text(path, json.dumps({**previous, **values}, indent=2) + "\n")
