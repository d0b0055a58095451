"""Small C passes (the C files beside this one), compiled for this machine at first use.

Each is a loop PyTorch would run as several passes over a tensor larger than a core's cache.
A file is compiled with the system's C compiler (a second or less) into
~/.cache/alignmt/native (or $XDG_CACHE_HOME/alignmt/native), keyed by the source, the compiler
and the CPU, and runs on PyTorch's own OpenMP threads. Each load marks its library as used;
libraries (and interrupted builds' folders) no process has used for 30 days are deleted, so
builds for older sources, compilers or CPUs do not pile up. Without a compiler, where compiling
fails (with a warning), or with ALIGNMT_NATIVE=0 in the environment, `load` returns None and
the callers keep their PyTorch ops.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import time
import warnings
from pathlib import Path

import torch

SOURCES = Path(__file__).parent
X86 = platform.machine().lower() in ("x86_64", "amd64")
WIDE = ["-mprefer-vector-width=512"] if X86 else []  # full-width AVX-512 where there is one
COMPILE = ["-O3", "-march=native", *WIDE, "-ffast-math", "-fopenmp", "-fPIC", "-c"]
LINK = ["-shared", "-fopenmp"]  # without -ffast-math, which would set flush-to-zero process-wide
STALE_S = 30 * 24 * 3600  # unused this long, a library is pruned (a shared home may hold
# several machines' builds, each in use)


def load(name: str) -> ctypes.CDLL | None:
    """The library built from SOURCES/<name>.c, or None where native passes are off."""
    if os.environ.get("ALIGNMT_NATIVE", "1") == "0":
        return None
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        return None
    source = SOURCES / f"{name}.c"
    try:
        return ctypes.CDLL(str(_compiled(compiler, source)))
    except (OSError, subprocess.CalledProcessError) as error:
        warnings.warn(
            f"alignmt: could not build {source.name} ({error}); PyTorch ops run instead",
            stacklevel=3,
        )
        return None


def pointer(tensor: torch.Tensor | None, rows: bool = False) -> ctypes.c_void_p | None:
    """A contiguous float32 or int64 tensor's data for a C argument (None stays NULL); with
    `rows`, a matrix whose rows need only be contiguous (the caller passes the row stride)."""
    if tensor is None:
        return None
    laid_out = tensor.stride(-1) == 1 if rows else tensor.is_contiguous()
    assert laid_out and tensor.dtype in (torch.float32, torch.int64)
    return ctypes.c_void_p(tensor.data_ptr())


def _compiled(compiler: str, source: Path) -> Path:
    """The shared library for this source, compiler and CPU, built once per cache directory;
    concurrent builders each write their own file and rename it into place."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    key = hashlib.sha256(
        "\0".join([source.read_text(), version, *COMPILE, *LINK, _cpu()]).encode()
    ).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "alignmt" / "native"
    target = cache / f"{source.stem}-{key}.so"
    if not target.exists():
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache) as scratch:
            obj, lib = Path(scratch) / f"{source.stem}.o", Path(scratch) / f"{source.stem}.so"
            run = functools.partial(subprocess.run, check=True, capture_output=True)
            run([compiler, *COMPILE, str(source), "-o", str(obj)])
            run([compiler, *LINK, str(obj), "-o", str(lib), "-lm"])
            os.replace(lib, target)
    os.utime(target)  # in use: spared by _prune
    _prune(cache)
    return target


def _prune(cache: Path) -> None:
    """Delete the libraries, and the folders of builds killed midway, unused for STALE_S."""
    cutoff = time.time() - STALE_S
    for path in [*cache.glob("*.so"), *cache.glob("tmp*")]:
        with contextlib.suppress(FileNotFoundError):  # another process pruned it first
            if path.stat().st_mtime >= cutoff:
                continue
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)  # pruning is best effort
            else:
                path.unlink()


def _cpu() -> str:
    """What -march=native compiles for: the CPU's model and flags."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return ""
    return "\n".join(sorted({line for line in lines if line.startswith(("model name", "flags"))}))
