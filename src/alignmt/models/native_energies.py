"""The fused recurrences' additive-attention energies as one native pass over the keys per
decoder step, forward and backward (native/additive_energies.c).

In PyTorch ops a step's [B, S, A] energies take an add, a sigmoid and a product forward, and
seven passes backward, each reading and writing a tensor larger than a core's cache; one pass
that recomputes the sigmoid in registers is several times cheaper. The C file is compiled for
this machine at first use (a second or less with the system's C compiler) into
~/.cache/alignmt/native (or $XDG_CACHE_HOME/alignmt/native), keyed by the source, the compiler
and the CPU, and runs on PyTorch's own OpenMP threads. Without a compiler, where compiling
fails, or with ALIGNMT_NATIVE=0 in the environment, the recurrences keep the PyTorch ops, which
compute the same values to float32 rounding.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("native") / "additive_energies.c"
COMPILE = ["-O3", "-march=native", "-ffast-math", "-fopenmp", "-fPIC", "-c"]
LINK = ["-shared", "-fopenmp"]  # without -ffast-math: see the C file


def usable(keys: torch.Tensor) -> bool:
    """Whether the native pass computes energies over `keys`: float32 CPU tensors, and a
    library compiled and loaded on this machine."""
    return keys.dtype == torch.float32 and keys.device.type == "cpu" and library() is not None


@functools.cache
def library() -> ctypes.CDLL | None:
    if os.environ.get("ALIGNMT_NATIVE", "1") == "0":
        return None
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        return None
    try:
        lib = ctypes.CDLL(str(_compiled(compiler)))
    except (OSError, subprocess.CalledProcessError) as error:
        warnings.warn(
            f"alignmt: could not build {SOURCE.name} ({error}); attention energies use PyTorch ops",
            stacklevel=2,
        )
        return None
    pointer, size = ctypes.c_void_p, ctypes.c_int64
    lib.additive_energies.argtypes = [pointer] * 4 + [size] * 3
    lib.additive_energies_backward.argtypes = [pointer] * 7 + [size] * 3
    lib.weights_grad.argtypes = [pointer] * 3 + [size] * 3
    return lib


def _compiled(compiler: str) -> Path:
    """The shared library for this source, compiler and CPU, built once per cache directory;
    concurrent builders each write their own file and rename it into place."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    key = hashlib.sha256(
        "\0".join([SOURCE.read_text(), version, *COMPILE, *LINK, _cpu()]).encode()
    ).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "alignmt" / "native"
    target = cache / f"additive_energies-{key}.so"
    if target.exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as scratch:
        obj, lib = Path(scratch) / "energies.o", Path(scratch) / "energies.so"
        run = functools.partial(subprocess.run, check=True, capture_output=True)
        run([compiler, *COMPILE, str(SOURCE), "-o", str(obj)])
        run([compiler, *LINK, str(obj), "-o", str(lib), "-lm"])
        os.replace(lib, target)
    return target


def _cpu() -> str:
    """What -march=native compiles for: the CPU's model and flags."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return ""
    return "\n".join(sorted({line for line in lines if line.startswith(("model name", "flags"))}))


def _pointer(tensor: torch.Tensor) -> ctypes.c_void_p:
    assert tensor.is_contiguous() and tensor.dtype == torch.float32
    return ctypes.c_void_p(tensor.data_ptr())


def energies(keys, doubled_query, two_v, out) -> torch.Tensor:
    """out [B, S] = sum_a 2 v_a sigmoid(2 K + 2 q): the energies plus sum(v), which the
    softmax ignores (fused_recurrence.AttentionSteps)."""
    B, S, A = keys.shape
    library().additive_energies(
        _pointer(keys), _pointer(doubled_query), _pointer(two_v), _pointer(out), B, S, A
    )
    return out


def energies_backward(keys, doubled_query, four_v, d_energy, d_keys, dq, dv_rows) -> None:
    """d_keys += dE/dK, dq = dE/dq and dv_rows [B, A] whose sum over rows is
    sum_s sigmoid * d_energy (so dE/dv = 2 of it minus sum(d_energy)), for d_energy [B, S]."""
    B, S, A = keys.shape
    library().additive_energies_backward(
        *map(_pointer, (keys, doubled_query, four_v, d_energy, d_keys, dq, dv_rows)), B, S, A
    )


def weights_grad(values, d_c, out) -> torch.Tensor:
    """out [B, S] = V d_c: the attention weights' gradient from the context's, d_c [B, D]."""
    B, S, D = values.shape
    library().weights_grad(_pointer(values), _pointer(d_c), _pointer(out), B, S, D)
    return out
