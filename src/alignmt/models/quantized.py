"""Quantized decoders for CPU decoding: the matrices a decoding step multiplies by, with int8
or float16 weights.

At batch 1 a decoding step is bound by reading its weights; int8 reads a quarter of the bytes
and float16 half, and fbgemm multiplies both at least as fast as float32 at any batch (int8
products of many rows run in oneDNN where the CPU has AMX: faster there). Dynamic
quantization: weights rounded once (int8 per output row), activations quantized as they come
(int8) or kept float32 (float16 weights, float32 sums). int8 rounds to about 8 significant bits,
float16 to 11. The encoder stays float32: it runs once per sentence, not once per output word.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager

import torch
from torch import nn

from alignmt.models.functional import gru_update
from alignmt.models.seq2seq import Decoder
from alignmt.models.step_linear import is_one_layer_gru

RECURRENT = (nn.GRU, nn.LSTM)
# The quantized products' C++ operators themselves: the Python op object in front of each looks
# through the arguments for traced stand-ins of the packed weights at every call. `_op` is
# private; where a torch release drops it, the public op object does the same product.
_linear_dynamic = torch.ops.quantized.linear_dynamic.default
_linear_dynamic = getattr(_linear_dynamic, "_op", _linear_dynamic)
_linear_float16 = torch.ops.quantized.linear_dynamic_fp16.default
_linear_float16 = getattr(_linear_float16, "_op", _linear_float16)


class QuantizedLinear(nn.Linear):
    """An nn.Linear whose forward multiplies by its weight packed in lower precision. It keeps
    the float32 weight and bias, so code that reads them directly (fused kernels, additive
    energies) reads the exact values. The forward calls the quantized product itself, not
    through torch's module: a search step at batch 1 makes several such calls, and each module
    call costs about as much as a small product."""

    @classmethod
    def of(cls, linear: nn.Linear) -> QuantizedLinear:
        layer = cls(
            linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta"
        )
        layer.weight, layer.bias = linear.weight, linear.bias
        with torch.no_grad():
            layer.packed = cls.pack(linear)
        return layer

    @staticmethod
    def pack(linear: nn.Linear):
        raise NotImplementedError


class Int8Linear(QuantizedLinear):
    """int8 weights, rounded per output row; int8 activations, scaled per call. fbgemm
    multiplies few rows faster; where the CPU has AMX int8 units, oneDNN multiplies many rows
    faster, so such a layer keeps a second copy packed for oneDNN and uses it from `wide_from`
    rows. Both multiply the same integers: their results differ by float rounding only."""

    WIDE_ROWS = 32  # oneDNN takes products of at least this many rows ...
    WIDE_PRODUCT = 2**25  # ... and at least this many multiply-adds

    @classmethod
    def of(cls, linear: nn.Linear) -> Int8Linear:
        layer = super().of(linear)
        layer.wide = None
        if amx_int8():
            with torch.no_grad(), _engine("onednn"):
                layer.wide = cls.pack(linear)
        layer.wide_from = max(cls.WIDE_ROWS, -(-cls.WIDE_PRODUCT // linear.weight.numel()))
        return layer

    def packed_for(self, rows: int):
        """The packed weight a product of `rows` rows multiplies by."""
        return self.wide if self.wide is not None and rows >= self.wide_from else self.packed

    @staticmethod
    def pack(linear: nn.Linear):
        from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
        from torch.ao.quantization import per_channel_dynamic_qconfig

        has_bias = linear.bias is not None
        float_layer = nn.Linear(linear.in_features, linear.out_features, bias=has_bias)
        float_layer.load_state_dict(linear.state_dict())
        float_layer.qconfig = per_channel_dynamic_qconfig
        with _quiet():
            return DynamicLinear.from_float(float_layer)._packed_params._packed_params

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        packed = self.packed_for(inputs.numel() // self.in_features)
        # reduce_range: 7-bit activations, as torch's module multiplies (no overflow in fbgemm)
        return _linear_dynamic(inputs, packed, reduce_range=True)


class Float16Linear(QuantizedLinear):
    """float16 weights (fbgemm); activations and sums float32."""

    @staticmethod
    def pack(linear: nn.Linear):
        bias = None if linear.bias is None else linear.bias.detach()
        return torch.ops.quantized.linear_prepack_fp16(linear.weight.detach(), bias)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return _linear_float16(inputs, self.packed)


LINEAR = {torch.qint8: Int8Linear, torch.float16: Float16Linear}


class QuantizedGRU(nn.Module):
    """A one-layer, one-way GRU whose two products (W_ih x + b_ih, W_hh h + b_hh) are quantized
    linear layers (`dtype`: torch.qint8 or torch.float16), in torch.nn.GRU's call and state
    layout. A search step calls `gates` and functional.gru_update itself: at batch 1 that costs
    less than torch's fused quantized GRU call for one step. Over a sequence it runs those
    steps one by one."""

    def __init__(self, gru: nn.GRU, dtype: torch.dtype = torch.qint8):
        super().__init__()
        self.batch_first, self.hidden_size = gru.batch_first, gru.hidden_size
        self.by_input = LINEAR[dtype].of(_linear(gru.weight_ih_l0, gru.bias_ih_l0))
        self.by_hidden = LINEAR[dtype].of(_linear(gru.weight_hh_l0, gru.bias_hh_l0))

    def gates(self, x: torch.Tensor, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The pre-activations functional.gru_update takes, for inputs x [B, I], states [B, H]."""
        return self.by_input(x), self.by_hidden(hidden)

    def forward(self, inputs: torch.Tensor, hidden: torch.Tensor | None = None):
        steps = inputs.unbind(1 if self.batch_first else 0)
        if hidden is None:
            hidden = inputs.new_zeros(1, steps[0].size(0), self.hidden_size)
        state, outputs = hidden[0], []
        for x in steps:  # one product per step: int8 activations are scaled per call
            state = gru_update(state, *self.gates(x, state))
            outputs.append(state)
        return torch.stack(outputs, 1 if self.batch_first else 0), state.unsqueeze(0)


def _linear(weight: nn.Parameter, bias: nn.Parameter) -> nn.Linear:
    """An nn.Linear over the GRU's own parameters (not copies)."""
    layer = nn.Linear(weight.size(1), weight.size(0), device="meta")
    layer.weight, layer.bias = weight, bias
    return layer


def quantized_recurrent(rnn: nn.GRU | nn.LSTM, dtype: torch.dtype = torch.qint8) -> nn.Module:
    """torch's dynamically quantized GRU/LSTM (`dtype`: torch.qint8 or torch.float16 weights):
    same call and state layout as `rnn`."""
    from torch.ao.nn.quantized import dynamic
    from torch.ao.quantization import default_dynamic_qconfig, float16_dynamic_qconfig

    float_rnn = type(rnn)(
        rnn.input_size,
        rnn.hidden_size,
        num_layers=rnn.num_layers,
        bias=rnn.bias,
        batch_first=rnn.batch_first,
        bidirectional=rnn.bidirectional,
    )
    float_rnn.load_state_dict(rnn.state_dict())
    qconfigs = {torch.qint8: default_dynamic_qconfig, torch.float16: float16_dynamic_qconfig}
    float_rnn.qconfig = qconfigs[dtype]
    with _quiet():
        return getattr(dynamic, type(rnn).__name__).from_float(float_rnn)


def is_matrix(layer: nn.Module) -> bool:
    """A plain linear layer that is a matrix: vectors (additive attention's v_a) stay float32,
    a dot product gains nothing from quantizing."""
    return type(layer) is nn.Linear and min(layer.in_features, layer.out_features) > 1


def quantize_decoders_(
    model: nn.Module, vocabulary: torch.dtype = torch.qint8, others: torch.dtype = torch.qint8
) -> int:
    """Replace, inside every Decoder of `model`, each linear layer that is a matrix (vectors such
    as additive attention's v_a stay: a dot product gains nothing) and each GRU/LSTM by its
    quantized version (QuantizedGRU where it applies, else torch's): the vocabulary projection
    (the last layer of `split_readout`) with `vocabulary` weights, the others with `others`
    (torch.qint8 or torch.float16). CPU only; in place (run it on a copy). Returns how many
    layers were replaced."""
    replaced = 0
    decoders = [m for m in model.modules() if isinstance(m, Decoder)]
    for decoder in decoders:
        split = decoder.split_readout()
        projection = None if split is None else split[1]
        for parent in list(decoder.modules()):
            for name, child in list(parent.named_children()):
                dtype = vocabulary if child is projection else others
                if is_matrix(child):
                    setattr(parent, name, LINEAR[dtype].of(child))
                elif is_one_layer_gru(child):
                    setattr(parent, name, QuantizedGRU(child, dtype))
                elif type(child) in RECURRENT:
                    setattr(parent, name, quantized_recurrent(child, dtype))
                else:
                    continue
                replaced += 1
    return replaced


def amx_int8() -> bool:
    """Whether this CPU has AMX int8 units and torch has oneDNN's quantized engine."""
    try:
        amx = torch.cpu._is_amx_tile_supported()  # private: a torch release may drop it
    except AttributeError:
        return False
    return amx and "onednn" in torch.backends.quantized.supported_engines


@contextmanager
def _engine(name: str):
    """torch packs quantized weights for the engine set when it packs them; each packed weight
    then multiplies with its own engine."""
    before = torch.backends.quantized.engine
    torch.backends.quantized.engine = name
    try:
        yield
    finally:
        torch.backends.quantized.engine = before


@contextmanager
def _quiet():
    """torch marks its eager quantization API deprecated (torchao succeeds it); it works."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (DeprecationWarning, UserWarning))
        yield
