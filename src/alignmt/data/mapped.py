"""Arrow cache files read through memory maps of our own, whose pages can be handed back.

Pages of a memory-mapped file count in a process's resident set once read, and an epoch over
WMT reads the whole encoded cache: through `datasets`' own maps a training process's RSS grows
to the size of that cache. The pages of a read-only shared map belong to the kernel's page
cache; dropping them from the process (`MADV_DONTNEED`) costs only a page fault when they are
read again, so `release()` keeps RSS at what the process itself allocates.

Opening an Arrow file reads the header of every record batch in it, and the kernel maps in
64 KiB around each page read (fault-around, which no `madvise` turns off): with `datasets`'
default of 1,000 rows a batch, every opening of a WMT-sized file would bring gigabytes of
pages in. So every Arrow file we have written holds record batches of `RECORD_BATCH_ROWS`.
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

# Rows per record batch of the Arrow files we have written (the corpora's, the caches').
RECORD_BATCH_ROWS = 10_000


class MappedTable:
    """The Arrow IPC stream files of one cache entry (as `datasets` writes them), in order, as
    one table whose buffers are views of the maps (no copy)."""

    def __init__(self, paths: Sequence[str | Path]):
        self.paths = [str(p) for p in paths]
        self._maps = []
        tables = []
        for path in self.paths:
            with open(path, "rb") as f:
                mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            self._maps.append(mapped)
            tables.append(pa.ipc.open_stream(pa.py_buffer(mapped)).read_all())
        self.table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]

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
