"""Coverage models (Tu et al. 2016): what has been translated so far steers attention.

A coverage vector C_j per source word is carried through the decoder steps and enters the
attention energies (`Attention.add_coverage`): inside the tanh for additive scores
(e_ij = v^T tanh(W s + U h_j + V C_{i-1,j})), as an added linear term for the others. It is
attention state, so greedy and beam search carry and reorder it like any other state.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from alignmt.models.attention.base import Attention, AttentionState
from alignmt.models.functional import gru_update
from alignmt.models.fused_recurrence import LinguisticCell, NeuralCell


class Coverage(nn.Module):
    """Initial coverage [B, S, size] and its per-step update from the attention weights."""

    size: int

    def init(self, values: torch.Tensor, mask: torch.Tensor) -> AttentionState:
        raise NotImplementedError

    def update(
        self, state: AttentionState, weights: torch.Tensor, query: torch.Tensor
    ) -> AttentionState:
        """weights [B, S] of this step, query [B, Q] -> the state with C_i."""
        raise NotImplementedError

    def fused_cell(self, state: AttentionState) -> tuple[type, tuple] | None:
        """The cell type and tensors (fused_recurrence.py) that compute `update` inside the
        fused CPU recurrences, from the initial state; None where there is none (the default)."""
        return None


class LinguisticCoverage(Coverage):
    """C_{i,j} = C_{i-1,j} + alpha_ij / Phi_j with fertility Phi_j = N sigmoid(U_f h_j), or
    Phi_j = 1 (`fertility: false`), which makes C the running sum of attention."""

    size = 1

    def __init__(
        self, key_size: int, query_size: int, fertility: bool = True, max_fertility: float = 2.0
    ):
        super().__init__()
        self.fertility = nn.Linear(key_size, 1) if fertility else None  # U_f
        self.max_fertility = max_fertility

    def init(self, values, mask):
        coverage = values.new_zeros(*values.shape[:2], 1)
        if self.fertility is None:
            return {"coverage": coverage}
        fertility = self.max_fertility * torch.sigmoid(self.fertility(values))
        return {"coverage": coverage, "fertility": fertility}

    def update(self, state, weights, query):
        increment = weights.unsqueeze(-1)
        if "fertility" in state:
            increment = increment / state["fertility"]
        return {**state, "coverage": state["coverage"] + increment}

    def fused_cell(self, state):
        return LinguisticCell, (state["fertility"],) if "fertility" in state else ()


class NeuralCoverage(Coverage):
    """C_{i,j} = GRU(C_{i-1,j}, [alpha_ij; h_j; s]) with a coverage vector of `size` units per
    source word; the annotation part of its input is projected once per batch."""

    def __init__(self, key_size: int, query_size: int, size: int = 10):
        super().__init__()
        self.size = size
        self.from_weight = nn.Linear(1, 3 * size, bias=False)
        self.from_annotation = nn.Linear(key_size, 3 * size)
        self.from_query = nn.Linear(query_size, 3 * size, bias=False)
        self.recurrent = nn.Linear(size, 3 * size)

    def init(self, values, mask):
        return {
            "coverage": values.new_zeros(*values.shape[:2], self.size),
            "annotation_gates": self.from_annotation(values),
        }

    def update(self, state, weights, query):
        gates_x = (
            state["annotation_gates"]
            + self.from_weight(weights.unsqueeze(-1))
            + self.from_query(query).unsqueeze(1)
        )
        coverage = gru_update(state["coverage"], gates_x, self.recurrent(state["coverage"]))
        return {**state, "coverage": coverage}

    def fused_cell(self, state):
        weights = self.from_weight.weight, self.from_query.weight, self.recurrent.weight
        return NeuralCell, (state["annotation_gates"], *weights, self.recurrent.bias)


def with_coverage(attention: Attention, coverage: Callable[..., Coverage] | None) -> Attention:
    """`attention` with the configured coverage model (`model/coverage`), if any."""
    if coverage is not None:
        attention.add_coverage(coverage)
    return attention


def coverage_loss(weights: torch.Tensor | None, target_mask: torch.Tensor) -> torch.Tensor:
    """See et al. 2017: sum_j min(alpha_ij, C_{i-1,j}) with C the running sum of attention,
    averaged over real target positions; 0 where attention never returns to a source word.
    weights [B, T, S], target_mask [B, T]."""
    if weights is None:
        raise ValueError("task.coverage_loss_weight needs a model with attention")
    previous = torch.cumsum(weights, dim=1) - weights  # C_{i-1}
    overlap = torch.minimum(weights, previous).sum(-1)  # [B, T]
    return overlap.masked_select(target_mask).mean()
