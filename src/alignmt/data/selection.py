"""A published data selection as line ids of the training split (e.g. Axelrod-style selection).

The file has one 0-based line id a line (blank lines ignored); the training split keeps those
pairs in the file's order. A selection given as files instead is a training split made of
those files (`data.corpus.splits.train`, see `alignmt.data.sources`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def read_selection(path: str | Path, size: int, key: str = "data.corpus.selection") -> np.ndarray:
    """The line ids in `path`, each checked to lie in a split of `size` pairs."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"{key}: no such file: {path}")
    lines = path.read_bytes().split(b"\n")
    numbers = [k for k, line in enumerate(lines, start=1) if line.strip()]
    try:
        ids = np.array([lines[k - 1] for k in numbers], dtype=np.int64)
    except ValueError:
        bad = next(k for k in numbers if not lines[k - 1].strip().isdigit())
        raise ValueError(
            f"{path}:{bad}: expected a line id (a non-negative integer), "
            f"got {lines[bad - 1][:40].decode(errors='replace')!r}"
        ) from None
    if not len(ids):
        raise ValueError(f"{key}: {path} selects no lines")
    outside = np.flatnonzero((ids < 0) | (ids >= size))
    if len(outside):
        bad = numbers[outside[0]]
        raise ValueError(
            f"{path}:{bad}: line id {ids[outside[0]]} is outside the training split "
            f"({size} pairs, ids 0..{size - 1})"
        )
    return ids
