"""BLEU by source-length bucket: the data behind Bahdanau et al.'s Figure 2.

A length is only meaningful with its unit, so the rows and the CSV name it. Bahdanau et al.
count source words after (Moses) tokenisation; a subword model should still be bucketed by
words, not pieces, or its curve does not compare with others (`source_lengths`).
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from alignmt.atomic import replacing
from alignmt.evaluation.bleu import check_parallel, corpus_bleu

# Inclusive (lo, hi) source-length ranges; hi=None means "and longer".
LENGTH_BUCKETS: tuple[tuple[int, int | None], ...] = (
    (1, 10),
    (11, 20),
    (21, 30),
    (31, 40),
    (41, 50),
    (51, None),
)


def bucket_label(lo: int, hi: int | None) -> str:
    """`1-10`, ..., `51+`: the name used in metric keys and CSV rows."""
    return f"{lo}+" if hi is None else f"{lo}-{hi}"


def bucket_index(length: int, buckets=LENGTH_BUCKETS) -> int:
    """Index of the bucket holding `length`; lengths below the first bucket go to it."""
    for i, (_lo, hi) in enumerate(buckets):
        if hi is None or length <= hi:
            return i
    raise ValueError(f"length {length} falls in no bucket of {buckets}")


def bucket_metric_key(lo: int, hi: int | None) -> str:
    """`bleu_len_1_10`, ..., `bleu_len_51_plus`: logger-safe name of a bucket's BLEU."""
    return f"bleu_len_{lo}_plus" if hi is None else f"bleu_len_{lo}_{hi}"


LENGTH_UNITS = ("words", "tokens")


def source_lengths(sentences: Sequence[str], tokenizer, unit: str = "words") -> list[int]:
    """Each raw source sentence's length in `unit`, from a tokeniser of `alignmt.data`.

    "words": the words of the raw sentence that the tokens come from (distinct `word_ids`; a
    word that yields no token is not counted), the same whatever the tokeniser, so a subword
    model is bucketed by words rather than pieces. "tokens": the tokeniser's tokens; with the
    Moses tokeniser, Bahdanau et al.'s words after tokenisation (for any model: this
    tokeniser need not be the model's).
    """
    if unit == "words":
        return [len(set(tokenizer.word_ids(s))) for s in sentences]
    if unit == "tokens":
        return [len(tokenizer.tokenize(s)) for s in sentences]
    raise ValueError(f"unknown length unit {unit!r}; choose one of {LENGTH_UNITS}")


def bleu_by_length(
    hypotheses: list[str],
    references: list[str],
    source_lengths: list[int],
    *,
    length_unit: str,
    buckets=LENGTH_BUCKETS,
    tokenize: str = "13a",
) -> list[dict]:
    """Corpus BLEU of the sentences in each source-length bucket, one row per bucket.

    `length_unit` names what `source_lengths` count (e.g. "words", or "tokens" with the
    tokeniser: "moses:en tokens") and is kept in every row. BLEU is computed on each bucket
    as a corpus (not averaged over sentences), since sentence BLEU is noisy and biased on
    short outputs; [UNK] is scored as one token (`bleu.corpus_bleu`). Empty buckets get
    `bleu=None`.
    """
    check_parallel(hypotheses, references)
    if len(source_lengths) != len(hypotheses):
        raise ValueError(f"{len(source_lengths)} source lengths but {len(hypotheses)} hypotheses")
    if not length_unit:
        raise ValueError("name the unit of the source lengths (length_unit)")
    members: list[list[int]] = [[] for _ in buckets]
    for k, length in enumerate(source_lengths):
        members[bucket_index(length, buckets)].append(k)

    rows = []
    for (lo, hi), ks in zip(buckets, members, strict=True):
        bleu = None
        if ks:
            hyps = [hypotheses[k] for k in ks]
            refs = [references[k] for k in ks]
            bleu = corpus_bleu(hyps, refs, tokenize).score
        rows.append(
            {
                "bucket": bucket_label(lo, hi),
                "lo": lo,
                "hi": hi,
                "length_unit": length_unit,
                "sentences": len(ks),
                "bleu": bleu,
            }
        )
    return rows


CSV_COLUMNS = ("bucket", "lo", "hi", "length_unit", "sentences", "bleu")


def write_bleu_by_length_csv(rows: list[dict], path: str | Path) -> None:
    """Rows of `bleu_by_length` as CSV; blank `hi` for the open bucket, blank `bleu` if empty.

    The unit is a column of its own (the same on every row), so `pandas.read_csv` reads the
    file as it is.
    """
    with replacing(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if row[k] is None else row[k] for k in CSV_COLUMNS})


def read_bleu_by_length_csv(path: str | Path) -> list[dict]:
    """Inverse of `write_bleu_by_length_csv`, with ints, floats and None restored; a file
    written before the unit was recorded reads with `length_unit=None`."""
    with Path(path).open(newline="") as f:
        return [
            {
                "bucket": row["bucket"],
                "lo": int(row["lo"]),
                "hi": int(row["hi"]) if row["hi"] else None,
                "length_unit": row.get("length_unit") or None,
                "sentences": int(row["sentences"]),
                "bleu": float(row["bleu"]) if row["bleu"] else None,
            }
            for row in csv.DictReader(f)
        ]
