"""Is a run's BLEU different from the baseline's? Paired bootstrap resampling (Koehn 2004;
`alignmt.evaluation.significance`, as `alignmt-evaluate baseline=...` computes it), on both
runs' hypotheses of the same test set against its references.

The references come from a run's `test_sentences.jsonl.gz`; two runs are compared only when
their files hold the same sources and references.
"""

from __future__ import annotations

from pathlib import Path

from alignmt.evaluation.significance import DEFAULT_SAMPLES, paired_significance
from alignmt.report.sentences import SENTENCES_FILE, read_sentences

BOOTSTRAP_SAMPLES = DEFAULT_SAMPLES["bootstrap"]


def test_set(run: Path) -> tuple[list[str], list[str], list[str]] | None:
    """(sources, references, hypotheses) of a run, or None where it lacks the files."""
    sentences, hypotheses = run / SENTENCES_FILE, run / "hypotheses.txt"
    if not (sentences.is_file() and hypotheses.is_file()):
        return None
    records = read_sentences(sentences)
    lines = hypotheses.read_text(encoding="utf-8").split("\n")[: len(records)]
    if len(lines) != len(records):
        raise ValueError(f"{hypotheses}: {len(lines)} lines for {len(records)} test sentences")
    return [r["source"] for r in records], [r["reference"] for r in records], lines


def paired_bootstrap_p(baseline: Path, system: Path, samples: int = BOOTSTRAP_SAMPLES):
    """The p-value of the BLEU difference between two runs (seeded: the same on every
    call), or None when either run lacks the files or their test sets differ."""
    a, b = test_set(baseline), test_set(system)
    if a is None or b is None or a[:2] != b[:2]:
        return None
    result = paired_significance(b[2], a[2], a[1], "bootstrap", samples, metrics=("bleu",))
    return result["bleu"].p_value
