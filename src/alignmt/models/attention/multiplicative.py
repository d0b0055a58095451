"""Luong et al. 2015's multiplicative scores: `dot` and `general`."""

from __future__ import annotations

import torch
from torch import nn

from alignmt.models.attention.base import Attention, AttentionState


class DotAttention(Attention):
    """score(h_t, h_s) = h_t^T h_s. Needs query and annotations of the same size."""

    def __init__(self, query_size: int, key_size: int):
        if query_size != key_size:
            raise ValueError(
                f"dot attention needs equal query and annotation sizes, got {query_size} and "
                f"{key_size}; use general attention, or sizes that match"
            )
        super().__init__(query_size, key_size)

    def score(self, query, keys, state: AttentionState) -> torch.Tensor:
        return torch.bmm(query, keys.transpose(1, 2))


class GeneralAttention(Attention):
    """score(h_t, h_s) = h_t^T W_a h_s. The query is projected (one [Q x D] product per step)
    rather than every annotation, so nothing needs precomputing."""

    def __init__(self, query_size: int, key_size: int):
        super().__init__(query_size, key_size)
        self.proj = nn.Linear(query_size, key_size, bias=False)  # W_a^T

    def score(self, query, keys, state: AttentionState) -> torch.Tensor:
        return torch.bmm(self.proj(query), keys.transpose(1, 2))
