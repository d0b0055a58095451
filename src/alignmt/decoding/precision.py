"""Decoding in bfloat16, an option: the searches' matrix products at half the memory traffic.

The default, float32, is exact: outputs do not depend on it being chosen. With `bfloat16`
the model's steps run under torch's autocast (matrix products and recurrent cells in
bfloat16, reductions such as softmax in float32); scores, attention and the search's own
arithmetic stay float32. Outputs can then differ where two words are nearly tied: whether
that moves BLEU is a measurement (benchmarks/compare.py reports test BLEU at both).
"""

from __future__ import annotations

import contextlib

import torch

PRECISIONS = ("float32", "bfloat16")


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")


def model_precision(precision: str, device: torch.device):
    """The context the model's start and steps run in."""
    if precision == "float32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)
