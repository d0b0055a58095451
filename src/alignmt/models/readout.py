"""The output layers: the projection onto the target vocabulary, and the deep output layer of
Bahdanau et al. 2014 (appendix A.2.2) and Cho et al. 2014 in front of it."""

from __future__ import annotations

import warnings

import torch
from torch import nn


class VocabularyProjection(nn.Linear):
    """The layer that scores every target word (Luong's W_s, the maxout readout's W_o): the
    largest matrix product of a decoding step, and the weights a step reads most of. A plain
    nn.Linear (same parameters, same checkpoints) that int8 decoding can quantize
    (`quantize_int8_`, decoding/precision.py)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__(in_features, out_features)
        self.int8: nn.Module | None = None

    def quantize_int8_(self) -> None:
        """From now on multiply in int8: the weights rounded per output row (symmetric), each
        input batch quantized as it comes (dynamic quantization, fbgemm/oneDNN on x86). The
        float32 weights stay, unused; CPU only."""
        from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
        from torch.ao.quantization import per_channel_dynamic_qconfig

        with warnings.catch_warnings():  # torch marks its eager quantization API deprecated
            warnings.simplefilter("ignore", (DeprecationWarning, UserWarning))
            float_layer = nn.Linear(self.in_features, self.out_features)
            float_layer.load_state_dict(self.state_dict())
            float_layer.qconfig = per_channel_dynamic_qconfig
            self.int8 = DynamicLinear.from_float(float_layer)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.int8 is None:
            return super().forward(inputs)
        return self.int8(inputs)


class MaxoutReadout(nn.Module):
    """t~ = U_o s + V_o E y + C_o c (one matmul over the concatenated inputs); t = maxout over
    adjacent pairs of t~ (pool size 2); logits = W_o t. Works on [B, D] and [B, T, D] alike."""

    def __init__(
        self,
        input_size: int,
        maxout_size: int,
        vocab_size: int,
        pool_size: int = 2,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.pool_size = pool_size
        self.proj = nn.Linear(input_size, maxout_size * pool_size)
        self.dropout = nn.Dropout(dropout)
        self.output = VocabularyProjection(maxout_size, vocab_size)  # W_o

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """inputs: [s; E y; c] concatenated on the last dim."""
        pre = self.proj(inputs)
        t = pre.unflatten(-1, (-1, self.pool_size)).amax(dim=-1)
        return self.output(self.dropout(t))
