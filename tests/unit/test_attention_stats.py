"""Attention diagnostics against values computed by hand."""

import math

import numpy as np
import pytest

from alignmt.evaluation.attention_stats import (
    attention_statistics,
    diagonal_distance,
    modal_share,
    step_entropies,
)


def test_entropy_per_step_in_nats_with_zero_log_zero():
    weights = np.array([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0], [0.25, 0.25, 0.5]])
    expected = [math.log(2), 0.0, 1.5 * math.log(2)]
    np.testing.assert_allclose(step_entropies(weights), expected)


def test_entropy_of_rows_that_do_not_sum_to_one_is_that_of_their_distribution():
    np.testing.assert_allclose(step_entropies(np.array([[0.2, 0.2]])), [math.log(2)])


def test_distance_from_the_diagonal_normalised_by_lengths():
    # Two output words, two source words (+ [EOS] row and column, left out).
    diagonal = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    anti = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    np.testing.assert_allclose(diagonal_distance(diagonal), [0.0, 0.0])
    # Centres 1/4 and 3/4 on both sides: the anti-diagonal is 1/2 away at both steps.
    np.testing.assert_allclose(diagonal_distance(anti), [0.5, 0.5])
    # One word on a side of three: positions 1/6, 1/2, 5/6 against 1/2.
    one_output = np.array([[0.5, 0.0, 0.5, 0.0], [0.0, 0.0, 0.0, 1.0]])
    np.testing.assert_allclose(diagonal_distance(one_output), [1 / 3])


def test_modal_share_counts_the_steps_on_the_most_common_position():
    weights = np.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    assert modal_share(weights) == 0.75


def test_corpus_statistics_by_hand():
    sharp = np.eye(4)  # 3 words + [EOS], each step on its own word
    uniform = np.full((4, 4), 0.25)
    stuck = np.zeros((4, 4))
    stuck[:, 3] = 1.0  # every step on the source [EOS]: a collapse
    stats = attention_statistics([sharp, uniform, stuck])
    assert stats["attention_entropy"] == pytest.approx(math.log(4) * 4 / 12)
    assert stats["attention_entropy_ratio"] == pytest.approx(4 / 12)
    assert stats["attention_uniform_steps"] == pytest.approx(4 / 12)
    # Of the sentences with focused steps (the uniform one has none), stuck collapsed.
    assert stats["attention_collapsed_sentences"] == pytest.approx(1 / 2)
    assert stats["attention_degenerate"] == 1.0  # half the sentences collapsed
    # sharp: 0 at each word step; uniform: rows (1/3 each) at |1/6 - c| + |1/2 - c| + |5/6 - c|
    # for c = 1/6, 1/2, 5/6: 1, 2/3, 1, divided by 3; stuck: no weight on words, left out.
    assert stats["attention_diagonal_distance"] == pytest.approx((0 * 3 + 8 / 9) / 6)
    # Totals over the 3 word rows: sharp 1 each, uniform 0.75 each, stuck 0: 3 of 9 words.
    assert stats["unattended_words"] == pytest.approx(3 / 9)


def test_mostly_uniform_or_collapsed_attention_is_flagged():
    uniform = np.full((5, 6), 1 / 6)
    assert attention_statistics([uniform, uniform, np.eye(4)])["attention_degenerate"] == 1.0
    stuck = np.zeros((5, 6))
    stuck[:, 0] = 1.0
    flagged = attention_statistics([stuck, stuck, np.eye(4)])
    assert flagged["attention_collapsed_sentences"] == pytest.approx(2 / 3)
    assert flagged["attention_degenerate"] == 1.0
    assert attention_statistics([np.eye(5)] * 3)["attention_degenerate"] == 0.0


def test_no_attention_is_an_error():
    with pytest.raises(ValueError, match="no attention"):
        attention_statistics([])
