"""Decoding precision: float32 (exact, the default); bfloat16, int8 or int8_fp16, options.

float32 is exact: outputs do not depend on it being chosen. With `bfloat16` the searches run
a bfloat16 copy of the model (weights, encoder memory and decoder state all in bfloat16);
logits become float32 before the log-softmax, and scores, attention and the search's own
arithmetic stay float32. Casting once beats autocast, which casts the encoder memory and every
activation again at every step; it pays on CPUs with bfloat16 matrix units (AMX, AVX-512
BF16) and costs on those without. With `int8` (CPU only) the searches run a float32 copy whose
decoders multiply in int8 (alignmt.models.quantized): every matrix of a step, the vocabulary
projection and the recurrent layer included; the encoder stays float32. With `int8_fp16` (CPU,
x86) the vocabulary projection multiplies in int8 and the step's other matrices with float16
weights: rounding the vocabulary's logits moves only near-ties among the words, while rounding
the decoder state carries into every later step, so the state gets float16's finer rounding.
Outputs of all three can differ where two words are nearly tied: whether that moves BLEU is a
measurement (benchmarks/compare.py reports test BLEU at each).
"""

from __future__ import annotations

import copy
import weakref

import torch
from torch import nn

from alignmt.models.copy import WithSourceCopy
from alignmt.models.quantized import quantize_decoders_
from alignmt.models.versions import version

# the quantized precisions: (the vocabulary projection's weights, the decoder's other weights)
QUANTIZED = {"int8": (torch.qint8, torch.qint8), "int8_fp16": (torch.qint8, torch.float16)}
PRECISIONS = ("float32", "bfloat16", *QUANTIZED)

# (model, precision) -> (the versions of its parameters when copied, the copy)
_copies: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")


def _versions(model: nn.Module) -> tuple | None:
    """Changes whenever a parameter or buffer is updated in place or replaced; None where one
    was made in inference mode, which keeps no version: such a model's copy is made again for
    each search."""
    tensors = [*model.parameters(), *model.buffers()]
    if any(t.is_inference() for t in tensors):
        return None
    return tuple(version(t) for t in tensors)


def model_at(precision: str, model: nn.Module) -> nn.Module:
    """The model the searches run at `precision`: `model` itself for float32, else its
    bfloat16 or quantized copy, made once and made again after the model's weights change."""
    if precision == "float32":
        return model
    if isinstance(model, WithSourceCopy):  # made per batch: the model inside is what lasts
        return WithSourceCopy(model_at(precision, model.model), model.src_copy)
    if precision in QUANTIZED:
        _check_quantizable(precision, model)  # before the copy, which may be large
    versions = _versions(model)
    copies = _copies.setdefault(model, {})
    cached = copies.get(precision)
    if cached is None or versions is None or cached[0] != versions:
        # Outside inference mode, whatever the caller is in: the copy outlives this call.
        with torch.inference_mode(False), torch.no_grad():
            low = copy.deepcopy(model)
            if precision == "bfloat16":
                low.to(torch.bfloat16)
            else:
                _quantize(precision, low)
        cached = (versions, low)
        copies[precision] = cached
    return cached[1].train(model.training)


def _check_quantizable(precision: str, model: nn.Module) -> None:
    devices = {p.device.type for p in model.parameters()}
    if devices != {"cpu"}:
        raise ValueError(
            f"decoding.precision={precision} runs on CPU only; the model is on {devices}"
        )
    engines = torch.backends.quantized.supported_engines
    if torch.float16 in QUANTIZED[precision] and "fbgemm" not in engines:
        raise ValueError(
            f"decoding.precision={precision} needs fbgemm's float16 products (x86 CPUs); this "
            f"torch has the quantized engines {engines}: use int8 or float32"
        )


def _quantize(precision: str, model: nn.Module) -> None:
    if quantize_decoders_(model, *QUANTIZED[precision]) == 0:
        raise ValueError(
            f"decoding.precision={precision}: {type(model).__name__}'s decoder has no linear or "
            "recurrent layer to quantize"
        )
