"""Luong et al. 2015's location-based attention: weights from the query alone."""

from __future__ import annotations

import logging

import torch
from torch import nn

from alignmt.models.attention.base import Attention, AttentionState

log = logging.getLogger(__name__)


class LocationAttention(Attention):
    """a_t = softmax(W_a h_t) over source positions 0 .. max_length-1; the annotations only
    enter through the context vector. Positions past `max_length` cannot be scored and get
    weight 0 (with a warning), like padding."""

    def __init__(self, query_size: int, key_size: int, max_length: int = 100):
        super().__init__(query_size, key_size)
        self.max_length = max_length
        self.proj = nn.Linear(query_size, max_length)
        self._warned = False

    def score(self, query, keys, state: AttentionState) -> torch.Tensor:
        length = keys.size(1)
        energies = self.proj(query)
        if length <= self.max_length:
            return energies[..., :length]
        beyond = energies.new_zeros((*energies.shape[:-1], length - self.max_length))
        return torch.cat([energies, beyond], dim=-1)  # masked out by `window`

    def window(self, query, mask, state):
        if mask.size(1) <= self.max_length:
            return mask.unsqueeze(1), None
        if not self._warned:
            log.warning(
                "source of %d tokens is longer than model.attention.max_length=%d: "
                "the positions past it get no attention",
                mask.size(1),
                self.max_length,
            )
            self._warned = True
        scorable = torch.arange(mask.size(1), device=mask.device) < self.max_length
        return (mask & scorable).unsqueeze(1), None
