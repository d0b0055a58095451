"""Luong et al. 2015's local attention: a global score restricted to a window around p_t."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from alignmt.models.attention.base import Attention, AttentionState
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
        if window < 1:
            raise ValueError(f"model.attention.window must be at least 1, got {window}")
        self.scorer = (score or GeneralAttention)(query_size=query_size, key_size=key_size)
        self.half_width = window

    def precompute(self, values):
        return self.scorer.precompute(values)

    def score(self, query, keys, state):
        return self.scorer.score(query, keys, state)

    def key_term_size(self):
        return self.scorer.key_term_size()

    def paper_init_(self) -> None:
        self.scorer.paper_init_()

    def centres(self, query: torch.Tensor, mask: torch.Tensor, state) -> torch.Tensor:
        """p_t [B, T] for queries [B, T, Q]."""
        raise NotImplementedError

    def distance(self, query, mask, state) -> torch.Tensor:
        """[B, T, S]: each source position's signed distance from p_t."""
        centres = self.centres(query, mask, state)
        positions = torch.arange(mask.size(1), device=mask.device, dtype=centres.dtype)
        return positions - centres.unsqueeze(-1)

    def window(self, query, mask, state):
        distance = self.distance(query, mask, state)
        return (distance.abs() <= self.half_width) & mask.unsqueeze(1), None


class LocalMonotonicAttention(LocalAttention):
    """local-m: p_t = t, source and target assumed roughly monotonically aligned (clipped to
    the last source position). The step index t is attention state."""

    def start_state(self, values, mask) -> AttentionState:
        return {"step": torch.zeros(values.size(0), dtype=torch.long, device=values.device)}

    def next_state(self, state, steps: int):
        return {**state, "step": state["step"] + steps}

    def centres(self, query, mask, state):
        steps = state["step"].unsqueeze(1) + torch.arange(query.size(1), device=query.device)
        last = mask.sum(-1, keepdim=True) - 1
        return torch.minimum(steps, last).to(query.dtype)


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

    def window(self, query, mask, state):
        distance = self.distance(query, mask, state)
        allowed = (distance.abs() <= self.half_width) & mask.unsqueeze(1)
        return allowed, torch.exp(-(distance**2) / (2 * self.sigma**2))
