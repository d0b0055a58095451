"""Corpus BLEU and chrF through sacrebleu, so scores are comparable with published numbers."""

from __future__ import annotations

from sacrebleu.metrics import BLEU, CHRF


def check_parallel(hypotheses: list[str], references: list[str]) -> None:
    """A silently truncated corpus gives a plausible but wrong score; refuse it instead."""
    if len(hypotheses) != len(references):
        raise ValueError(
            f"{len(hypotheses)} hypotheses but {len(references)} references; "
            "one of the files is out of line"
        )
    if not hypotheses:
        raise ValueError("cannot score an empty corpus")


def corpus_scores(hypotheses: list[str], references: list[str], tokenize: str = "13a") -> dict:
    """BLEU and chrF of detokenized output against one reference per sentence.

    The signatures record every setting that changes the number (tokenizer, casing,
    smoothing, sacrebleu version) and belong next to any reported score.
    """
    check_parallel(hypotheses, references)
    bleu, chrf = BLEU(tokenize=tokenize), CHRF()
    refs = [references]
    return {
        "bleu": bleu.corpus_score(hypotheses, refs).score,
        "chrf": chrf.corpus_score(hypotheses, refs).score,
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }
