"""Additive ("concat", "mlp") attention of Bahdanau et al. 2014."""

from __future__ import annotations

import torch
from torch import nn

from alignmt.models import native_energies
from alignmt.models.attention.base import Attention, AttentionState
from alignmt.models.functional import additive_energies, tanh_
from alignmt.models.step_linear import project


class AdditiveAttention(Attention):
    """e_ij = v_a^T tanh(W_a s + U_a h_j), with U_a h_j computed once per batch (`precompute`).
    `attention_size` (the rows of W_a and U_a) defaults to the query size, as in the paper."""

    def __init__(self, query_size: int, key_size: int, attention_size: int | None = None):
        super().__init__(query_size, key_size)
        self.attention_size = attention_size or query_size
        self.key_proj = nn.Linear(key_size, self.attention_size, bias=False)  # U_a
        self.query_proj = nn.Linear(query_size, self.attention_size)  # W_a (its bias is b_a)
        self.energy = nn.Linear(self.attention_size, 1, bias=False)  # v_a

    def precompute(self, values: torch.Tensor) -> torch.Tensor:
        return self.key_proj(values)

    def score(self, query: torch.Tensor, keys: torch.Tensor, state: AttentionState) -> torch.Tensor:
        if not torch.is_grad_enabled() and not query.is_cuda:  # decoding: cache-sized blocks
            # W_a packed once (step_linear.project), the search's queries as rows
            queries = project(self.query_proj, query.flatten(0, -2)).view(*query.shape[:-1], -1)
            v = self.energy.weight.view(-1)
            if native_energies.usable(keys):
                return native_energies.query_energies(queries, keys, v)
            return additive_energies(queries, keys, v)
        queries = self.query_proj(query)
        # [B, T, 1, A] + [B, 1, S, A] -> [B, T, S]
        hidden = tanh_(queries.unsqueeze(2) + keys.unsqueeze(1))
        return self.energy(hidden).squeeze(-1)

    def key_term_size(self) -> int:
        return self.attention_size

    def fused_energy_weights(self, coverage: bool = False):
        if self.coverage is not None and not coverage:
            return None
        return self.query_proj.weight, self.query_proj.bias, self.energy.weight.view(-1)

    def paper_init_(self) -> None:
        """W_a and U_a from N(0, 0.001^2), v_a zero (appendix B.1)."""
        nn.init.normal_(self.key_proj.weight, 0.0, 0.001)
        nn.init.normal_(self.query_proj.weight, 0.0, 0.001)
        nn.init.zeros_(self.energy.weight)


class ConcatAttention(AdditiveAttention):
    """Luong et al. 2015's `concat` score v_a^T tanh(W_a [h_t; h_s]): the same function as
    Bahdanau's additive score, W_a split into its query and key halves (the key half is
    precomputed once per batch). It differs from `additive` only in the Luong decoder's query,
    which is the current state h_t rather than the previous one."""
