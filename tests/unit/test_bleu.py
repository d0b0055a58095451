import json
import subprocess
import sys

import pytest

from alignmt.evaluation.bleu import corpus_scores

REFERENCES = [
    "The cat sat on the mat.",
    "It was a bright cold day in April, and the clocks were striking thirteen.",
    "Hello, world!",
    "The agreement on the European Economic Area was signed in August 1992.",
]
HYPOTHESES = [
    "The cat sat on a mat.",
    "It was a cold bright day in April and the clocks struck thirteen.",
    "Hello world!",
    "The agreement on the European Economic Area was signed in August 1992.",
]


def sacrebleu_cli(tmp_path, tokenize):
    ref, hyp = tmp_path / "ref.txt", tmp_path / "hyp.txt"
    ref.write_text("\n".join(REFERENCES) + "\n")
    hyp.write_text("\n".join(HYPOTHESES) + "\n")
    command = [sys.executable, "-m", "sacrebleu", str(ref), "-i", str(hyp)]
    command += ["-m", "bleu", "chrf", "-b", "-w", "2", "-tok", tokenize]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    bleu, chrf = json.loads(out)
    return float(bleu), float(chrf)


@pytest.mark.parametrize("tokenize", ["13a", "none"])
def test_scores_match_sacrebleu_cli(tmp_path, tokenize):
    scores = corpus_scores(HYPOTHESES, REFERENCES, tokenize=tokenize)
    bleu, chrf = sacrebleu_cli(tmp_path, tokenize)
    assert scores["bleu"] == pytest.approx(bleu, abs=0.005)
    assert scores["chrf"] == pytest.approx(chrf, abs=0.005)
    assert 0 < scores["bleu"] < 100


def test_tokenizer_changes_bleu():
    assert (
        corpus_scores(HYPOTHESES, REFERENCES, "13a")["bleu"]
        != corpus_scores(HYPOTHESES, REFERENCES, "none")["bleu"]
    )


def test_signatures_record_references_and_tokenizer():
    scores = corpus_scores(HYPOTHESES, REFERENCES, tokenize="intl")
    assert "nrefs:1" in scores["bleu_signature"]
    assert "tok:intl" in scores["bleu_signature"]
    assert "nrefs:1" in scores["chrf_signature"]


def test_identical_corpus_scores_100():
    scores = corpus_scores(REFERENCES, REFERENCES)
    assert scores["bleu"] == pytest.approx(100.0)
    assert scores["chrf"] == pytest.approx(100.0)


def test_length_mismatch_names_both_lengths():
    with pytest.raises(ValueError, match=r"3 hypotheses but 4 references"):
        corpus_scores(HYPOTHESES[:3], REFERENCES)


def test_empty_corpus_raises():
    with pytest.raises(ValueError, match="empty"):
        corpus_scores([], [])
