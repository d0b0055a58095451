"""Luong et al. 2015's local attention: a global score restricted to a window around p_t."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from alignmt.models.attention.base import Attention, AttentionState, masked_softmax
from alignmt.models.attention.multiplicative import GeneralAttention


class LocalAttention(Attention):
    """Attends to the 2D+1 source positions [p_t - D, p_t + D] (clipped at the sentence edges,
    never wrapped) with any global score (`score`: dot, general or concat; general by default).
    Positions outside the window and padding get weight exactly 0. Subclasses place p_t."""

    def __init__(
        self,
        query_size: int,
        key_size: int,
        score: Callable[..., Attention] | None = None,
        window: int = 10,
    ):
        super().__init__(query_size, key_size)
        self.scorer = (score or GeneralAttention)(query_size=query_size, key_size=key_size)
        self.window = window
        self.key_bias_size = self.scorer.key_bias_size

    def precompute(self, values: torch.Tensor) -> torch.Tensor:
        return self.scorer.precompute(values)

    def centres(self, query: torch.Tensor, mask: torch.Tensor, state) -> torch.Tensor:
        """p_t [B, T] for queries [B, T, Q]."""
        raise NotImplementedError

    def reweight(self, weights: torch.Tensor, distance: torch.Tensor) -> torch.Tensor:
        return weights

    def advance(self, state, steps: int):
        return state

    def forward(self, query, keys, values, mask, state=None, energy_bias=None):
        single_step = query.dim() == 2
        if single_step:
            query = query.unsqueeze(1)
        centres = self.centres(query, mask, state)  # [B, T]
        positions = torch.arange(keys.size(1), device=keys.device, dtype=centres.dtype)
        distance = positions - centres.unsqueeze(-1)  # [B, T, S]
        in_window = (distance.abs() <= self.window) & mask.unsqueeze(1)
        energies = self.scorer.score(query, keys, state)
        if energy_bias is not None:
            energies = energies + energy_bias.unsqueeze(1)
        weights = masked_softmax(energies, in_window)
        weights = self.reweight(weights, distance)
        context = torch.bmm(weights, values)
        state = self.advance(state, query.size(1))
        if single_step:
            return context.squeeze(1), weights.squeeze(1), state
        return context, weights, state


class LocalMonotonicAttention(LocalAttention):
    """local-m: p_t = t, source and target assumed roughly monotonically aligned (clipped to
    the last source position). The step index t is attention state."""

    def init_state(self, values: torch.Tensor, mask: torch.Tensor) -> AttentionState:
        return {"step": torch.zeros(values.size(0), dtype=torch.long, device=values.device)}

    def centres(self, query, mask, state):
        T = query.size(1)
        steps = state["step"].unsqueeze(1) + torch.arange(T, device=query.device)
        last = mask.sum(-1, keepdim=True) - 1
        return torch.minimum(steps, last).to(query.dtype)

    def advance(self, state, steps: int):
        return {"step": state["step"] + steps}


class LocalPredictiveAttention(LocalAttention):
    """local-p: p_t = S sigmoid(v_p^T tanh(W_p h_t)) with S the true source length, and the
    windowed weights multiplied by a Gaussian exp(-(s - p_t)^2 / (2 sigma^2)), sigma = D / 2
    (eq. 10; as in the paper, not renormalised, so they sum to at most 1)."""

    normalized = False

    def __init__(
        self,
        query_size: int,
        key_size: int,
        score: Callable[..., Attention] | None = None,
        window: int = 10,
        predictor_size: int | None = None,
    ):
        super().__init__(query_size, key_size, score, window)
        predictor_size = predictor_size or query_size
        self.position_proj = nn.Linear(query_size, predictor_size, bias=False)  # W_p
        self.position_energy = nn.Linear(predictor_size, 1, bias=False)  # v_p
        self.sigma = window / 2

    def centres(self, query, mask, state):
        lengths = mask.sum(-1, keepdim=True).to(query.dtype)
        gate = torch.sigmoid(self.position_energy(torch.tanh(self.position_proj(query))))
        return lengths * gate.squeeze(-1)

    def reweight(self, weights, distance):
        return weights * torch.exp(-(distance**2) / (2 * self.sigma**2))
