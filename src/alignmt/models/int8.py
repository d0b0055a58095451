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

from alignmt.models.seq2seq import Decoder

RECURRENT = (nn.GRU, nn.LSTM)


class Int8Linear(nn.Linear):
    """An nn.Linear whose forward multiplies in int8. It keeps the float32 weight and bias, so
    code that reads them directly (fused kernels, additive energies) reads the exact values."""

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
            layer.int8 = DynamicLinear.from_float(float_layer)
        return layer

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.int8(inputs)


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
    version. CPU only; in place (run it on a copy). Returns how many layers were replaced."""
    replaced = 0
    decoders = [m for m in model.modules() if isinstance(m, Decoder)]
    for decoder in decoders:
        for parent in list(decoder.modules()):
            for name, child in list(parent.named_children()):
                if type(child) is nn.Linear and min(child.in_features, child.out_features) > 1:
                    setattr(parent, name, Int8Linear.of(child))
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
