import json
import math
import subprocess
import sys

import pytest
from sacrebleu.metrics import BLEU

from alignmt.evaluation.bleu import (
    UNK_NOTE,
    UNK_PLACEHOLDER,
    corpus_bleu,
    corpus_scores,
    unk_as_one_token,
)

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


def test_signatures_record_references_tokenizer_and_unk_handling():
    scores = corpus_scores(HYPOTHESES, REFERENCES, tokenize="intl")
    assert "nrefs:1" in scores["bleu_signature"]
    assert "tok:intl" in scores["bleu_signature"]
    assert "nrefs:1" in scores["chrf_signature"]
    assert scores["bleu_signature"].endswith("|unk:one-token")
    assert scores["chrf_signature"].endswith("|unk:one-token")
    assert scores["unk_note"] == UNK_NOTE and repr(UNK_PLACEHOLDER) in UNK_NOTE


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


# 13a: "the black cat sat on the mat today ." is 9 tokens; the hypothesis below is 7 with
# [UNK] as one token, but 9 as sacrebleu splits the string: "the [ UNK ] sat on the mat .".
UNK_REFERENCE = ["the black cat sat on the mat today ."]
UNK_HYPOTHESIS = ["the [UNK] sat on the mat ."]


def test_unk_counts_as_one_token_that_matches_nothing():
    score = corpus_bleu(UNK_HYPOTHESIS, UNK_REFERENCE)
    assert (score.sys_len, score.ref_len) == (7, 9)
    assert score.counts == [6, 3, 2, 1] and score.totals == [7, 6, 5, 4]
    assert score.bp == pytest.approx(math.exp(1 - 9 / 7))  # a brevity penalty, as is due
    plain = BLEU().corpus_score(UNK_HYPOTHESIS, [UNK_REFERENCE])
    assert plain.sys_len == 9 and plain.bp == 1.0  # what scoring the string would give
    # The same as any word the reference does not have.
    zebra = corpus_bleu(["the zebra sat on the mat ."], UNK_REFERENCE)
    assert (zebra.sys_len, zebra.counts, zebra.totals) == (7, score.counts, score.totals)
    assert score.score == pytest.approx(zebra.score)


@pytest.mark.parametrize("tokenize", ["13a", "intl", "zh", "none", "char"])
def test_every_tokeniser_scores_unk_like_a_one_letter_word_not_in_the_reference(tokenize):
    hypotheses = ["the [UNK] sat on the mat.", "Hello, [UNK]!"]
    references = ["the black cat sat on the mat today.", "Hello, world!"]
    letter = [h.replace("[UNK]", "ж") for h in hypotheses]  # not in the references
    assert corpus_bleu(hypotheses, references, tokenize).sys_len == (
        corpus_bleu(letter, references, tokenize).sys_len
    )
    ours, theirs = (
        corpus_scores(hypotheses, references, tokenize),
        corpus_scores(letter, references, tokenize),
    )
    assert ours["bleu"] == pytest.approx(theirs["bleu"])
    assert ours["chrf"] == pytest.approx(theirs["chrf"])  # one character, matching nothing


def test_unk_glued_to_a_word_keeps_the_tokenisers_boundaries():
    # SentencePiece detokenises "▁a [UNK] ▁dog" as "a[UNK] dog". 13a splits the brackets off
    # "a", so [UNK] is a token of its own there; "none" keeps "a[UNK]" one token.
    assert corpus_bleu(["a[UNK] dog"], ["a big dog"]).sys_len == 3
    assert corpus_bleu(["a[UNK] dog"], ["a big dog"]).score == pytest.approx(
        corpus_bleu(["a zebra dog"], ["a big dog"]).score
    )
    assert corpus_bleu(["a[UNK] dog"], ["a big dog"], "none").sys_len == 2


def test_a_reference_with_the_placeholder_is_refused():
    with pytest.raises(ValueError, match="U\\+A66E"):
        corpus_scores(["a [UNK] dog"], [f"a {UNK_PLACEHOLDER} dog"])
    # Without [UNK] in the output there is nothing to mix up.
    assert corpus_scores(["a dog"], [f"a {UNK_PLACEHOLDER} dog"])["chrf"] > 0


def test_a_tokeniser_that_splits_the_placeholder_is_refused():
    def splitting(text: str) -> str:
        return text.replace(UNK_PLACEHOLDER, f"{UNK_PLACEHOLDER} x")

    with pytest.raises(ValueError, match="does not keep"):
        unk_as_one_token(["a [UNK]"], ["a b"], splitting)
    assert unk_as_one_token(["a b"], ["a b"], splitting) == ["a b"]  # no [UNK], no change
