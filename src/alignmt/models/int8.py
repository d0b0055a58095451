"""int8 decoders for CPU decoding: every matrix a decoding step multiplies by, in int8.

At batch 1 a decoding step is bound by reading its weights; int8 reads a quarter of the bytes,
and fbgemm/oneDNN multiply int8 faster than float32 at any batch. Dynamic quantization:
weights rounded once (per output row for linear layers), activations quantized as they come.
The encoder stays float32: it runs once per sentence, not once per output word.
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
# The quantized product's C++ operator itself: the Python op object in front of it looks
# through the arguments for traced stand-ins of the packed weights at every call. `_op` is
# private; where a torch release drops it, the public op object does the same product.
_linear_dynamic = torch.ops.quantized.linear_dynamic.default
_linear_dynamic = getattr(_linear_dynamic, "_op", _linear_dynamic)


class Int8Linear(nn.Linear):
    """An nn.Linear whose forward multiplies in int8. It keeps the float32 weight and bias, so
    code that reads them directly (fused kernels, additive energies) reads the exact values.
    The forward calls the quantized product itself, not through torch's module: a search step
    at batch 1 makes several such calls, and each module call costs about as much as a small
    product."""

    @classmethod
    def of(cls, linear: nn.Linear) -> Int8Linear:
        from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
        from torch.ao.quantization import per_channel_dynamic_qconfig

        has_bias = linear.bias is not None
        layer = cls(linear.in_features, linear.out_features, bias=has_bias, device="meta")
        layer.weight, layer.bias = linear.weight, linear.bias
        float_layer = nn.Linear(linear.in_features, linear.out_features, bias=has_bias)
        float_layer.load_state_dict(linear.state_dict())
        float_layer.qconfig = per_channel_dynamic_qconfig
        with _quiet():
            layer.packed = DynamicLinear.from_float(float_layer)._packed_params._packed_params
        return layer

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        # reduce_range: 7-bit activations, as torch's module multiplies (no overflow in fbgemm)
        return _linear_dynamic(inputs, self.packed, reduce_range=True)


class Int8GRU(nn.Module):
    """A one-layer, one-way GRU whose two products (W_ih x + b_ih, W_hh h + b_hh) are int8
    linear layers, in torch.nn.GRU's call and state layout. A search step calls `gates` and
    functional.gru_update itself: at batch 1 that costs less than torch's fused quantized
    GRU call for one step. Over a sequence it runs those steps one by one."""

    def __init__(self, gru: nn.GRU):
        super().__init__()
        self.batch_first, self.hidden_size = gru.batch_first, gru.hidden_size
        self.by_input = Int8Linear.of(_linear(gru.weight_ih_l0, gru.bias_ih_l0))
        self.by_hidden = Int8Linear.of(_linear(gru.weight_hh_l0, gru.bias_hh_l0))

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


def int8_recurrent(rnn: nn.GRU | nn.LSTM) -> nn.Module:
    """torch's dynamically quantized GRU/LSTM: same call and state layout as `rnn`."""
    from torch.ao.nn.quantized import dynamic
    from torch.ao.quantization import default_dynamic_qconfig

    float_rnn = type(rnn)(
        rnn.input_size,
        rnn.hidden_size,
        num_layers=rnn.num_layers,
        bias=rnn.bias,
        batch_first=rnn.batch_first,
        bidirectional=rnn.bidirectional,
    )
    float_rnn.load_state_dict(rnn.state_dict())
    float_rnn.qconfig = default_dynamic_qconfig
    with _quiet():
        return getattr(dynamic, type(rnn).__name__).from_float(float_rnn)


def quantize_decoders_(model: nn.Module) -> int:
    """Replace, inside every Decoder of `model`, each linear layer that is a matrix (vectors such
    as additive attention's v_a stay: a dot product gains nothing) and each GRU/LSTM by its int8
    version (Int8GRU where it applies, else torch's). CPU only; in place (run it on a copy).
    Returns how many layers were replaced."""
    replaced = 0
    decoders = [m for m in model.modules() if isinstance(m, Decoder)]
    for decoder in decoders:
        for parent in list(decoder.modules()):
            for name, child in list(parent.named_children()):
                if type(child) is nn.Linear and min(child.in_features, child.out_features) > 1:
                    setattr(parent, name, Int8Linear.of(child))
                elif is_one_layer_gru(child):
                    setattr(parent, name, Int8GRU(child))
                elif type(child) in RECURRENT:
                    setattr(parent, name, int8_recurrent(child))
                else:
                    continue
                replaced += 1
    return replaced


@contextmanager
def _quiet():
    """torch marks its eager quantization API deprecated (torchao succeeds it); it works."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (DeprecationWarning, UserWarning))
        yield
