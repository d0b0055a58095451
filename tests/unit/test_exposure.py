"""The exposure-bias probe on hand-made outputs whose four columns are worked out by hand."""

import numpy as np
import pytest

from alignmt.evaluation.exposure import CSV_COLUMNS, exposure_curves
from alignmt.evaluation.source_coverage import source_coverage_errors

E = 3  # [EOS]

# Sentence 0: the model derails at position 2 (5 for 2) but then counts on from its own 5.
# Sentence 1: the model is right until the reference ends, then writes 5 before [EOS].
REFERENCES = [[1, 2, 3, 4, E], [3, 4, E]]
TEACHER_FORCED = [[1, 2, 9, 4, E], [3, 4, E]]
OWN = [[1, 5, 6, 7, E], [3, 4, 5, E]]


def counting_oracle(i, prefix):
    """Right after a prefix: the reference's first word, then the previous id + 1, and [EOS]
    once the sentence has as many words as its reference."""
    words = len(REFERENCES[i]) - 1
    if len(prefix) >= words:
        return {E}
    return {REFERENCES[i][0]} if not prefix else {prefix[-1] + 1}


def test_the_four_columns_by_hand():
    curves = exposure_curves(REFERENCES, TEACHER_FORCED, OWN, counting_oracle)
    # (1) Teacher forced: sentence 0 hits 1 1 0 1 1, sentence 1 hits 1 1 1.
    np.testing.assert_array_equal(curves.sentences, [2, 2, 2, 1, 1])
    np.testing.assert_array_equal(curves.teacher_forced, [1, 1, 0.5, 1, 1])
    # (2) Own prefix, by the oracle: sentence 0 wants 1 2 6 7 [EOS] after its own prefixes and
    # gets 1 5 6 7 [EOS] (hits 1 0 1 1 1); sentence 1 wants 3 4 [EOS] [EOS], gets 3 4 5 [EOS]
    # (hits 1 1 0 1).
    np.testing.assert_array_equal(curves.own_sentences, [2, 2, 2, 2, 1])
    np.testing.assert_array_equal(curves.own_prefix, [1, 0.5, 0.5, 1, 1])
    # (4) Intact prefixes: sentence 0 at positions 1-2, sentence 1 at 1-3.
    np.testing.assert_array_equal(curves.intact_sentences, [2, 2, 1, 0, 0])
    np.testing.assert_array_equal(curves.intact_share, [1, 1, 0.5, 0, 0])
    # (3) On those: sentence 0 hits 1 0, sentence 1 hits 1 1 0 (5 where [EOS] is right).
    np.testing.assert_array_equal(curves.intact_accuracy, [1, 0.5, 0, np.nan, np.nan])
    summary = curves.summary()
    assert summary["teacher_forced_accuracy"] == pytest.approx(7 / 8)
    assert summary["own_prefix_accuracy"] == pytest.approx(7 / 9)
    assert summary["exposure_bias"] == pytest.approx(7 / 8 - 7 / 9)
    assert summary["intact_accuracy"] == pytest.approx(3 / 5)
    assert summary["intact_share"] == pytest.approx(5 / 8)
    assert curves.identified and curves.note is None


def test_without_an_oracle_own_prefix_accuracy_is_not_identified():
    curves = exposure_curves(REFERENCES, TEACHER_FORCED, OWN)
    assert not curves.identified
    assert "not identifiable" in curves.note
    assert np.isnan(curves.own_prefix).all()
    assert set(curves.summary()) == {"teacher_forced_accuracy", "intact_accuracy", "intact_share"}
    # On intact prefixes the reference decides: the same hits as the oracle's here.
    np.testing.assert_array_equal(curves.intact_accuracy, [1, 0.5, 0, np.nan, np.nan])
    np.testing.assert_array_equal(curves.intact_share, [1, 1, 0.5, 0, 0])


def test_an_output_that_stops_short_misses_on_its_intact_prefix():
    # Own output [7] without [EOS] (cut off): intact at positions 1 and 2, nothing at 2.
    curves = exposure_curves([[7, 8, E]], [[7, 8, E]], [[7]])
    np.testing.assert_array_equal(curves.intact_sentences, [1, 1, 0])
    np.testing.assert_array_equal(curves.intact_accuracy, [1, 0, np.nan])
    np.testing.assert_array_equal(curves.own_sentences, [1, 0, 0])


def test_mismatched_inputs_are_refused():
    with pytest.raises(ValueError, match="same, non-zero number"):
        exposure_curves([[1]], [], [[1]])
    with pytest.raises(ValueError, match="same, non-zero number"):
        exposure_curves([], [], [])
    with pytest.raises(ValueError, match="cover every reference position"):
        exposure_curves([[1, E]], [[1]], [[1, E]])


def test_the_csv_reads_back_with_pandas(tmp_path):
    pandas = pytest.importorskip("pandas")
    curves = exposure_curves(REFERENCES, TEACHER_FORCED, OWN)
    path = tmp_path / "out" / "exposure.csv"
    curves.write_csv(path)
    assert path.read_text().splitlines()[0] == ",".join(CSV_COLUMNS)
    table = pandas.read_csv(path)
    assert list(table.columns) == list(CSV_COLUMNS)
    assert table["position"].tolist() == [1, 2, 3, 4, 5]
    assert table["own_prefix"].isna().all()  # blank without an oracle
    np.testing.assert_array_equal(table["intact_share"], [1, 1, 0.5, 0, 0])
    np.testing.assert_array_equal(table["intact_sentences"], [2, 2, 1, 0, 0])
    assert table["intact_accuracy"].isna().tolist() == [False, False, False, True, True]


def test_dropped_and_repeated_source_words():
    once = np.eye(3)  # every word attended exactly once
    skipped = np.array([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])  # word 1 dropped,
    assert source_coverage_errors([once]) == {"dropped_words": 0.0, "repeated_words": 0.0}
    counts = source_coverage_errors([once, skipped])  # word 0 of the second repeated (2.0)
    assert counts == {"dropped_words": 1 / 6, "repeated_words": 1 / 6}
