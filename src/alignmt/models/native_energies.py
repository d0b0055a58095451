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
    lib.additive_energies.argtypes = [pointer] * 6 + [size] * 4
    lib.additive_energies_backward.argtypes = [pointer] * 11 + [size] * 4
    lib.weights_grad.argtypes = [pointer] * 3 + [size] * 3
    lib.query_energies.argtypes = [pointer] * 4 + [size] * 4
    return lib


def energies(keys, doubled_query, two_v, out, coverage=None, w_cov_t=None) -> torch.Tensor:
    """out [B, S] = sum_a 2 v_a sigmoid(2 (K + W_cov C) + 2 q): the energies plus sum(v), which
    the softmax ignores (fused_recurrence.AttentionSteps). Coverage C [B, S, n] and W_cov's
    transpose [n, A] enter inside the pass, so K + W_cov C is never written."""
    B, S, A = keys.shape
    n = 0 if coverage is None else coverage.size(-1)
    library().additive_energies(
        *map(_pointer, (keys, doubled_query, two_v, coverage, w_cov_t, out)), B, S, A, n
    )
    return out


def query_energies(queries, keys, v) -> torch.Tensor:
    """v . tanh(q_t + k_s) [B, T, S] for a search step's query terms [B, T, A] and keys
    [B, S, A], without gradients, in one pass."""
    (B, T, A), S = queries.shape, keys.size(1)
    queries, keys, v = queries.contiguous(), keys.contiguous(), v.contiguous()
    out = queries.new_empty(B, T, S)
    library().query_energies(*map(_pointer, (keys, queries, v, out)), B, T, S, A)
    return out


def energies_backward(
    keys, doubled_query, four_v, d_energy, d_keys, dq, dv_rows, coverage=None, w_cov_t=None,
    d_coverage=None, d_w_cov_t=None,
) -> None:  # fmt: skip
    """d_keys += dE/dK, dq = dE/dq and dv_rows [B, A] whose sum over rows is
    sum_s sigmoid * d_energy (so dE/dv = 2 of it minus sum(d_energy)), for d_energy [B, S];
    with coverage, also d_coverage += dE/dC and d_w_cov_t += dE/dW_cov (transposed)."""
    B, S, A = keys.shape
    n = 0 if coverage is None else coverage.size(-1)
    tensors = keys, doubled_query, four_v, coverage, w_cov_t, d_energy, d_keys, dq, dv_rows
    library().additive_energies_backward(
        *map(_pointer, (*tensors, d_coverage, d_w_cov_t)), B, S, A, n
    )


def weights_grad(values, d_c, out) -> torch.Tensor:
    """out [B, S] = V d_c: the attention weights' gradient from the context's, d_c [B, D]."""
    B, S, D = values.shape
    library().weights_grad(_pointer(values), _pointer(d_c), _pointer(out), B, S, D)
    return out
