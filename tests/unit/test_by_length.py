import pytest

from alignmt.evaluation.bleu import corpus_scores
from alignmt.evaluation.by_length import (
    LENGTH_BUCKETS,
    bleu_by_length,
    bucket_index,
    bucket_label,
    bucket_metric_key,
    read_bleu_by_length_csv,
    write_bleu_by_length_csv,
)

# Source lengths on both sides of bucket boundaries; nothing falls in 21-30 or 31-40.
SOURCE_LENGTHS = [10, 11, 50, 51, 80]
REFERENCES = [
    "the cat sat on the mat",
    "a quick brown fox jumps over the lazy dog",
    "the committee approved the budget for next year",
    "he said that the results would be published soon",
    "the parliament adopted the resolution by a large majority",
]
HYPOTHESES = [
    "the cat sat on a mat",
    "a fast brown fox jumps over the lazy dog",
    "the committee approved the budget of next year",
    "he said the results will be published soon",
    "parliament adopted the resolution with a large majority",
]


@pytest.mark.parametrize(
    ("length", "label"),
    [(1, "1-10"), (10, "1-10"), (11, "11-20"), (50, "41-50"), (51, "51+"), (80, "51+")],
)
def test_bucket_boundaries(length, label):
    assert bucket_label(*LENGTH_BUCKETS[bucket_index(length)]) == label


def test_metric_keys():
    keys = [bucket_metric_key(lo, hi) for lo, hi in LENGTH_BUCKETS]
    assert keys[0] == "bleu_len_1_10"
    assert keys[-1] == "bleu_len_51_plus"
    assert len(set(keys)) == len(keys)


def test_rows_follow_buckets():
    rows = bleu_by_length(HYPOTHESES, REFERENCES, SOURCE_LENGTHS)
    assert [row["bucket"] for row in rows] == ["1-10", "11-20", "21-30", "31-40", "41-50", "51+"]
    assert [row["sentences"] for row in rows] == [1, 1, 0, 0, 1, 2]
    assert (rows[0]["lo"], rows[0]["hi"]) == (1, 10)
    assert (rows[-1]["lo"], rows[-1]["hi"]) == (51, None)


def test_empty_bucket_has_no_bleu():
    rows = bleu_by_length(HYPOTHESES, REFERENCES, SOURCE_LENGTHS)
    assert rows[2]["bleu"] is None and rows[3]["bleu"] is None


def test_bucket_bleu_is_corpus_bleu_of_its_sentences():
    rows = bleu_by_length(HYPOTHESES, REFERENCES, SOURCE_LENGTHS)
    long_only = corpus_scores(HYPOTHESES[3:], REFERENCES[3:])["bleu"]
    assert rows[-1]["bleu"] == pytest.approx(long_only)
    assert rows[0]["bleu"] == pytest.approx(corpus_scores(HYPOTHESES[:1], REFERENCES[:1])["bleu"])
    # A corpus score, not the mean of the two sentence scores.
    sentence_mean = (
        corpus_scores(HYPOTHESES[3:4], REFERENCES[3:4])["bleu"]
        + corpus_scores(HYPOTHESES[4:], REFERENCES[4:])["bleu"]
    ) / 2
    assert rows[-1]["bleu"] != pytest.approx(sentence_mean)


def test_length_mismatch_raises():
    with pytest.raises(ValueError, match="4 source lengths but 5 hypotheses"):
        bleu_by_length(HYPOTHESES, REFERENCES, SOURCE_LENGTHS[:4])


def test_csv_round_trip(tmp_path):
    rows = bleu_by_length(HYPOTHESES, REFERENCES, SOURCE_LENGTHS)
    path = tmp_path / "out" / "bleu_by_length.csv"
    write_bleu_by_length_csv(rows, path)
    lines = path.read_text().splitlines()
    assert lines[0] == "bucket,lo,hi,sentences,bleu"
    assert lines[3] == "21-30,21,30,0,"
    assert lines[-1].startswith("51+,51,,2,")
    assert read_bleu_by_length_csv(path) == rows
