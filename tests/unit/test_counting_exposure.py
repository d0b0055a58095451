"""The exposure-bias probe reproduces the analytic table of the counting language.

The model. Target positions t = 1..61: sixty counting words, then [EOS] at t = 61. At t = 1
the model writes the source's first word (it reads it from the source): always right. At
2 <= t <= 60 it conditions on the pair (y_{t-2}, y_{t-1}), with y_0 = [BOS]. The training
data contain the pairs ([BOS], k) (every start word occurs) and (k, k+1). On such a seen pair
the model writes y_{t-1} + 1 with probability 1 - e (e = 0.01) and each of the other nine
words with probability e / 9; on an unseen pair it writes each of the ten words with
probability 1/10 (a second model writes y_{t-1} + 1 with probability 1 - e there too). At
t = 61 it writes [EOS] (the source gives the length). The oracle's right token after a prefix
is the previous word + 1 (the source's first word at t = 1, [EOS] at t = 61).

The chain. The state at position t is the kind of the model's own prefix:
  I  intact: equal to the reference up to t - 1 (so its last pair is seen);
  R  derailed, but its last pair is seen (the model counts on from a wrong word);
  U  derailed, last pair unseen.
At t = 2 the prefix ([BOS], y_1) is intact: (I, R, U) = (1, 0, 0). From t to t + 1:
  I -> I with 1 - e, I -> U with e  (a wrong word w != y_{t-1} + 1 makes the unseen (y_{t-1}, w));
  R -> R with 1 - e, R -> U with e;
  U -> R with r, U -> U with 1 - r, where r = 1/10 (or 1 - e for the second model) is the
       chance of writing y_{t-1} + 1, which makes the seen pair (y_{t-1}, y_{t-1} + 1).
The probe's columns at 2 <= t <= 60:
  (1) reference prefix: the pair is seen, so 1 - e;
  (2) own prefix: (1 - e) (I_t + R_t) + r U_t;
  (3) intact prefix: 1 - e;
  (4) intact share: I_t = (1 - e)^(t - 2), which is 1 at t = 2 (the first word is sure).
At t = 1 and t = 61 columns (1)-(3) are 1; (4) is 1 at t = 1 and (1 - e)^59 at t = 61.

Closed form of (2). With s_t = I_t + R_t, s_2 = 1 and s_{t+1} = (1 - e) s_t + r (1 - s_t),
(2) at t is exactly s_{t+1}. For r = 1/10: s_t = 10/11 + (1/11) 0.89^(t-2), so
(2) = (10 + 0.89^(t-1)) / 11 at 2 <= t <= 60; for r = 1 - e, (2) = 1 - e throughout.

At t = 2 / 10 / 30 / 59:
  (2), first model:  99.00 / 94.09 / 91.22 / 90.92 %  (the limit is 10/11 = 90.91 %)
  (2), second model: 99 % at every t
  (4), both models: 100 / 92.27 / 75.47 / 56.39 %  (= 0.99^0, ^8, ^28, ^57)
"""

import numpy as np
import pytest

from alignmt.data import Vocabulary
from alignmt.data.counting import LENGTH, WORDS, CountingCorpus, counting_oracle
from alignmt.evaluation.exposure import exposure_curves
from alignmt.special_tokens import EOS_ID

E = 0.01
POSITIONS = LENGTH + 1  # sixty words and [EOS]
UNIFORM = 1 / 10


def analytic_columns(unseen_right: float) -> dict[str, np.ndarray]:
    """The four columns at positions 1..61 from the (I, R, U) chain of the module docstring,
    iterated numerically; `unseen_right` is r, the chance of the right word on an unseen pair."""
    right = np.array([1 - E, 1 - E, unseen_right])
    step = np.array(
        [
            [1 - E, 0, E],
            [0, 1 - E, E],
            [0, unseen_right, 1 - unseen_right],
        ]
    )
    ones = np.ones(POSITIONS)
    columns = {"teacher_forced": ones.copy(), "own_prefix": ones.copy()}
    columns["intact_accuracy"], columns["intact_share"] = ones.copy(), ones.copy()
    state = np.array([1.0, 0.0, 0.0])  # at t = 2
    for t in range(2, POSITIONS + 1):
        columns["intact_share"][t - 1] = state[0]
        if t <= LENGTH:
            columns["teacher_forced"][t - 1] = 1 - E
            columns["own_prefix"][t - 1] = state @ right
            columns["intact_accuracy"][t - 1] = 1 - E
            state = state @ step
    return columns


def test_the_chain_gives_the_closed_forms_and_the_table():
    first, second = analytic_columns(UNIFORM), analytic_columns(1 - E)
    t = np.arange(2, LENGTH + 1)
    np.testing.assert_allclose(first["own_prefix"][t - 1], (10 + 0.89 ** (t - 1)) / 11)
    np.testing.assert_allclose(second["own_prefix"][t - 1], 1 - E)
    for columns in (first, second):
        np.testing.assert_allclose(columns["intact_share"][1:], (1 - E) ** np.arange(60))
    at = np.array([2, 10, 30, 59]) - 1
    np.testing.assert_allclose(first["own_prefix"][at], [0.9900, 0.9409, 0.9122, 0.9092], atol=5e-5)
    np.testing.assert_allclose(first["intact_share"][at], [1.0, 0.9227, 0.7547, 0.5639], atol=5e-5)
    np.testing.assert_allclose(first["teacher_forced"][at], 0.99)
    np.testing.assert_allclose(first["intact_accuracy"][at], 0.99)


def simulate(n: int, unseen_right: bool, seed: int):
    """n test sentences of the counting language and the model of the module docstring:
    sources, then reference, teacher-forced argmax and own output as target ids."""
    rng = np.random.default_rng(seed)
    test = CountingCorpus(seed=seed, test_size=n).load("test")
    start = np.array([int(s.split()[0]) for s in test.sources])
    reference = (start[:, None] + np.arange(LENGTH)) % 10

    def write(previous: np.ndarray, seen: np.ndarray) -> np.ndarray:
        right = (previous + 1) % 10
        other = (right + rng.integers(1, 10, previous.shape)) % 10  # one of the nine others
        careful = np.where(rng.random(previous.shape) < 1 - E, right, other)
        return np.where(seen | unseen_right, careful, rng.integers(0, 10, previous.shape))

    own = np.empty_like(reference)
    own[:, 0] = start
    own[:, 1] = write(own[:, 0], np.ones(n, dtype=bool))  # ([BOS], y_1) is seen
    for k in range(2, LENGTH):  # column k holds position k + 1
        own[:, k] = write(own[:, k - 1], own[:, k - 1] == (own[:, k - 2] + 1) % 10)
    forced = reference.copy()
    forced[:, 1:] = write(reference[:, :-1], np.ones((n, LENGTH - 1), dtype=bool))

    vocab = Vocabulary.build(s.split() for s in CountingCorpus().load("train").targets)
    ids, eos = np.array([vocab.stoi[w] for w in WORDS]), np.full((n, 1), EOS_ID)
    sequences = [np.hstack([ids[words], eos]) for words in (reference, forced, own)]
    return test.sources, vocab, *sequences


@pytest.mark.parametrize(("unseen_right", "n"), [(False, 100_000), (True, 40_000)])
def test_the_probe_matches_the_analytic_table(unseen_right, n):
    sources, vocab, reference, forced, own = simulate(n, unseen_right, seed=7)
    curves = exposure_curves(reference, forced, own, counting_oracle(sources, vocab.stoi))
    expected = analytic_columns(1 - E if unseen_right else UNIFORM)
    np.testing.assert_array_equal(curves.sentences, n)
    np.testing.assert_array_equal(curves.own_sentences, n)
    counts = {
        "teacher_forced": curves.sentences,
        "own_prefix": curves.own_sentences,
        "intact_accuracy": curves.intact_sentences,
        "intact_share": curves.sentences,
    }
    for name, p in expected.items():
        # Five binomial standard errors; exact where the model is certain (p = 0 or 1).
        tolerance = 5 * np.sqrt(p * (1 - p) / counts[name]) + 1e-12
        measured = getattr(curves, name)
        assert np.all(np.abs(measured - p) <= tolerance), (name, measured - p, tolerance)

    # Token-weighted averages: every sentence has 61 tokens on both sides. The standard error
    # of an average of correlated indicators is at most the average of their own.
    summary = curves.summary()
    bound = {name: 5 * np.mean(np.sqrt(p * (1 - p) / n)) for name, p in expected.items()}
    tf, free = expected["teacher_forced"].mean(), expected["own_prefix"].mean()
    assert summary["teacher_forced_accuracy"] == pytest.approx(tf, abs=bound["teacher_forced"])
    assert summary["own_prefix_accuracy"] == pytest.approx(free, abs=bound["own_prefix"])
    gap = bound["teacher_forced"] + bound["own_prefix"]
    assert summary["exposure_bias"] == pytest.approx(tf - free, abs=gap)
    if unseen_right:
        assert tf - free == pytest.approx(0.0, abs=1e-12)
    else:
        assert tf - free > 10 * gap  # the first model has a real exposure bias


def test_without_the_oracle_column_two_is_not_identified_and_the_rest_unchanged():
    sources, vocab, reference, forced, own = simulate(2000, False, seed=8)
    with_oracle = exposure_curves(reference, forced, own, counting_oracle(sources, vocab.stoi))
    without = exposure_curves(reference, forced, own)
    assert not without.identified and "not identifiable" in without.note
    assert np.isnan(without.own_prefix).all()
    assert "own_prefix_accuracy" not in without.summary()
    assert "exposure_bias" not in without.summary()
    # In the counting language the one right token after an intact prefix is the reference's.
    for name in ("teacher_forced", "intact_accuracy", "intact_share", "intact_sentences"):
        np.testing.assert_array_equal(getattr(without, name), getattr(with_oracle, name))
