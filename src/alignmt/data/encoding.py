"""Text to tokens to ids, cached as Arrow files so that a second run starts in seconds.

Each step is a `datasets.map` whose cache entry is named by a hash of everything its output
depends on: the text's content fingerprint, the tokenisers' fingerprints, the vocabularies.
Change any of them and the step runs again; change nothing and it is read back (memory-mapped,
so even WMT-sized data costs no RAM). A step runs in parallel over all available cores
(`num_proc`), on one process per cache entry: the others wait on the entry's lock and read
what it wrote. `datasets` writes each file under a temporary name and renames it into place
when complete, and the entry's manifest (which files make it) is written, by a rename too,
after all of them; so a run killed midway leaves nothing read as complete, and the next run
builds the entry again. Encoding is done by Arrow (a hash lookup of every token in the
vocabulary), tokenisation by the tokenisers' `tokenize_batch`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from alignmt.atomic import write_text
from alignmt.data.cache_lock import filling
from alignmt.data.mapped import RECORD_BATCH_ROWS
from alignmt.data.vocab import Vocabulary
from alignmt.special_tokens import UNK_ID

# With num_proc unset, one process per this many rows at least (small splits stay in one).
ROWS_PER_PROCESS = 10_000

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
            "source_tokens": source_tokenizer.tokenize_batch(batch["source"]),
            "target_tokens": target_tokenizer.tokenize_batch(batch["target"]),
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
    source_itos = pa.array(source_vocab.itos, pa.string())
    target_itos = pa.array(target_vocab.itos, pa.string())

    def encode_batch(batch: pa.Table) -> pa.Table:
        return pa.table(
            {
                "source_ids": _ids(batch.column("source_tokens"), source_itos),
                "target_ids": _ids(batch.column("target_tokens"), target_itos),
            }
        )

    tokens = tokens.with_format("arrow")
    return _cached_map(tokens, encode_batch, key, IDS, cache_dir, num_proc, desc)


def _ids(tokens: pa.ChunkedArray, itos: pa.Array) -> pa.ListArray:
    """Each token's id in `itos` (its position; [UNK] where absent), list by list."""
    lists = tokens.combine_chunks() if isinstance(tokens, pa.ChunkedArray) else tokens
    ids = pc.fill_null(pc.index_in(lists.flatten(), value_set=itos), UNK_ID).cast(pa.int32())
    offsets = pc.subtract(lists.offsets, lists.offsets[0])
    return pa.ListArray.from_arrays(offsets, ids)


def cpu_count() -> int:
    """The cores this process may run on (SLURM and cgroups restrict them), at least one."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def processes(rows: int, num_proc: int | None) -> int:
    """`num_proc` if set, else every available core, but no more than the rows can use."""
    wanted = num_proc if num_proc is not None else min(cpu_count(), rows // ROWS_PER_PROCESS)
    return max(1, min(wanted, rows))


def _cached_map(dataset, function, key, features, cache_dir, num_proc, desc) -> datasets.Dataset:
    """The map's output from the cache entry `key` if complete, else computed and recorded."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    manifest = cache_dir / f"{key}.json"
    with filling(manifest):
        if manifest.is_file():
            return read_entry(manifest)
        workers = processes(len(dataset), num_proc)
        result = dataset.map(
            function,
            batched=True,
            batch_size=RECORD_BATCH_ROWS,
            writer_batch_size=RECORD_BATCH_ROWS,  # a batch written is a batch mapped
            remove_columns=dataset.column_names,
            features=features,
            cache_file_name=str(cache_dir / f"{key}.arrow"),
            new_fingerprint=key,
            load_from_cache_file=True,
            num_proc=workers if workers > 1 else None,  # 1 would still start a pool
            desc=desc,
        )
        files = [Path(f["filename"]).name for f in result.cache_files]
        write_text(manifest, json.dumps({"files": files, "rows": len(result)}))
        return result.with_format(None)


def read_entry(manifest: Path) -> datasets.Dataset:
    """A complete cache entry: its Arrow files, memory-mapped, in order."""
    entry = json.loads(manifest.read_text())
    parts = [datasets.Dataset.from_file(str(manifest.parent / name)) for name in entry["files"]]
    dataset = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
    if len(dataset) != entry["rows"]:
        raise RuntimeError(f"cache entry {manifest} has {len(dataset)} rows, not {entry['rows']}")
    return dataset


def sampled(text: datasets.Dataset, columns: tuple[str, ...], limit: int | None) -> bool:
    """Whether `sentences` samples: the columns hold more than `limit` strings."""
    return limit is not None and len(text) * len(columns) > limit


def sentences(
    text: datasets.Dataset, columns: tuple[str, ...], limit: int | None = None, seed: int = 0
) -> Iterator[str]:
    """The strings of some columns, read a batch at a time; where they are more than `limit`,
    those of a random sample of rows (seeded, in corpus order) holding at most `limit`."""
    if sampled(text, columns, limit):
        rows = np.random.default_rng(seed).choice(len(text), limit // len(columns), replace=False)
        text = text.select(np.sort(rows))
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
    """The length of every list in a column (int32, as Arrow counts them)."""
    return pc.list_value_length(dataset.data.column(column)).to_numpy()


def trainable(source_length, target_length, max_length: int | None):
    """Whether training keeps a pair: no side empty, none longer than `max_length` (arrays too)."""
    nonempty = np.minimum(source_length, target_length) > 0
    if max_length is None:
        return nonempty
    return nonempty & (np.maximum(source_length, target_length) <= max_length)
