"""The one attention interface every decoder, search and coverage model talks to."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

AttentionState = dict[str, "torch.Tensor | AttentionState"]


class Attention(nn.Module):
    """Scores source annotations against a decoder query and returns their weighted average.

    `precompute(values)` runs once per batch (e.g. Bahdanau's U_a h_j); `forward` then runs
    once per decoder step with a query [B, Q], or once for all steps with a query [B, T, Q].
    Weights are exactly 0 on padding and, where `normalized`, sum to 1 over the positions that
    may be attended. The state is a dict of batch-first tensors (so searches can reorder it),
    made by `init_state` and advanced after every step.

    A variant is one subclass that implements `score` and, where it needs them, the hooks:
    `window` (which positions may be attended, and a factor on the weights), `start_state` /
    `next_state` (what it carries across steps), `key_term_size` (a coverage term can join the
    keys inside its nonlinearity). Coverage (`add_coverage`) composes with every variant.
    """

    normalized = True  # False where the weights are rescaled after the softmax (local-p)

    def __init__(self, query_size: int, key_size: int):
        super().__init__()
        self.query_size = query_size
        self.key_size = key_size
        self.coverage = None
        self.coverage_proj: nn.Linear | None = None

    # ------------------------------------------------------------------ hooks
    def score(self, query: torch.Tensor, keys: torch.Tensor, state: AttentionState) -> torch.Tensor:
        """Unnormalised energies [B, T, S] for queries [B, T, Q]."""
        raise NotImplementedError

    def precompute(self, values: torch.Tensor) -> torch.Tensor:
        """Keys derived from the annotations, computed once per batch (default: the annotations)."""
        return values

    def window(
        self, query: torch.Tensor, mask: torch.Tensor, state: AttentionState
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Positions that may be attended [B, T or 1, S], and a factor applied to the weights
        after the softmax (or None). Default: every real source position, no factor."""
        return mask.unsqueeze(1), None

    def start_state(self, values: torch.Tensor, mask: torch.Tensor) -> AttentionState:
        """What the variant carries across steps, at the first step."""
        return {}

    def next_state(self, state: AttentionState, steps: int) -> AttentionState:
        """The variant's state after `steps` more steps."""
        return state

    def key_term_size(self) -> int | None:
        """The size of the keys if the score passes keys + query through a nonlinearity (where a
        coverage term belongs, as in Tu et al.'s additive model); None otherwise."""
        return None

    def fused_energy_weights(
        self, coverage: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """(W_q, b_q, v) when the energies are exactly v . tanh(keys + W_q s + b_q) with no state,
        window or coverage, which the fused CPU recurrences compute themselves; None otherwise.
        `coverage=True`: also with a coverage term inside the tanh, for a caller that runs the
        coverage model too (fused_recurrence.coverage_inputs)."""
        return None

    def paper_init_(self) -> None:
        """Departures from the generic initialisation of Bahdanau et al.'s appendix B.1."""

    # -------------------------------------------------------------- coverage
    def add_coverage(self, make_coverage: Callable[..., nn.Module]) -> None:
        """Tu et al. 2016: a coverage vector per source word steers the energies, inside the
        score's nonlinearity where it has one, as an added energy otherwise."""
        self.coverage = make_coverage(key_size=self.key_size, query_size=self.query_size)
        inside = self.key_term_size()
        self.coverage_proj = nn.Linear(self.coverage.size, inside or 1, bias=False)

    @property
    def stateless(self) -> bool:
        """Whether it carries nothing across steps (no coverage, no `start_state`): then the
        queries of several rows may share one row of memory (beam search's beams)."""
        return self.coverage is None and type(self).start_state is Attention.start_state

    @property
    def sequential(self) -> bool:
        """Whether steps must be attended one after another (coverage depends on the last)."""
        return self.coverage is not None

    # --------------------------------------------------------------- forward
    def init_state(self, values: torch.Tensor, mask: torch.Tensor) -> AttentionState:
        state = self.start_state(values, mask)
        if self.coverage is not None:
            state["coverage"] = self.coverage.init(values, mask)
        return state

    def forward(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor,
        state: AttentionState | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, AttentionState]:
        """query [B, Q] (one step) or [B, T, Q] (T steps) -> (context, weights, next state);
        without a state, the first step's. A `stateless` attention also takes one step of
        [B * G, Q]: G consecutive queries per row of memory, attended as G steps would be."""
        if state is None:
            state = self.init_state(values, mask)
        if query.dim() == 3 and self.sequential:
            return self._one_step_at_a_time(query, keys, values, mask, state)
        single_step = query.dim() == 2
        if single_step:
            rows, memory_rows = query.size(0), values.size(0)
            if rows != memory_rows and (not self.stateless or rows % memory_rows):
                why = "keeps state per row" if not self.stateless else "needs as many per row"
                raise ValueError(
                    f"{type(self).__name__} {why}: {rows} queries cannot share {memory_rows} "
                    "rows of memory"
                )
            query = query.view(values.size(0), -1, query.size(-1))
        weights = self.weights(query, keys, mask, state)
        context = torch.bmm(weights, values)
        state = self._advance(state, query, weights, 1 if single_step else query.size(1))
        if single_step:
            return context.view(-1, context.size(-1)), weights.view(-1, weights.size(-1)), state
        return context, weights, state

    def weights(
        self, query: torch.Tensor, keys: torch.Tensor, mask: torch.Tensor, state: AttentionState
    ) -> torch.Tensor:
        """Attention weights [B, T, S] for queries [B, T, Q]."""
        energy_term = None
        if self.coverage is not None:
            term = self.coverage_proj(state["coverage"]["coverage"])  # [B, S, A or 1]
            if self.key_term_size() is None:
                energy_term = term.squeeze(-1).unsqueeze(1)
            else:
                keys = keys + term
        energies = self.score(query, keys, state)
        if energy_term is not None:
            energies = energies + energy_term
        allowed, factor = self.window(query, mask, state)
        weights = masked_softmax(energies, allowed)
        return weights if factor is None else weights * factor

    def _advance(self, state: AttentionState, query, weights, steps: int) -> AttentionState:
        new_state = self.next_state(state, steps)
        if self.coverage is not None:  # sequential: one step here
            new_state = {
                **new_state,
                "coverage": self.coverage.update(
                    state["coverage"], weights.squeeze(1), query.squeeze(1)
                ),
            }
        return new_state

    def _one_step_at_a_time(self, query, keys, values, mask, state):
        contexts, weights = [], []
        for t in range(query.size(1)):
            context, alpha, state = self(query[:, t], keys, values, mask, state)
            contexts.append(context)
            weights.append(alpha)
        return torch.stack(contexts, 1), torch.stack(weights, 1), state


def masked_softmax(energies: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim with masked-out positions exactly 0."""
    return torch.softmax(energies.masked_fill(~mask, float("-inf")), dim=-1)
