"""The attention explorer's data: the runs' `test_sentences.jsonl.gz`, made compact for the
page. Texts are stored once per test set; weights as integers in hundredths, row after row
(a heatmap shows no finer difference, and the zeros pack well); the whole as gzipped JSON in
base64, which the page unpacks with the browser's own DecompressionStream."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
from pathlib import Path

from alignmt.report.sentences import SENTENCES_FILE, read_sentences

SCALE = 100  # weights as integers in hundredths (the file keeps three decimals)


def _flat(matrix) -> list[int] | None:
    if matrix is None:
        return None
    return [round(w * SCALE) for row in matrix for w in row]


def _fingerprint(records: list[dict]) -> str:
    text = json.dumps([(r["source"], r["reference"]) for r in records], ensure_ascii=False)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def _column(records: list[dict], key: str) -> list:
    return [r.get(key) for r in records]


def explorer_data(runs: list[tuple[str, Path]]) -> dict | None:
    """`{"testsets": {id: texts, buckets, lengths}, "runs": [...]}` for the named runs that
    have a sentences file; None if none has."""
    testsets, entries = {}, []
    for name, path in runs:
        if not (path / SENTENCES_FILE).is_file():
            continue
        records = read_sentences(path / SENTENCES_FILE)
        key = _fingerprint(records)
        testsets.setdefault(
            key,
            {
                "source": _column(records, "source"),
                "reference": _column(records, "reference"),
                "bucket": _column(records, "bucket"),
                "length": _column(records, "length"),
                "gold": _column(records, "gold"),
            },
        )
        entries.append(
            {
                "name": name,
                "path": str(path),
                "test": key,
                "hypothesis": _column(records, "hypothesis"),
                "bleu": _column(records, "bleu"),
                "source_tokens": _column(records, "source_tokens"),
                "target_tokens": _column(records, "target_tokens"),
                "reference_tokens": _column(records, "reference_tokens"),
                "attention": [_flat(r.get("attention")) for r in records],
                "forced": [_flat(r.get("forced_attention")) for r in records],
                "gold_cells": _column(records, "gold_cells"),
            }
        )
    if not entries:
        return None
    return {"scale": SCALE, "testsets": testsets, "runs": entries}


def pack(data: dict) -> str:
    """gzip + base64 of the JSON text: what the page's `explorer-data` script holds. Level 6,
    as for the sentence records (`alignmt.report.sentences`), not Python's slow 9."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    packed = gzip.compress(text.encode(), compresslevel=6, mtime=0)
    return base64.b64encode(packed).decode("ascii")


def unpack(packed: str) -> dict:
    return json.loads(gzip.decompress(base64.b64decode(packed)))
