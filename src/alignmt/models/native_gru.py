"""The fused recurrences' GRU step, forward and backward, as one native pass over the batch
(alignmt/native/gru_update.c) instead of six PyTorch ops forward and eleven backward, each
a pass and a call of its own at every decoder step. Where the library cannot be built or
native passes are off (`alignmt.native`), fused_recurrence keeps the PyTorch ops, which
compute the same values to float32 rounding."""

from __future__ import annotations

import ctypes
import functools

import torch

from alignmt import native
from alignmt.native import pointer


@functools.cache
def library() -> ctypes.CDLL | None:
    lib = native.load("gru_update")
    if lib is not None:
        p, size = ctypes.c_void_p, ctypes.c_int64
        lib.gru_update.argtypes = [p, p, size, p, size, p, p, p, size, size]
        lib.gru_update_backward.argtypes = [p, p, size, p, p, p, p, size, p, size, size]
    return lib


def usable(*tensors: torch.Tensor) -> bool:
    """Whether the native pass takes these tensors: float32 CPU, rows contiguous, and a library
    compiled and loaded on this machine."""
    return (
        all(t.dtype == torch.float32 and t.device.type == "cpu" for t in tensors)
        and all(t.stride(-1) == 1 for t in tensors)
        and library() is not None
    )


def update(gx, gh, s, gates, gh_n, out) -> torch.Tensor:
    """fused_recurrence.gru_update_into in one pass; gh and s may be row slices of wider
    buffers, gx and the outputs are contiguous."""
    B, H = s.shape
    gx = gx.contiguous()
    assert all(t.is_contiguous() for t in (gates, gh_n, out))
    library().gru_update(
        pointer(gx), pointer(gh, rows=True), gh.stride(0), pointer(s, rows=True), s.stride(0),
        pointer(gates), pointer(gh_n), pointer(out), B, H,
    )  # fmt: skip
    return out


def update_backward(ds, s, gates, gh_n, d_gx, d_gh) -> torch.Tensor:
    """fused_recurrence.gru_update_into_backward in one pass; s and d_gh may be row slices."""
    B, H = s.shape
    ds = ds.contiguous()
    direct = torch.empty_like(ds)  # ds z
    assert all(t.is_contiguous() for t in (gates, gh_n, d_gx))
    library().gru_update_backward(
        pointer(ds), pointer(s, rows=True), s.stride(0), pointer(gates), pointer(gh_n),
        pointer(d_gx), pointer(d_gh, rows=True), d_gh.stride(0), pointer(direct), B, H,
    )  # fmt: skip
    return direct
