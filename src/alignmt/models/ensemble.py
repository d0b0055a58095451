"""Several trained models decoding as one: the average of their log-probabilities per step.

An `Ensemble` offers what the searches and the evaluator ask of a model (`start`, `step`,
`has_attention`, the teacher-forced call) and nothing else, so greedy and beam search, [UNK]
replacement, heatmaps and every test metric work with it unchanged.

Combination: each member's log-softmax is averaged, log p(y) = 1/M sum_m log p_m(y), and
returned as logits; every consumer (the searches, the cross-entropy of perplexity) takes a
log-softmax of logits, so the ensemble's distribution is the *normalised* geometric mean of
the members'. Normalising makes it a distribution: perplexity is then a perplexity, beam
scores are log-probabilities comparable across lengths, and [EOS] is not favoured at steps
where members disagree (an unnormalised geometric mean sums to less than one there).
Attention is the mean of the members that have any (for heatmaps and [UNK] replacement).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import nn

from alignmt.models.seq2seq import DecoderOutput, DecoderState, Memory


class EnsembleMemory(NamedTuple):
    """Every member's memory; selecting rows selects them in each."""

    members: tuple[Memory, ...]

    def index_select(self, index: torch.Tensor) -> EnsembleMemory:
        return EnsembleMemory(tuple(m.index_select(index) for m in self.members))


def member_key(i: int) -> str:
    return f"member{i}"


class Ensemble(nn.Module):
    """Models sharing one source and one target vocabulary, decoding as one model."""

    def __init__(self, members: Sequence[nn.Module]):
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one model")
        if any(m.copies_source for m in members):
            raise ValueError(
                "copying models (model/copy=pointer_generator) cannot be ensembled: their "
                "extended vocabularies are per model"
            )
        self.members = nn.ModuleList(members)

    @property
    def has_attention(self) -> bool:
        return any(m.has_attention for m in self.members)

    @property
    def beams_share_memory(self) -> bool:
        return all(m.beams_share_memory for m in self.members)

    copies_source = False

    def start(
        self, src: torch.Tensor, src_lengths: torch.Tensor
    ) -> tuple[EnsembleMemory, DecoderState]:
        memories, state = [], {}
        for i, member in enumerate(self.members):
            memory, state[member_key(i)] = member.start(src, src_lengths)
            memories.append(memory)
        return EnsembleMemory(tuple(memories)), state

    def step(
        self, prev_tokens: torch.Tensor, memory: EnsembleMemory, state: DecoderState
    ) -> tuple[torch.Tensor, DecoderState, torch.Tensor | None]:
        """prev_tokens [B] -> (mean log-probabilities [B, V], next state, mean attention)."""
        log_probs, weights, next_state = [], [], {}
        for i, (member, own) in enumerate(zip(self.members, memory.members, strict=True)):
            logits, next_state[member_key(i)], attention = member.step(
                prev_tokens, own, state[member_key(i)]
            )
            log_probs.append(torch.log_softmax(logits.float(), dim=-1))
            weights.append(attention)
        return _mean(log_probs), next_state, _mean_attention(weights)

    def forward(
        self,
        src: torch.Tensor,
        src_lengths: torch.Tensor,
        tgt_in: torch.Tensor,
        src_copy: torch.Tensor | None = None,
    ) -> DecoderOutput:
        """Teacher forcing: every step's mean log-probabilities [B, T, V] and mean attention
        (`src_copy` is always None: no member copies)."""
        outputs = [member(src, src_lengths, tgt_in) for member in self.members]
        log_probs = [torch.log_softmax(o.logits.float(), dim=-1) for o in outputs]
        return DecoderOutput(_mean(log_probs), _mean_attention([o.attention for o in outputs]))


def _mean(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack(tensors).mean(dim=0)


def _mean_attention(weights: list[torch.Tensor | None]) -> torch.Tensor | None:
    present = [w.float() for w in weights if w is not None]
    return _mean(present) if present else None
