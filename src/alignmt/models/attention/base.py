"""The one attention interface every decoder, beam search and coverage model talks to."""

from __future__ import annotations

import torch
from torch import nn

AttentionState = dict[str, torch.Tensor]


class Attention(nn.Module):
    """Scores source annotations against a decoder query and returns their weighted average.

    `precompute(values)` runs once per batch (e.g. Bahdanau's U_a h_j); `forward` then runs once
    per decoder step with a query [B, Q], or once for all steps with a query [B, T, Q].
    Weights are exactly 0 on padding and, where `normalized`, sum to 1 over the real source
    positions. `state` carries what a variant tracks across steps (the step index of local-m,
    coverage); `init_state` makes it, and it is a dict of batch-first tensors so that beam
    search can reorder it. Subclasses implement `score` and, if they need more, `forward`.
    """

    normalized = True  # False where the paper rescales the softmax (local-p's Gaussian)
    key_bias_size: int | None = None  # set where a term can join the keys inside a nonlinearity

    def __init__(self, query_size: int, key_size: int):
        super().__init__()
        self.query_size = query_size
        self.key_size = key_size

    def precompute(self, values: torch.Tensor) -> torch.Tensor:
        """Keys derived from the annotations, computed once per batch (default: the annotations)."""
        return values

    def init_state(self, values: torch.Tensor, mask: torch.Tensor) -> AttentionState | None:
        return None

    def score(
        self, query: torch.Tensor, keys: torch.Tensor, state: AttentionState | None
    ) -> torch.Tensor:
        """Unnormalised energies [B, T, S] for queries [B, T, Q]."""
        raise NotImplementedError

    def forward(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor,
        state: AttentionState | None = None,
        energy_bias: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, AttentionState | None]:
        """`energy_bias` [B, S] is added to the energies (a coverage term, for instance)."""
        single_step = query.dim() == 2
        if single_step:
            query = query.unsqueeze(1)
        energies = self.score(query, keys, state)
        if energy_bias is not None:
            energies = energies + energy_bias.unsqueeze(1)
        weights = masked_softmax(energies, mask.unsqueeze(1))
        context = torch.bmm(weights, values)
        if single_step:
            return context.squeeze(1), weights.squeeze(1), state
        return context, weights, state


def masked_softmax(energies: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim with masked-out positions exactly 0."""
    return torch.softmax(energies.masked_fill(~mask, float("-inf")), dim=-1)
