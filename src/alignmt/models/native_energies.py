"""The fused recurrences' additive-attention energies as one native pass over the keys per
decoder step, forward and backward (alignmt/native/additive_energies.c).

In PyTorch ops a step's [B, S, A] energies take an add, a sigmoid and a product forward, and
seven passes backward, each reading and writing a tensor larger than a core's cache; one pass
that recomputes the sigmoid in registers is several times cheaper. Where the library cannot be
built or native passes are off (`alignmt.native`), the recurrences keep the PyTorch ops, which
compute the same values to float32 rounding.
"""

from __future__ import annotations

import ctypes
import functools

import torch

from alignmt import native
from alignmt.native import pointer as _pointer

SOURCE = native.SOURCES / "additive_energies.c"


def usable(keys: torch.Tensor) -> bool:
    """Whether the native pass computes energies over `keys`: float32 CPU tensors, and a
    library compiled and loaded on this machine."""
    return keys.dtype == torch.float32 and keys.device.type == "cpu" and library() is not None


@functools.cache
def library() -> ctypes.CDLL | None:
    lib = native.load(SOURCE.stem)
    if lib is None:
        return None
    pointer, size = ctypes.c_void_p, ctypes.c_int64
    lib.additive_energies.argtypes = [pointer] * 4 + [size] * 3
    lib.additive_energies_backward.argtypes = [pointer] * 7 + [size] * 3
    lib.weights_grad.argtypes = [pointer] * 3 + [size] * 3
    return lib


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
