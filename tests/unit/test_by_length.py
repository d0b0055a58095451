from pathlib import Path

import pytest

from alignmt.data import MosesTokenizer, SentencePieceTokenizer, WhitespaceTokenizer
from alignmt.data.corpus import read_lines
from alignmt.evaluation.bleu import corpus_scores
from alignmt.evaluation.by_length import (
    LENGTH_BUCKETS,
    bleu_by_length,
    bucket_index,
    bucket_label,
    bucket_metric_key,
    read_bleu_by_length_csv,
    source_lengths,
    write_bleu_by_length_csv,
)

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"

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
    rows = bleu_by_length(HYPOTHESES, REFERENCES, SOURCE_LENGTHS, length_unit="words")
    assert [row["bucket"] for row in rows] == ["1-10", "11-20", "21-30", "31-40", "41-50", "51+"]
    assert [row["sentences"] for row in rows] == [1, 1, 0, 0, 1, 2]
    assert (rows[0]["lo"], rows[0]["hi"]) == (1, 10)
    assert (rows[-1]["lo"], rows[-1]["hi"]) == (51, None)


def test_empty_bucket_has_no_bleu():
    rows = bleu_by_length(HYPOTHESES, REFERENCES, SOURCE_LENGTHS, length_unit="words")
    assert rows[2]["bleu"] is None and rows[3]["bleu"] is None


def test_bucket_bleu_is_corpus_bleu_of_its_sentences():
    rows = bleu_by_length(HYPOTHESES, REFERENCES, SOURCE_LENGTHS, length_unit="words")
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
        bleu_by_length(HYPOTHESES, REFERENCES, SOURCE_LENGTHS[:4], length_unit="words")


def test_csv_round_trip(tmp_path):
    rows = bleu_by_length(HYPOTHESES, REFERENCES, SOURCE_LENGTHS, length_unit="words")
    path = tmp_path / "out" / "bleu_by_length.csv"
    write_bleu_by_length_csv(rows, path)
    lines = path.read_text().splitlines()
    assert lines[0] == "bucket,lo,hi,length_unit,sentences,bleu"
    assert lines[3] == "21-30,21,30,words,0,"
    assert lines[-1].startswith("51+,51,,words,2,")
    assert read_bleu_by_length_csv(path) == rows


def test_csv_reads_cleanly_with_pandas(tmp_path):
    pandas = pytest.importorskip("pandas")
    rows = bleu_by_length(HYPOTHESES, REFERENCES, SOURCE_LENGTHS, length_unit="moses:en tokens")
    write_bleu_by_length_csv(rows, tmp_path / "bleu_by_length.csv")
    table = pandas.read_csv(tmp_path / "bleu_by_length.csv")
    assert table["length_unit"].tolist() == ["moses:en tokens"] * 6
    assert table["sentences"].tolist() == [1, 1, 0, 0, 1, 2]
    assert table["bleu"].isna().tolist() == [False, False, True, True, False, False]


def test_a_csv_without_the_unit_column_still_reads(tmp_path):
    path = tmp_path / "old.csv"
    path.write_text("bucket,lo,hi,sentences,bleu\n1-10,1,10,3,12.5\n51+,51,,0,\n")
    assert read_bleu_by_length_csv(path) == [
        {"bucket": "1-10", "lo": 1, "hi": 10, "length_unit": None, "sentences": 3, "bleu": 12.5},
        {"bucket": "51+", "lo": 51, "hi": None, "length_unit": None, "sentences": 0, "bleu": None},
    ]


def test_the_unit_must_be_named():
    with pytest.raises(TypeError, match="length_unit"):
        bleu_by_length(HYPOTHESES, REFERENCES, SOURCE_LENGTHS)
    with pytest.raises(ValueError, match="unit"):
        bleu_by_length(HYPOTHESES, REFERENCES, SOURCE_LENGTHS, length_unit="")


def test_source_lengths_in_words_and_in_tokens():
    sentences = ['A man, a "plan".', "Hello  world"]
    # Words: A | man, | a | "plan". and Hello | world.
    # Moses tokens: A man , a " plan " . and Hello world.
    moses = MosesTokenizer("en")
    assert source_lengths(sentences, moses) == [4, 2]
    assert source_lengths(sentences, moses, "tokens") == [8, 2]
    assert source_lengths(sentences, WhitespaceTokenizer(), "tokens") == [4, 2]
    with pytest.raises(ValueError, match="unknown length unit 'pieces'"):
        source_lengths(sentences, moses, "pieces")


@pytest.mark.skipif(
    not (SHARED_DATA / "multi30k").is_dir(),
    reason=f"Multi30k not found at {SHARED_DATA / 'multi30k'} (the repository's ../shared/data)",
)
def test_a_subword_model_is_bucketed_by_words_not_pieces(tmp_path):
    lines = read_lines(SHARED_DATA / "multi30k" / "train.de.gz")[:2000]
    tokenizer = SentencePieceTokenizer("unigram", vocab_size=400)
    tokenizer.fit(lines, tmp_path / "de.model")
    sentences = read_lines(SHARED_DATA / "multi30k" / "val.de.gz")[:300]
    words = source_lengths(sentences, tokenizer)
    assert words == [len(s.split()) for s in sentences]
    pieces = source_lengths(sentences, tokenizer, "tokens")
    assert all(p >= w for p, w in zip(pieces, words, strict=True))
    # Buckets differ: by pieces, many sentences land in longer buckets than by words.
    moved = sum(bucket_index(p) > bucket_index(w) for p, w in zip(pieces, words, strict=True))
    assert moved > len(sentences) // 4


def test_buckets_score_unk_as_one_token():
    hypotheses = ["the [UNK] sat on the mat", "a fast brown fox"]
    references = ["the black cat sat on the mat", "a quick brown fox"]
    rows = bleu_by_length(hypotheses, references, [3, 30], length_unit="words")
    assert rows[0]["bleu"] == pytest.approx(corpus_scores(hypotheses[:1], references[:1])["bleu"])
    assert rows[0]["bleu"] == pytest.approx(
        corpus_scores(["the zebra sat on the mat"], references[:1])["bleu"]
    )
