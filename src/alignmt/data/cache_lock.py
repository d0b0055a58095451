"""One process fills each cache entry; the others wait for it and read the complete entry.

A file lock per entry works alike for DDP ranks, SLURM tasks and unrelated runs that share a
cache, and before any process group exists (`alignmt.build.build` prepares the data before
Lightning starts one). Locks live in `<cache>/locks/`, apart from the entries, and only
order the work: an entry is complete when its final file (or manifest) is in place, which
is written by a rename, so a process killed while holding a lock leaves nothing that reads
as complete, and the lock dies with it. On a shared file system the lock needs working
`flock` (NFSv4, Lustre mounted with `flock`); otherwise give each node its own cache
(`ALIGNMT_CACHE` on node-local disk): each node then prepares once.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

log = logging.getLogger(__name__)


def lock_file(entry: Path) -> Path:
    """The lock of cache entry `<cache>/<step>/<name>`: `<cache>/locks/<step>-<name>.lock`."""
    entry = Path(entry)
    return entry.parent.parent / "locks" / f"{entry.parent.name}-{entry.name}.lock"


@contextmanager
def filling(entry: Path) -> Iterator[None]:
    """Hold the lock of cache entry `entry` (waiting, with a log line, while another process
    holds it); inside, check whether the entry is complete before building it."""
    path = lock_file(entry)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.info("process %d waits for another process to fill %s", os.getpid(), entry)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()
