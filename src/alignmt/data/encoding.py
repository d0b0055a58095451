"""Text to tokens to ids, cached as Arrow files so that a second run starts in seconds.

Each step is a `datasets.map` whose cache file is named by a hash of everything its output
depends on: the text's content fingerprint, the tokenisers' fingerprints, the vocabularies.
Change any of them and the step runs again; change nothing and it is read back (memory-mapped,
so even WMT-sized data costs no RAM). `datasets` writes each cache file under a temporary name
and renames it into place when complete, so a run killed midway leaves no file under the
cache's name, and the next run builds it again.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import datasets
import numpy as np
import pyarrow.compute as pc

from alignmt.data.vocab import Vocabulary

TOKENS = datasets.Features(
    {
        "source_tokens": datasets.List(datasets.Value("string")),
        "target_tokens": datasets.List(datasets.Value("string")),
    }
)
IDS = datasets.Features(
    {
        "source_ids": datasets.List(datasets.Value("int32")),
        "target_ids": datasets.List(datasets.Value("int32")),
    }
)


def cache_key(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def text_key(text: datasets.Dataset) -> str:
    """Content-derived: a hash of the data for in-memory text, of its cache files otherwise."""
    return text._fingerprint


def tokenize(
    text: datasets.Dataset,
    text_fingerprint: str,
    source_tokenizer,
    target_tokenizer,
    cache_dir: Path,
    num_proc: int | None = None,
    desc: str = "tokenising",
) -> tuple[datasets.Dataset, str]:
    """Columns `source_tokens`, `target_tokens`; returns them with their cache key."""
    key = cache_key(
        "tokens", text_fingerprint, source_tokenizer.fingerprint, target_tokenizer.fingerprint
    )

    def tokenize_batch(batch: dict) -> dict:
        return {
            "source_tokens": [source_tokenizer.tokenize(s) for s in batch["source"]],
            "target_tokens": [target_tokenizer.tokenize(t) for t in batch["target"]],
        }

    tokens = _cached_map(text, tokenize_batch, key, TOKENS, cache_dir, num_proc, desc)
    return tokens, key


def encode(
    tokens: datasets.Dataset,
    tokens_key: str,
    source_vocab: Vocabulary,
    target_vocab: Vocabulary,
    cache_dir: Path,
    num_proc: int | None = None,
    desc: str = "encoding",
) -> datasets.Dataset:
    """Columns `source_ids`, `target_ids` (int32 lists, without [EOS])."""
    key = cache_key("ids", tokens_key, source_vocab.fingerprint, target_vocab.fingerprint)

    def encode_batch(batch: dict) -> dict:
        return {
            "source_ids": [source_vocab.encode(s) for s in batch["source_tokens"]],
            "target_ids": [target_vocab.encode(t) for t in batch["target_tokens"]],
        }

    return _cached_map(tokens, encode_batch, key, IDS, cache_dir, num_proc, desc)


def _cached_map(dataset, function, key, features, cache_dir, num_proc, desc) -> datasets.Dataset:
    cache_dir.mkdir(parents=True, exist_ok=True)
    return dataset.map(
        function,
        batched=True,
        remove_columns=dataset.column_names,
        features=features,
        cache_file_name=str(cache_dir / f"{key}.arrow"),
        new_fingerprint=key,
        load_from_cache_file=True,
        num_proc=num_proc,
        desc=desc,
    )


def sentences(text: datasets.Dataset, columns: tuple[str, ...]) -> Iterator[str]:
    """The strings of some columns, read a batch at a time."""
    for batch in text.select_columns(list(columns)).iter(batch_size=10_000):
        for column in columns:
            yield from batch[column]


def token_counts(tokens: datasets.Dataset, column: str, rows=None) -> Counter:
    """How often each token occurs in a list column (in `rows` only, if given), counted by Arrow.

    Seconds for WMT; ties keep the order of first occurrence, as `Vocabulary.build` does.
    """
    lists = tokens.data.column(column)
    if rows is not None:
        lists = lists.take(rows)
    counted = pc.value_counts(pc.list_flatten(lists))
    tokens, counts = counted.field("values").to_pylist(), counted.field("counts").to_pylist()
    return Counter(dict(zip(tokens, counts, strict=True)))


def list_lengths(dataset: datasets.Dataset, column: str) -> np.ndarray:
    """The length of every list in a column."""
    return pc.list_value_length(dataset.data.column(column)).to_numpy().astype(np.int64)


def trainable(source_length, target_length, max_length: int | None):
    """Whether training keeps a pair: no side empty, none longer than `max_length` (arrays too)."""
    longest = np.maximum(source_length, target_length)
    shortest = np.minimum(source_length, target_length)
    return (shortest > 0) & (longest <= (np.inf if max_length is None else max_length))
