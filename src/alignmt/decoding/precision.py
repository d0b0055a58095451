"""Decoding in bfloat16, an option: the searches' matrix products at half the memory traffic.

The default, float32, is exact: outputs do not depend on it being chosen. With `bfloat16`
the searches run a bfloat16 copy of the model (weights, encoder memory and decoder state all
in bfloat16); logits become float32 before the log-softmax, and scores, attention and the
search's own arithmetic stay float32. Casting once beats autocast, which casts the encoder
memory and every activation again at every step. Outputs can differ where two words are
nearly tied: whether that moves BLEU is a measurement (benchmarks/compare.py reports test
BLEU at both).
"""

from __future__ import annotations

import copy
import weakref

import torch
from torch import nn

from alignmt.models.copy import WithSourceCopy

PRECISIONS = ("float32", "bfloat16")

# model -> (the versions of its parameters when copied, its bfloat16 copy)
_copies: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")


def _versions(model: nn.Module) -> tuple:
    """Changes whenever a parameter or buffer is updated in place (an optimiser step) or
    replaced (a loaded state dict)."""
    tensors = [*model.parameters(), *model.buffers()]
    return tuple((id(t), t._version) for t in tensors)


def model_at(precision: str, model: nn.Module) -> nn.Module:
    """The model the searches run at `precision`: `model` itself for float32, else its
    bfloat16 copy, made once and made again after the model's weights change."""
    if precision == "float32":
        return model
    if isinstance(model, WithSourceCopy):  # made per batch: the model inside is what lasts
        return WithSourceCopy(model_at(precision, model.model), model.src_copy)
    versions = _versions(model)
    cached = _copies.get(model)
    if cached is None or cached[0] != versions:
        # Outside inference mode, whatever the caller is in: the copy outlives this call.
        with torch.inference_mode(False), torch.no_grad():
            low = copy.deepcopy(model).to(torch.bfloat16)
        cached = (versions, low)
        _copies[model] = cached
    return cached[1].train(model.training)
