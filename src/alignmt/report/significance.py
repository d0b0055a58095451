"""Is a run's BLEU different from the baseline's? sacrebleu's paired bootstrap resampling
(Koehn 2004), on both runs' hypotheses of the same test set against its references.

The references come from a run's `test_sentences.jsonl.gz`; two runs are compared only when
their files hold the same sources and references.
"""

from __future__ import annotations

from pathlib import Path

from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest

from alignmt.evaluation.bleu import unk_as_one_token
from alignmt.report.sentences import SENTENCES_FILE, read_sentences

BOOTSTRAP_SAMPLES = 1000


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
    """The p-value of the BLEU difference between two runs (sacrebleu's paired bootstrap,
    its fixed seed), or None when either run lacks the files or their test sets differ."""
    a, b = test_set(baseline), test_set(system)
    if a is None or b is None or a[:2] != b[:2]:
        return None
    references = a[1]
    metric = BLEU()
    systems = [
        (name, unk_as_one_token(hyps, references, metric.tokenizer))
        for name, hyps in (("baseline", a[2]), ("system", b[2]))
    ]
    test = PairedTest(systems, {"BLEU": metric}, [references], "bs", samples)
    _, scores = test()
    return scores["BLEU"][1].p_value
