"""Encoder-decoder plumbing shared by every architecture family."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from alignmt.models.encoder import EncoderOutput, RNNEncoder

# Batch-first tensors (and nested dicts of them, e.g. the attention's own state): beam search
# and dropping finished sentences reorder them by index.
DecoderState = dict[str, "torch.Tensor | DecoderState"]


class Memory(NamedTuple):
    """What the decoder reads from the source at every step, computed once per batch."""

    values: torch.Tensor  # [B, S, D] annotations (or [B, 1, D] for a fixed-length summary)
    keys: torch.Tensor | None  # [B, S, A] precomputed attention keys
    mask: torch.Tensor  # [B, S] True on real source positions

    def index_select(self, index: torch.Tensor) -> Memory:
        return Memory(*(None if t is None else t.index_select(0, index) for t in self))


class DecoderOutput(NamedTuple):
    logits: torch.Tensor  # [B, T, V]
    attention: torch.Tensor | None  # [B, T, S]


def reorder_state(state: DecoderState, index: torch.Tensor) -> DecoderState:
    """Select batch rows of every state tensor (beam search, dropping finished sentences)."""
    return {
        name: reorder_state(t, index) if isinstance(t, dict) else t.index_select(0, index)
        for name, t in state.items()
    }


class Decoder(nn.Module):
    """A target-side language model conditioned on the source.

    `start` turns the encoder output into the per-batch memory and the initial state; `forward`
    scores a whole target prefix under teacher forcing (as fast as the architecture allows);
    `step` advances one token and is what greedy search, beam search and scheduled sampling call.
    Both paths compute the same function.
    """

    def start(self, encoded: EncoderOutput) -> tuple[Memory, DecoderState]:
        raise NotImplementedError

    def forward(self, tgt_in: torch.Tensor, memory: Memory, state: DecoderState) -> DecoderOutput:
        raise NotImplementedError

    def step(
        self, prev_tokens: torch.Tensor, memory: Memory, state: DecoderState
    ) -> tuple[torch.Tensor, DecoderState, torch.Tensor | None]:
        """prev_tokens [B] -> (logits [B, V], next state, attention weights [B, S] or None)."""
        raise NotImplementedError


class Seq2Seq(nn.Module):
    """An encoder and a decoder. Subclasses (RNNSearch, RNNEncDec, Luong) only assemble parts."""

    def __init__(self, encoder: RNNEncoder, decoder: Decoder):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    @property
    def has_attention(self) -> bool:
        return getattr(self.decoder, "attention", None) is not None

    def start(self, src: torch.Tensor, src_lengths: torch.Tensor) -> tuple[Memory, DecoderState]:
        return self.decoder.start(self.encoder(src, src_lengths))

    def forward(
        self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor
    ) -> DecoderOutput:
        memory, state = self.start(src, src_lengths)
        return self.decoder(tgt_in, memory, state)

    def step(
        self, prev_tokens: torch.Tensor, memory: Memory, state: DecoderState
    ) -> tuple[torch.Tensor, DecoderState, torch.Tensor | None]:
        return self.decoder.step(prev_tokens, memory, state)
