"""Process-wide settings for fast CPU training, applied by the command-line entry points."""

from __future__ import annotations

import ctypes
import sys

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed memory for reuse instead of returning it to the OS.

    By default glibc serves blocks above a dynamic threshold with fresh mmap pages and gives
    them back when freed, so a training step that allocates many large temporaries
    page-faults them in again every step (it once cost the fused recurrence's forward pass
    40 ms -> 65 ms). Since attention and loss work in place, the quickstart model trains as
    fast without it (`benchmarks/throughput.py --default-allocator`). Returns whether it
    applied.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (e.g. musl)
        return False
    return bool(
        libc.mallopt(_M_MMAP_THRESHOLD, 1 << 30) and libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1)
    )
