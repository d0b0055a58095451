"""Decoding precision: float32 (exact, the default), bfloat16 or int8, the last two options.

float32 is exact: outputs do not depend on it being chosen. With `bfloat16` the searches run
a bfloat16 copy of the model (weights, encoder memory and decoder state all in bfloat16);
logits become float32 before the log-softmax, and scores, attention and the search's own
arithmetic stay float32. Casting once beats autocast, which casts the encoder memory and every
activation again at every step; it pays on CPUs with bfloat16 matrix units (AMX, AVX-512
BF16) and costs on those without. With `int8` (CPU only) the searches run a float32 copy whose
decoders multiply in int8 (alignmt.models.int8): every matrix of a step, the vocabulary
projection and the recurrent layer included; the encoder stays float32. Outputs of both can differ
where two words are nearly tied: whether that moves BLEU is a measurement
(benchmarks/compare.py reports test BLEU at each).
"""

from __future__ import annotations

import copy
import weakref

import torch
from torch import nn

from alignmt.models.copy import WithSourceCopy
from alignmt.models.int8 import quantize_decoders_
from alignmt.models.versions import version

PRECISIONS = ("float32", "bfloat16", "int8")

# (model, precision) -> (the versions of its parameters when copied, the copy)
_copies: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")


def _versions(model: nn.Module) -> tuple:
    """Changes whenever a parameter or buffer is updated in place or replaced."""
    return tuple(version(t) for t in [*model.parameters(), *model.buffers()])


def model_at(precision: str, model: nn.Module) -> nn.Module:
    """The model the searches run at `precision`: `model` itself for float32, else its
    bfloat16 or int8 copy, made once and made again after the model's weights change."""
    if precision == "float32":
        return model
    if isinstance(model, WithSourceCopy):  # made per batch: the model inside is what lasts
        return WithSourceCopy(model_at(precision, model.model), model.src_copy)
    if precision == "int8":
        _check_int8_device(model)  # before the copy, which may be large
    versions = _versions(model)
    copies = _copies.setdefault(model, {})
    cached = copies.get(precision)
    if cached is None or cached[0] != versions:
        # Outside inference mode, whatever the caller is in: the copy outlives this call.
        with torch.inference_mode(False), torch.no_grad():
            low = copy.deepcopy(model)
            if precision == "bfloat16":
                low.to(torch.bfloat16)
            else:
                _quantize(low)
        cached = (versions, low)
        copies[precision] = cached
    return cached[1].train(model.training)


def _check_int8_device(model: nn.Module) -> None:
    devices = {p.device.type for p in model.parameters()}
    if devices != {"cpu"}:
        raise ValueError(f"decoding.precision=int8 runs on CPU only; the model is on {devices}")


def _quantize(model: nn.Module) -> None:
    if quantize_decoders_(model) == 0:
        raise ValueError(
            f"decoding.precision=int8: {type(model).__name__}'s decoder has no linear or "
            "recurrent layer to quantize"
        )
