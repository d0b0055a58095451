import re

import numpy as np
import pytest

from alignmt.evaluation.alignment import (
    alignment_error_rate,
    format_pharaoh,
    hard_alignment,
    parse_pharaoh,
)


def test_pharaoh_round_trip():
    line = "0-0 1-2 2-1 10-3"
    assert parse_pharaoh(line) == {(0, 0), (1, 2), (2, 1), (10, 3)}
    assert format_pharaoh(parse_pharaoh(line)) == line
    assert format_pharaoh({(2, 1), (0, 0)}) == "0-0 2-1"


def test_pharaoh_empty_line():
    assert parse_pharaoh("") == set()
    assert parse_pharaoh("  \n") == set()
    assert format_pharaoh(set()) == ""


@pytest.mark.parametrize("bad", ["0-", "a-1", "1_2", "0-1-2", "-1-2", "1"])
def test_pharaoh_malformed_names_token(bad):
    with pytest.raises(ValueError, match=re.escape(repr(bad))):
        parse_pharaoh(f"0-0 {bad} 2-2")


# Attention over 3 source words (columns) for 3 target words (rows).
WEIGHTS = np.array(
    [
        [0.7, 0.2, 0.1],
        [0.1, 0.3, 0.6],
        [0.4, 0.4, 0.2],
    ]
)


def test_hard_alignment_argmax():
    # Target 2 ties between sources 0 and 1; numpy's argmax takes the first.
    assert hard_alignment(WEIGHTS) == {(0, 0), (2, 1), (0, 2)}


def test_hard_alignment_threshold():
    assert hard_alignment(WEIGHTS, "threshold", 0.5) == {(0, 0), (2, 1)}
    assert hard_alignment(WEIGHTS, "threshold", 0.4) == {(0, 0), (2, 1), (0, 2), (1, 2)}
    assert hard_alignment(WEIGHTS, "threshold", 0.8) == set()


def test_hard_alignment_unknown_method():
    with pytest.raises(ValueError, match=r"argmax.*threshold"):
        hard_alignment(WEIGHTS, "softmax")


def test_gold_against_itself_is_zero():
    gold = [parse_pharaoh("0-0 1-1 2-3"), parse_pharaoh("0-1 1-0")]
    assert alignment_error_rate(gold, gold) == 0.0


def test_known_wrong_alignment():
    predicted = [parse_pharaoh("0-0 1-2 2-1"), parse_pharaoh("0-0")]
    sure = [parse_pharaoh("0-0 1-1 2-2"), parse_pharaoh("0-0 1-1")]
    # |A| = 3 + 1 = 4, |S| = 3 + 2 = 5, |A∩S| = |A∩P| = 1 + 1 = 2 (P = S)
    # AER = 1 - (2 + 2) / (4 + 5) = 5/9
    assert alignment_error_rate(predicted, sure) == pytest.approx(5 / 9)


def test_possible_links_are_not_penalised():
    predicted = [parse_pharaoh("0-0 1-2 2-1")]
    sure = [parse_pharaoh("0-0 1-1")]
    possible = [parse_pharaoh("1-2")]  # sure links count as possible too
    # |A| = 3, |S| = 2, |A∩S| = 1, |A∩P| = |{0-0, 1-2}| = 2
    # AER = 1 - (1 + 2) / (3 + 2) = 2/5
    assert alignment_error_rate(predicted, sure, possible) == pytest.approx(2 / 5)


def test_disjoint_alignment_is_one():
    assert alignment_error_rate([{(0, 1)}], [{(0, 0)}]) == 1.0


def test_length_mismatch_raises():
    with pytest.raises(ValueError, match="2 predicted, 1 sure"):
        alignment_error_rate([set(), set()], [{(0, 0)}])
