"""The scores papers report beside BLEU and chrF: TER (sacrebleu) and ROUGE-1/2/L F1
(rouge-score), on the same detokenised text, [UNK] as one token, with every reference.

ROUGE's own tokeniser lowercases and keeps only [a-z0-9] (it would split "Straße" and drop
"ü"); here ROUGE reads the tokens of sacrebleu's BLEU tokeniser (13a by default), case kept,
no stemming, so it counts the same words BLEU does, in any language. With several references
a sentence takes its best reference's F1 (rouge-score's `score_multi`); the corpus score is
the mean sentence F1, times 100.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.metadata import version

from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.metrics.base import Metric

from alignmt.evaluation.bleu import (
    UNK_SIGNATURE,
    Streams,
    check_parallel,
    corpus_scores,
    scoring_text,
)

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")
SACREBLEU_METRICS = ("bleu", "chrf", "ter")
# What `translation_scores` gives: the scores, and what belongs beside them in metrics.json.
SCORES = ("bleu", "chrf", "ter", *ROUGE_TYPES)
SCORE_DETAILS = (
    "bleu_signature",
    "chrf_signature",
    "ter_signature",
    "rouge_signature",
    "references_per_sentence",
    "unk_note",
)


def sacrebleu_metric(name: str, tokenize: str = "13a") -> Metric:
    """sacrebleu's metric `name` with this project's settings (BLEU's tokeniser `tokenize`)."""
    if name == "bleu":
        return BLEU(tokenize=tokenize)
    if name == "chrf":
        return CHRF()
    if name == "ter":
        return TER()
    raise ValueError(f"unknown metric {name!r}; expected one of {SACREBLEU_METRICS}")


class _BleuTokens:
    """rouge-score's tokeniser interface over sacrebleu's BLEU tokeniser."""

    def __init__(self, tokenize: str):
        self._tokenizer = BLEU(tokenize=tokenize).tokenizer

    def tokenize(self, text: str) -> list[str]:
        return self._tokenizer(text.strip()).split()


def rouge_signature(tokenize: str = "13a") -> str:
    return (
        f"rouge-score:{version('rouge-score')}|tok:{tokenize}|case:mixed|stemmer:no|"
        "f1:mean-of-sentences|multi-ref:best" + UNK_SIGNATURE
    )


def corpus_rouge(
    hypotheses: list[str],
    references: list[str],
    extra_references: Streams = (),
    tokenize: str = "13a",
) -> dict[str, float]:
    """ROUGE-1, ROUGE-2 and ROUGE-L F1 (0-100): the mean over sentences of each sentence's
    F1 against its best reference."""
    streams = check_parallel(hypotheses, references, extra_references)
    hypotheses = scoring_text(hypotheses, streams, tokenize)
    from rouge_score.rouge_scorer import RougeScorer  # with nltk, most of this module's import

    scorer = RougeScorer(list(ROUGE_TYPES), tokenizer=_BleuTokens(tokenize))
    totals = dict.fromkeys(ROUGE_TYPES, 0.0)
    for i, hypothesis in enumerate(hypotheses):
        scores = scorer.score_multi([stream[i] for stream in streams], hypothesis)
        for kind in ROUGE_TYPES:
            totals[kind] += scores[kind].fmeasure
    return {kind: 100 * total / len(hypotheses) for kind, total in totals.items()}


def corpus_ter(
    hypotheses: list[str], references: list[str], extra_references: Streams = ()
) -> tuple[float, str]:
    """sacrebleu's TER (edits per reference word, times 100; lower is better) and its
    signature. With several references each sentence takes its closest one."""
    streams = check_parallel(hypotheses, references, extra_references)
    metric = TER()
    score = metric.corpus_score(scoring_text(hypotheses, streams), streams).score
    return score, str(metric.get_signature()) + UNK_SIGNATURE


def translation_scores(
    hypotheses: list[str],
    references: list[str],
    extra_references: Sequence[Sequence[str]] = (),
    tokenize: str = "13a",
) -> dict:
    """BLEU, chrF (`bleu.corpus_scores`), TER and ROUGE-1/2/L F1 with their signatures, and
    how many references each sentence has."""
    scores = corpus_scores(hypotheses, references, tokenize, extra_references)
    scores["ter"], scores["ter_signature"] = corpus_ter(hypotheses, references, extra_references)
    scores.update(corpus_rouge(hypotheses, references, extra_references, tokenize))
    scores["rouge_signature"] = rouge_signature(tokenize)
    scores["references_per_sentence"] = 1 + len(extra_references)
    return scores
