"""Paired significance tests: no difference, a clear one, and sacrebleu's own implementation."""

import random

import pytest
from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.significance import PairedTest

from alignmt.evaluation.bleu import corpus_scores
from alignmt.evaluation.metrics import corpus_ter
from alignmt.evaluation.significance import (
    baseline_hypotheses,
    paired_significance,
)

WORDS = [
    "a",
    "the",
    "cat",
    "dog",
    "sat",
    "ran",
    "on",
    "mat",
    "rug",
    "big",
    "small",
    "red",
    "under",
    "near",
]
METHODS = {"bootstrap": 300, "randomisation": 500}


def corpus(seed=0, sentences=80):
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(5, 12))) for _ in range(sentences)]


def noisy(references, rate, seed):
    """Each word replaced by a random one with probability `rate`."""
    rng = random.Random(seed)
    return [
        " ".join(w if rng.random() > rate else rng.choice(WORDS) for w in r.split())
        for r in references
    ]


@pytest.mark.parametrize("method", sorted(METHODS))
def test_identical_systems_differ_by_chance_alone(method):
    references = corpus()
    system = noisy(references, 0.3, seed=1)
    results = paired_significance(system, list(system), references, method, METHODS[method])
    for result in results.values():
        assert result.difference == 0.0 and result.p_value == 1.0


@pytest.mark.parametrize("method", sorted(METHODS))
def test_a_clearly_better_system_gets_the_smallest_p_the_resamples_allow(method):
    references = corpus()
    better, worse = noisy(references, 0.1, seed=1), noisy(references, 0.6, seed=2)
    results = paired_significance(better, worse, references, method, METHODS[method])
    for result in results.values():
        assert result.difference > 10
        assert result.p_value == pytest.approx(1 / (METHODS[method] + 1))


@pytest.mark.parametrize(("method", "test_type"), [("bootstrap", "bs"), ("randomisation", "ar")])
def test_p_values_are_sacrebleus_on_the_same_seed(method, test_type, monkeypatch):
    """Close systems (p well inside (0, 1)). TER's randomised differences are whole edits over
    the same reference length, so some equal the observed one exactly: those count here and
    not in sacrebleu, whose p is smaller by exactly that share."""
    references = corpus(sentences=60)
    a, b = noisy(references, 0.30, seed=3), noisy(references, 0.33, seed=4)
    monkeypatch.setenv("SACREBLEU_SEED", "7")
    metrics = {"BLEU": BLEU(), "chrF2": CHRF(), "TER": TER()}
    _, theirs = PairedTest(
        [("b", b), ("a", a)], metrics, [references], test_type=test_type, n_samples=400
    )()
    ours = paired_significance(a, b, references, method, 400, 7, ("bleu", "chrf", "ter"))
    for name, key in (("bleu", "BLEU"), ("chrf", "chrF2"), ("ter", "TER")):
        baseline, system = theirs[key]
        assert ours[name].score_a == pytest.approx(system.score)
        assert ours[name].score_b == pytest.approx(baseline.score)
        if name == "ter" and method == "randomisation":
            assert ours[name].p_value > system.p_value
        else:
            assert ours[name].p_value == system.p_value
        assert 0.05 < ours[name].p_value < 0.95  # not a comparison of extremes


def test_outputs_that_differ_in_one_sentence_are_never_significant_by_randomisation():
    """Swapping that sentence's outputs flips the sign of the difference and every other swap
    changes nothing: each trial's difference is as large as the observed one, so p = 1."""
    references = corpus()
    a = noisy(references, 0.3, seed=1)
    b = [*a[:-1], references[-1]]
    assert a[-1] != b[-1]
    for result in paired_significance(a, b, references, "randomisation", 500).values():
        assert result.difference != 0 and result.p_value == 1.0


def test_scores_are_the_reported_ones_with_unk_as_one_token_and_every_reference():
    references, more = corpus(seed=5, sentences=20), corpus(seed=6, sentences=20)
    a = [r.replace("cat", "[UNK]") for r in noisy(references, 0.2, seed=1)]
    b = noisy(references, 0.4, seed=2)
    results = paired_significance(
        a, b, references, "bootstrap", 50, metrics=("bleu", "chrf", "ter"), extra_references=[more]
    )
    reported = corpus_scores(a, references, extra_references=[more])
    assert results["bleu"].score_a == pytest.approx(reported["bleu"])
    assert results["chrf"].score_a == pytest.approx(reported["chrf"])
    assert results["ter"].score_a == pytest.approx(corpus_ter(a, references, [more])[0])


def test_bad_requests_are_refused_clearly(tmp_path):
    with pytest.raises(ValueError, match="unknown significance method 'permutation'"):
        paired_significance(["a"], ["a"], ["a"], method="permutation")
    with pytest.raises(ValueError, match="unknown metric 'meteor'"):
        paired_significance(["a"], ["b"], ["a"], metrics=("meteor",))
    with pytest.raises(ValueError, match="1 hypotheses but 2 references"):
        paired_significance(["a", "b"], ["a"], ["a", "b"])
    with pytest.raises(FileNotFoundError, match=r"no hypotheses file .*hypotheses\.txt"):
        baseline_hypotheses(tmp_path, 3)
    (tmp_path / "hypotheses.txt").write_text("x\ny\n")
    assert baseline_hypotheses(tmp_path, 2) == (tmp_path / "hypotheses.txt", ["x", "y"])
