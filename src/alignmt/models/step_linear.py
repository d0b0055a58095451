"""The fused recurrences' per-step products, x W^T, with W packed once per pass.

A recurrence multiplies a small batch by the same weight at every step, forward and backward.
BLAS packs the weight into its kernel layout on every call, which at a batch of a few dozen
rows costs a good part of the product; oneDNN's linear takes a weight reordered into that
layout once (as PyTorch's own frozen CPU graphs use it), so a pass packs each weight once.
bfloat16 weights (the bfloat16 decoding copy) are packed too where the CPU multiplies
bfloat16 natively (AMX, AVX-512 BF16): unpacked, their products miss those units. Where oneDNN
cannot run it (other dtypes or devices, a build without it, ALIGNMT_ONEDNN=0), the same
products run as torch.addmm; both compute x W^T + b to the dtype's rounding.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import weakref

import torch
import torch.nn.functional as F
from torch import nn

from alignmt.models.versions import version


@functools.cache
def onednn_available() -> bool:
    if os.environ.get("ALIGNMT_ONEDNN", "1") == "0" or not torch.backends.mkldnn.is_available():
        return False
    ops = torch.ops.mkldnn
    return hasattr(ops, "_linear_pointwise") and hasattr(ops, "_reorder_linear_weight")


@functools.cache
def native_bfloat16() -> bool:
    """Whether oneDNN multiplies bfloat16 with this CPU's own units (AMX, AVX-512 BF16)."""
    try:
        return torch.ops.mkldnn._is_mkldnn_bf16_supported()
    except (AttributeError, RuntimeError):  # a private op: a torch release may drop it
        return False


def packable(weight: torch.Tensor) -> bool:
    dtypes = (torch.float32, torch.bfloat16) if native_bfloat16() else (torch.float32,)
    return weight.dtype in dtypes and weight.device.type == "cpu" and onednn_available()


class StepLinear:
    """x W^T (+ bias, + other) for one weight W [out, in] and inputs of `batch` rows."""

    def __init__(self, weight: torch.Tensor, batch: int):
        self.weight = weight
        self.packed = None
        if packable(weight):
            self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), batch)

    def __call__(self, x, bias=None, out=None) -> torch.Tensor:
        """x W^T + bias (a vector, or None), written to `out` if given."""
        if self.packed is None:
            if bias is None:
                return torch.mm(x, self.weight.t(), out=out)
            return torch.addmm(bias, x, self.weight.t(), out=out)
        y = torch.ops.mkldnn._linear_pointwise(x, self.packed, bias, "none", [], "")
        return y if out is None else out.copy_(y)

    def plus(self, x, other, out=None) -> torch.Tensor:
        """x W^T + other, `other` of the result's shape, written to `out` if given."""
        if self.packed is None:
            return torch.addmm(other, x, self.weight.t(), out=out)
        y = torch.ops.mkldnn._linear_pointwise.binary(x, other, self.packed, None, "add")
        return y if out is None else out.copy_(y)


class PackedReadout:
    """logits = output(hidden(features)) for a few rows at a time, the vocabulary projection's
    weight packed at the first call and kept for the pass: scheduled sampling asks each step for
    the logits of the rows it feeds the model's own tokens, and BLAS would repack the whole
    [vocabulary, d] weight for every such call."""

    def __init__(self, hidden, output: torch.nn.Linear, batch: int):
        self.hidden, self.output, self.batch = hidden, output, batch
        self.project = None

    def __call__(self, features: torch.Tensor) -> torch.Tensor:
        if self.project is None:
            self.project = StepLinear(self.output.weight, self.batch)
        return self.project(self.hidden(features), self.output.bias)


# module -> {weight name: [the weight's version when packed, StepLinear, the last search]}
_packs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_searching: contextvars.ContextVar[object | None] = contextvars.ContextVar(
    "alignmt_packed_weights", default=None
)


@contextlib.contextmanager
def packed_weights():
    """Within it (a search, whose weights cannot change under it), `packed_weight` gives each
    weight packed. A pack is kept for the next search and made again once the weight has
    changed (`versions.version`: updated in place, by a fused optimiser too, or replaced),
    which is checked once per search: evaluation decodes batch after batch with the same
    weights. Weights made in inference mode keep no version, so theirs are packed again in
    each search."""
    token = _searching.set(object())
    try:
        yield
    finally:
        _searching.reset(token)


def packed_weight(module: nn.Module, name: str, rows: int) -> StepLinear | None:
    """`module`'s weight `name` packed for products of about `rows` rows, inside a
    search (`packed_weights`). None outside one, where oneDNN would not run it, and for one
    row, where BLAS's matrix-vector product packs nothing."""
    weight, search = getattr(module, name), _searching.get()
    if search is None or rows < 2 or weight.device.type != "cpu":
        return None
    packs = _packs.setdefault(module, {})
    kept = packs.get(name)
    if kept is None or kept[2] is not search:
        now = (search,) if weight.is_inference() else version(weight)
        if kept is None or kept[0] != now:
            kept = packs[name] = [now, StepLinear(weight.detach(), rows), search]  # holds data
        kept[2] = search
    pack = kept[1]
    return pack if pack.packed is not None else None


def packed_layer(layer: nn.Module, rows: int) -> StepLinear | None:
    """`packed_weight` of a plain nn.Linear; None for subclasses (the quantized decoders' layers),
    which multiply their own way."""
    return packed_weight(layer, "weight", rows) if type(layer) is nn.Linear else None


def project(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """layer(x) for one search step's rows x [B, in]: inside a search (`packed_weights`) and
    outside autograd, by the layer's weight packed once (`packed_layer`) where it has one."""
    packed = None if torch.is_grad_enabled() or x.dim() != 2 else packed_layer(layer, x.size(0))
    return layer(x) if packed is None else packed(x, layer.bias)


def is_one_layer_gru(rnn: nn.Module) -> bool:
    """A torch.nn.GRU of one layer, one way, with biases: one step is two products and the
    GRU update (functional.gru_update)."""
    return type(rnn) is nn.GRU and rnn.num_layers == 1 and rnn.bias and not rnn.bidirectional


def gru_gates(rnn: nn.Module, rows: int):
    """For one search step of a one-layer, one-way GRU outside autograd: a function (x, h) ->
    (W_ih x + b_ih, W_hh h + b_hh), the pre-activations functional.gru_update takes; None for
    other layers (stacked, two-way, LSTMs) and off CPU. A quantized decoder's GRU brings its own
    (a `gates` method); torch.nn.GRU's weights multiply packed once per search (`packed_weight`),
    or at one row by BLAS's matrix-vector product: torch's GRU call for one step costs about
    twice its two products there."""
    if torch.is_grad_enabled():
        return None
    own = getattr(rnn, "gates", None)
    if own is not None:
        return own
    if not is_one_layer_gru(rnn) or rnn.weight_ih_l0.device.type != "cpu":
        return None
    w_x, b_x, w_h, b_h = rnn.weight_ih_l0, rnn.bias_ih_l0, rnn.weight_hh_l0, rnn.bias_hh_l0
    if rows == 1:
        return lambda x, h: (F.linear(x, w_x, b_x), F.linear(h, w_h, b_h))
    by_x, by_h = packed_weight(rnn, "weight_ih_l0", rows), packed_weight(rnn, "weight_hh_l0", rows)
    if by_x is None or by_h is None:
        return None
    return lambda x, h: (by_x(x, b_x), by_h(h, b_h))
