"""The source encoder: embeddings and a (bi)directional recurrent layer that never reads padding
into a real position's state."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from alignmt.models.fused_gru import GRURecurrence
from alignmt.models.fused_recurrence import runs_fused
from alignmt.special_tokens import PAD_ID


class EncoderOutput(NamedTuple):
    states: torch.Tensor  # [B, S, D] annotations h_j (D = 2H when bidirectional)
    mask: torch.Tensor  # [B, S] True on real source positions
    hidden: torch.Tensor  # [B, L, D] every layer's final state: [forward last; backward first]
    cell: torch.Tensor | None  # [B, L, D] the same for LSTM memory cells, else None

    @property
    def final(self) -> torch.Tensor:
        """[B, D] the top layer's final states (forward after the last word, backward after
        the first)."""
        return self.hidden[:, -1]

    def index_select(self, rows: torch.Tensor) -> EncoderOutput:
        """The encodings of sentences `rows` [N] (with repeats: several outputs of one source)."""
        return EncoderOutput(*(None if x is None else x.index_select(0, rows) for x in self))


RNN_TYPES = {"gru": nn.GRU, "lstm": nn.LSTM}


class RNNEncoder(nn.Module):
    """Embeds the source and runs a recurrent encoder over it so that padding never enters a
    real position's state (the backward direction starts at each sentence's real last word):
    over packed sequences, or, for a GRU trained on CPU, over the padded batch (`_padded`).

    `reverse_source` feeds the words in reverse order (Sutskever et al. 2014); the annotations
    are returned in source order either way, so attention and alignments stay comparable.
    """

    def __init__(
        self,
        vocab_size: int,
        embedding_dim: int,
        hidden_size: int,
        num_layers: int = 1,
        bidirectional: bool = True,
        rnn_type: str = "gru",
        dropout: float = 0.0,
        reverse_source: bool = False,
    ):
        super().__init__()
        if rnn_type not in RNN_TYPES:
            raise ValueError(f"rnn_type must be one of {sorted(RNN_TYPES)}, got {rnn_type!r}")
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=PAD_ID)
        self.dropout = nn.Dropout(dropout)
        self.rnn = RNN_TYPES[rnn_type](
            embedding_dim,
            hidden_size,
            num_layers=num_layers,
            bidirectional=bidirectional,
            batch_first=True,
            dropout=dropout if num_layers > 1 else 0.0,
        )
        self.hidden_size = hidden_size
        self.bidirectional = bidirectional
        self.reverse_source = reverse_source
        self.output_size = hidden_size * (2 if bidirectional else 1)
        self.num_layers = num_layers
        self.rnn_type = rnn_type

    def forward(self, src: torch.Tensor, src_lengths: torch.Tensor) -> EncoderOutput:
        mask = src != PAD_ID
        if self.reverse_source:
            src = reverse_padded(src, src_lengths)
        embedded = self.dropout(self.embedding(src))
        if self.rnn_type == "gru" and embedded.device.type == "cpu" and torch.is_grad_enabled():
            states, final = self._padded(embedded, src_lengths.to(src.device), mask)
        else:
            packed = pack_padded_sequence(
                embedded, src_lengths.cpu(), batch_first=True, enforce_sorted=False
            )
            packed_states, final = self.rnn(packed)
            states, _ = pad_packed_sequence(
                packed_states, batch_first=True, total_length=src.size(1)
            )
        if self.reverse_source:
            states = reverse_padded(states, src_lengths)
        states = self.dropout(states)
        hidden, cell = final if isinstance(final, tuple) else (final, None)
        return EncoderOutput(states, mask, self._by_layer(hidden), self._by_layer(cell))

    def _padded(self, embedded, lengths, mask) -> tuple[torch.Tensor, torch.Tensor]:
        """(states, final states) as the packed recurrence computes them, from the padded batch,
        one direction at a time: the backward one reads each row reversed in place, so it
        starts at the row's last real word, and final states are read at each row's last real
        word. Padding only follows real words, so it reaches no real position. On CPU, the
        packed recurrence back-propagates through a zero-filled copy of its whole input per
        time step, which costs far more than recurring over the padding. Each direction runs
        as a hand-written recurrence (fused_gru) where it can."""
        B, H, L = embedded.size(0), self.hidden_size, self.num_layers
        directions = 2 if self.bidirectional else 1
        per_direction = 4 if self.rnn.bias else 2  # W_ih, W_hh (, b_ih, b_hh)
        rows, last = torch.arange(B, device=embedded.device), lengths - 1
        x, finals = embedded, []
        for layer in range(L):
            if layer > 0:
                x = nn.functional.dropout(x, self.rnn.dropout, self.training)
            outputs = []
            for direction in range(directions):
                first = (layer * directions + direction) * per_direction
                weights = self.rnn._flat_weights[first : first + per_direction]
                inputs = x if direction == 0 else reverse_padded(x, lengths)
                if self.rnn.bias and runs_fused(inputs):
                    out = GRURecurrence.apply(inputs, *weights)
                else:
                    h0 = inputs.new_zeros(1, B, H)
                    out, _ = torch._VF.gru(
                        inputs, h0, weights, self.rnn.bias, 1, 0.0, self.training, False, True
                    )
                finals.append(out[rows, last])
                outputs.append(out if direction == 0 else reverse_padded(out, lengths))
            x = torch.cat(outputs, dim=-1) if directions == 2 else outputs[0]
        return x * mask.unsqueeze(-1), torch.stack(finals)  # padding zero, as when packed

    def _by_layer(self, final: torch.Tensor | None) -> torch.Tensor | None:
        """[L * directions, B, H] -> [B, L, directions * H]."""
        if final is None:
            return None
        directions = 2 if self.bidirectional else 1
        B = final.size(1)
        return final.view(-1, directions, B, self.hidden_size).permute(2, 0, 1, 3).flatten(2)


def reverse_padded(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse each row's first `lengths[b]` positions along dim 1, leaving padding in place."""
    S = x.size(1)
    positions = torch.arange(S, device=x.device).unsqueeze(0)
    lengths = lengths.to(x.device).unsqueeze(1)
    index = torch.where(positions < lengths, lengths - 1 - positions, positions)
    if x.dim() == 3:
        index = index.unsqueeze(-1).expand_as(x)
    return x.gather(1, index)
