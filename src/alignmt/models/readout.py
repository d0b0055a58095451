"""The deep output layer of Bahdanau et al. 2014 (appendix A.2.2) and Cho et al. 2014."""

from __future__ import annotations

import torch
from torch import nn

from alignmt.models.step_linear import project


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
        self.output = nn.Linear(maxout_size, vocab_size)  # W_o

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """inputs: [s; E y; c] concatenated on the last dim."""
        return self.output(self.hidden(inputs))

    def hidden(self, inputs: torch.Tensor) -> torch.Tensor:
        """t, dropped out: what W_o multiplies."""
        pre = project(self.proj, inputs)  # packed once outside autograd (search steps)
        return self.dropout(pre.unflatten(-1, (-1, self.pool_size)).amax(dim=-1))
