"""Arrow cache files read through memory maps of our own, and their ids read by position.

Pages of a memory-mapped file count in a process's resident set once read, and an epoch over
WMT reads the whole encoded cache in a random order. Worse, the kernel maps in more than the
page read: 64 KiB around it (fault-around), or a whole large folio of the page cache, so even
a few batches of scattered pairs bring hundreds of megabytes in, more the larger the file.
So the maps serve only to find the data: where each buffer lies in its file (`locate`);
sequences are then read with `os.pread` into memory of our own (`read`), through the page
cache but never into the mapping. The pages the map did read (every record batch's header,
to open the files; the list offsets, for the lengths) are dropped from the process
(`MADV_DONTNEED`, `release`), which costs only a page fault when they are read again.

Opening an Arrow file reads the header of every record batch in it, and with `datasets`'
default of 1,000 rows a batch every opening of a WMT-sized file would bring gigabytes of
pages in: every Arrow file we write holds record batches of `RECORD_BATCH_ROWS`.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

# Rows per record batch of the Arrow files we have written (the corpora's, the caches').
RECORD_BATCH_ROWS = 10_000


class MappedTable:
    """The Arrow IPC stream files of one cache entry (as `datasets` writes them), in order, as
    one table whose buffers are views of the maps (no copy)."""

    def __init__(self, paths: Sequence[str | Path]):
        self.paths = [str(p) for p in paths]
        self._maps, self._files, self._starts = [], [], []
        tables = []
        for path in self.paths:
            f = open(path, "rb")  # noqa: SIM115 (kept open: `read` reads from it)
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            buffer = pa.py_buffer(mapped)
            self._maps.append(mapped)
            self._files.append(f)
            self._starts.append(buffer.address)
            tables.append(pa.ipc.open_stream(buffer).read_all())
        self.table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]

    def locate(self, array: np.ndarray) -> tuple[int, int, str] | None:
        """(file number, byte position, path) where a view of one of the maps starts; None
        where it is not one, or where this platform cannot read by position."""
        if not hasattr(os, "pread"):
            return None
        address = array.__array_interface__["data"][0]
        for f, start, mapped, path in zip(
            self._files, self._starts, self._maps, self.paths, strict=True
        ):
            if start <= address < start + len(mapped):
                return f.fileno(), address - start, path
        return None

    @staticmethod
    def read(where: tuple[int, int, str], dtype: np.dtype, start: int, stop: int) -> np.ndarray:
        """Items start..stop of the array `locate` found at `where`, read (not mapped)."""
        fd, position, path = where
        size = np.dtype(dtype).itemsize
        data = os.pread(fd, (stop - start) * size, position + start * size)
        if len(data) != (stop - start) * size:
            end = position + start * size + len(data)
            raise OSError(f"cache file {path} ends at byte {end}: changed while in use?")
        return np.frombuffer(data, dtype)

    def release(self) -> None:
        """Drop the pages read so far from this process's resident set (not from the cache)."""
        advice = getattr(mmap, "MADV_DONTNEED", None)
        if advice is None:  # not offered on this platform: the kernel reclaims them itself
            return
        for mapped in self._maps:
            mapped.madvise(advice)

    def __reduce__(self):
        """A worker process that unpickles this (spawn) maps the files itself."""
        return MappedTable, (self.paths,)
