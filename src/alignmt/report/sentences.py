"""The test set sentence by sentence, for the attention explorer of `report.html`:
`test_sentences.jsonl.gz` in a run directory, one JSON object a line.

Each line holds the sentence's index, source, reference and hypothesis, its sentence BLEU
(sacrebleu, effective order, [UNK] as one token as in the corpus score), its source length
and length bucket, the decoded attention with its labels (hypothesis tokens and [EOS] down,
source tokens and [EOS] across), the teacher-forced attention over the reference tokens and,
where the corpus has gold alignments, the gold line and its links in the cells of the
teacher-forced attention. Weights are rounded to three decimals: enough to look at, a
fraction of the size.
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from sacrebleu.metrics import BLEU

from alignmt.atomic import write_with
from alignmt.evaluation.alignment import parse_gold
from alignmt.evaluation.bleu import unk_as_one_token
from alignmt.evaluation.by_length import (
    LENGTH_BUCKETS,
    bucket_index,
    bucket_label,
    source_lengths,
)
from alignmt.evaluation.results import length_unit

SENTENCES_FILE = "test_sentences.jsonl.gz"
DECIMALS = 3


def sentence_bleu(hypothesis: str, reference: str, metric: BLEU | None = None) -> float:
    """sacrebleu's sentence BLEU (effective order), with [UNK] scored as one wrong token."""
    metric = metric or BLEU(effective_order=True)
    (hypothesis,) = unk_as_one_token([hypothesis], [reference], metric.tokenizer)
    return metric.sentence_score(hypothesis, [reference]).score


def _rounded(weights) -> list[list[float]] | None:
    if weights is None:
        return None
    return np.round(np.asarray(weights, dtype=np.float64), DECIMALS).tolist()


def gold_cells(
    gold_line: str, source_words: list[int], reference_words: list[int], unit: str
) -> list[list[int]]:
    """The gold links of a sentence as `[row, column, sure]` cells of its teacher-forced
    attention (rows: reference tokens, columns: source tokens). Word-level gold marks every
    token of both words; token-level gold (`unit="tokens"`) marks its cell."""
    sure, possible = parse_gold(gold_line)
    if unit == "tokens":
        source_words = list(range(len(source_words)))
        reference_words = list(range(len(reference_words)))
    cells = []
    for row, target_word in enumerate(reference_words):
        for column, source_word in enumerate(source_words):
            link = (source_word, target_word)
            if link in possible:
                cells.append([row, column, int(link in sure)])
    return cells


def sentence_records(evaluation, text, tokenizers, alignment_unit: str = "words") -> Iterator[dict]:
    """One record per test sentence, in split order (see the module docstring)."""
    source_tokenizer, target_tokenizer = tokenizers
    unit, _ = length_unit(source_tokenizer)
    lengths = source_lengths(text.sources, source_tokenizer, unit)
    metric = BLEU(effective_order=True)
    for result in evaluation.sentences:
        i, translation = result.index, result.translation
        source, reference = text.sources[i], text.targets[i]
        record = {
            "index": i,
            "source": source,
            "reference": reference,
            "hypothesis": translation.text,
            "bleu": round(sentence_bleu(translation.text, reference, metric), 2),
            "length": lengths[i],
            "bucket": bucket_label(*LENGTH_BUCKETS[bucket_index(lengths[i])]),
        }
        if translation.attention is not None:
            record["source_tokens"] = translation.source_labels
            record["target_tokens"] = translation.target_labels
            record["attention"] = _rounded(translation.attention)
        forced = result.forced_attention
        reference_tokens = target_tokenizer.tokenize(reference)
        if forced is not None and forced.shape[0] == len(reference_tokens):
            record["reference_tokens"] = reference_tokens
            record["forced_attention"] = _rounded(forced)
            if text.alignments is not None:
                record["gold"] = text.alignments[i]
                record["gold_cells"] = gold_cells(
                    text.alignments[i],
                    source_tokenizer.word_ids(source),
                    target_tokenizer.word_ids(reference),
                    alignment_unit,
                )
        yield record


def write_sentences(path: str | Path, records) -> None:
    """Records as gzipped JSON lines, written whole or not at all; `mtime=0` so equal
    results give equal bytes. Level 6 (gzip's own default) rather than Python's 9: many times
    faster for a slightly larger file."""

    def write(f) -> None:
        gzipped = gzip.GzipFile(fileobj=f, mode="wb", compresslevel=6, mtime=0)
        with gzipped as z, io.TextIOWrapper(z, "utf-8") as t:
            for record in records:
                t.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")

    write_with(path, write)


def read_sentences(path: str | Path) -> list[dict]:
    """The records of a `test_sentences.jsonl.gz`; a broken line is an error naming it."""
    records = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}, line {number}: not a JSON record ({e.msg})") from None
    return records
