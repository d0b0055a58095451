"""Encoder-decoder plumbing shared by every architecture family."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn

from alignmt.models.encoder import EncoderOutput, RNNEncoder
from alignmt.models.step_linear import project

# Batch-first tensors (and nested dicts of them, e.g. the attention's own state): beam search
# and dropping finished sentences reorder them by index.
DecoderState = dict[str, "torch.Tensor | DecoderState"]

# feed(t, reference, logits) -> the input of step t + 1, given the reference token [B] and the
# logits [B, V] of step t: how scheduled sampling mixes in the model's own predictions.
Feed = Callable[[int, torch.Tensor, torch.Tensor], torch.Tensor]

# step(prev_tokens, memory, state) -> (features, next state, attention): `Decoder.step` or a
# compiled version of it (alignmt.models.compiled).
Step = Callable[..., tuple[torch.Tensor, "DecoderState", "torch.Tensor | None"]]


class Memory(NamedTuple):
    """What the decoder reads from the source at every step, computed once per batch."""

    values: torch.Tensor  # [B, S, D] annotations (or [B, 1, D] for a fixed-length summary)
    keys: torch.Tensor | None  # [B, S, A] precomputed attention keys (or the summary's terms)
    mask: torch.Tensor  # [B, S] True on real source positions

    def index_select(self, index: torch.Tensor) -> Memory:
        return Memory(*(None if t is None else t.index_select(0, index) for t in self))


class DecoderOutput(NamedTuple):
    logits: torch.Tensor  # [B, T, V]
    attention: torch.Tensor | None  # [B, T, S]


class ReadoutInputs(NamedTuple):
    """A decoder's forward pass up to its readout's last linear layer, logits = layer(inputs):
    what a loss that fuses that layer with the softmax takes (`alignmt.loss`)."""

    inputs: torch.Tensor  # [B, T, F]
    layer: nn.Linear  # [F] -> [V]
    attention: torch.Tensor | None  # [B, T, S]


def reorder_state(state: DecoderState, index: torch.Tensor) -> DecoderState:
    """Select batch rows of every state tensor (beam search, dropping finished sentences)."""
    return {
        name: reorder_state(t, index) if isinstance(t, dict) else t.index_select(0, index)
        for name, t in state.items()
    }


class Decoder(nn.Module):
    """A target-side language model conditioned on the source, defined by one `step`.

    `start` turns the encoder output into the per-batch memory and the initial state; `step`
    advances one token and returns the features the position-wise `readout` turns into logits.
    Teacher forcing, scheduled sampling, greedy and beam search all run `step`. A decoder may
    declare a faster teacher-forcing path (`teacher_forced`), and one for scheduled sampling
    (`scheduled`), that compute the same function; the tests prove each equal to the step path.

    A decoder that `copies_source` (the pointer-generator, `alignmt.models.copy`) starts from
    the encoder output and each source token's id in the batch's extended target vocabulary.
    """

    has_attention = False
    copies_source = False

    @property
    def beams_share_memory(self) -> bool:
        """Whether `step` takes several rows of state per row of memory (consecutive groups of
        rows, e.g. beam search's beams of one sentence): true where the decoder reads the
        memory only through a `stateless` attention."""
        return False

    def start(self, encoded: EncoderOutput) -> tuple[Memory, DecoderState]:
        raise NotImplementedError

    def step(
        self, prev_tokens: torch.Tensor, memory: Memory, state: DecoderState
    ) -> tuple[torch.Tensor, DecoderState, torch.Tensor | None]:
        """prev_tokens [B] -> (readout features [B, F], next state, attention [B, S] or None)."""
        raise NotImplementedError

    def readout(self, features: torch.Tensor) -> torch.Tensor:
        """Logits [..., V] from step features [..., F], for one step or all at once."""
        raise NotImplementedError

    def split_readout(self) -> tuple[Callable[[torch.Tensor], torch.Tensor], nn.Linear] | None:
        """(inputs, layer) with readout(f) = layer(inputs(f)) where the readout ends in a linear
        layer; None where it does not (the default)."""
        return None

    def step_readout(self, features: torch.Tensor) -> torch.Tensor:
        """`readout` of one search step's features [B, F]: outside autograd, the last linear
        layer multiplies by its weight packed once (step_linear.project) where BLAS would pack
        the whole vocabulary projection again at every step."""
        split = None if torch.is_grad_enabled() else self.split_readout()
        if split is None:
            return self.readout(features)
        inputs, layer = split
        return project(layer, inputs(features))

    def teacher_forced(
        self, tgt_in: torch.Tensor, memory: Memory, state: DecoderState
    ) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """The features [B, T, F] and attention of every step at once, where the architecture
        allows a faster way than stepping; None where it does not (the default)."""
        return None

    def scheduled(
        self, tgt_in: torch.Tensor, memory: Memory, state: DecoderState, feed: Feed
    ) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """Scheduled sampling's features and attention, as `teacher_forced` but with `feed`
        choosing the inputs, where the architecture allows a faster way than stepping; None
        where it does not (the default)."""
        return None

    def paper_init_(self) -> None:
        """Departures from the generic initialisation of Bahdanau et al.'s appendix B.1."""

    def forward(
        self, tgt_in: torch.Tensor, memory: Memory, state: DecoderState, feed: Feed | None = None
    ) -> DecoderOutput:
        """Scores a whole target prefix: teacher forcing, or scheduled sampling with `feed`."""
        out = self.readout_inputs(tgt_in, memory, state, feed)
        if isinstance(out, ReadoutInputs):
            return DecoderOutput(out.layer(out.inputs), out.attention)
        return out

    def readout_inputs(
        self, tgt_in: torch.Tensor, memory: Memory, state: DecoderState, feed: Feed | None = None
    ) -> ReadoutInputs | DecoderOutput:
        """`forward` up to the readout's last linear layer; `forward`'s own output where the
        readout does not end in one, or where `feed` takes the step path (whose every step
        needs its logits)."""
        if feed is None:
            fast = self.features(tgt_in, memory, state)
        else:
            fast = self.scheduled(tgt_in, memory, state, feed)
            if fast is None:
                return self.unroll(tgt_in, memory, state, feed)
        features, attention = fast
        split = self.split_readout()
        if split is None:
            return DecoderOutput(self.readout(features), attention)
        inputs, layer = split
        return ReadoutInputs(inputs(features), layer, attention)

    def features(
        self, tgt_in: torch.Tensor, memory: Memory, state: DecoderState, step: Step | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Teacher forcing up to the readout: every step's features [B, T, F] and attention,
        by the declared fast path where there is one, else by `step` (default: `self.step`)."""
        fast = self.teacher_forced(tgt_in, memory, state)
        return fast if fast is not None else self.run_steps(tgt_in, memory, state, step=step)

    def unroll(
        self, tgt_in: torch.Tensor, memory: Memory, state: DecoderState, feed: Feed | None = None
    ) -> DecoderOutput:
        """The step path. Without `feed` the readout runs once over all steps; with it, every
        step's logits are needed to choose the next input."""
        outputs, attention = self.run_steps(tgt_in, memory, state, feed)
        return DecoderOutput(self.readout(outputs) if feed is None else outputs, attention)

    def run_steps(
        self,
        tgt_in: torch.Tensor,
        memory: Memory,
        state: DecoderState,
        feed: Feed | None = None,
        step: Step | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`step` (default: `self.step`) at every position: the features [B, T, F] of every
        step without `feed`, their logits [B, T, V] with it; and the attention [B, T, S]."""
        step = step or self.step
        prev, outputs, weights = tgt_in[:, 0], [], []
        for t in range(tgt_in.size(1)):
            features, state, alpha = step(prev, memory, state)
            weights.append(alpha)
            if feed is None:
                outputs.append(features)
                if t + 1 < tgt_in.size(1):
                    prev = tgt_in[:, t + 1]
            else:
                outputs.append(self.readout(features))
                if t + 1 < tgt_in.size(1):
                    prev = feed(t, tgt_in[:, t + 1], outputs[-1])
        attention = None if weights[0] is None else torch.stack(weights, 1)
        return torch.stack(outputs, 1), attention


class Seq2Seq(nn.Module):
    """An encoder and a decoder. Subclasses (RNNSearch, RNNEncDec, Luong) only assemble parts.

    `fast_path`, where `build` sets one (config `fast_path`, `alignmt.models.compiled`), runs
    the decoder's training forward pass, start to the last step, compiled and on CUDA as
    captured graphs: the same function on the same encoder output (a copying decoder, whose
    start takes the source's copy ids, keeps the plain path).
    """

    fast_path: Callable[[EncoderOutput, torch.Tensor, Feed | None], DecoderOutput] | None = None

    def __init__(self, encoder: RNNEncoder, decoder: Decoder):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    @property
    def has_attention(self) -> bool:
        return self.decoder.has_attention

    @property
    def copies_source(self) -> bool:
        return self.decoder.copies_source

    @property
    def beams_share_memory(self) -> bool:
        return self.decoder.beams_share_memory

    def start(
        self, src: torch.Tensor, src_lengths: torch.Tensor, src_copy: torch.Tensor | None = None
    ) -> tuple[Memory, DecoderState]:
        """`src_copy` [B, S]: the source tokens' extended target ids, for a copying decoder."""
        encoded = self.encoder(src, src_lengths)
        if self.copies_source:
            return self.decoder.start(encoded, src_copy)
        if src_copy is not None:
            raise ValueError(
                "the batches carry copy ids (data.copy_ids=true) but the model does not copy: "
                "model/copy=pointer_generator, or data.copy_ids=false"
            )
        return self.decoder.start(encoded)

    def forward(
        self,
        src: torch.Tensor,
        src_lengths: torch.Tensor,
        tgt_in: torch.Tensor,
        feed: Feed | None = None,
        src_copy: torch.Tensor | None = None,
    ) -> DecoderOutput:
        if not self.copies_source:
            return self.decode(self.encoder(src, src_lengths), tgt_in, feed)
        memory, state = self.start(src, src_lengths, src_copy)
        return self.decoder(tgt_in, memory, state, feed)

    def readout_inputs(
        self,
        src: torch.Tensor,
        src_lengths: torch.Tensor,
        tgt_in: torch.Tensor,
        feed: Feed | None = None,
        src_copy: torch.Tensor | None = None,
    ) -> ReadoutInputs | DecoderOutput:
        """`forward` up to the readout's last linear layer where the decoder's readout ends in
        one (`Decoder.readout_inputs`); `forward`'s own output elsewhere, and on a compiled fast
        path (which runs the readout inside)."""
        if self.fast_path is not None:
            return self(src, src_lengths, tgt_in, feed, src_copy)
        memory, state = self.start(src, src_lengths, src_copy)
        return self.decoder.readout_inputs(tgt_in, memory, state, feed)

    def decode(
        self, encoded: EncoderOutput, tgt_in: torch.Tensor, feed: Feed | None = None
    ) -> DecoderOutput:
        """The decoder's forward pass on an encoder output (a decoder that does not copy): what
        scores several outputs of one source without encoding it again."""
        if self.copies_source:
            raise ValueError("a copying decoder starts from the batch's copy ids: use forward")
        if self.fast_path is not None:
            return self.fast_path(encoded, tgt_in, feed)
        memory, state = self.decoder.start(encoded)
        return self.decoder(tgt_in, memory, state, feed)

    def step(
        self, prev_tokens: torch.Tensor, memory: Memory, state: DecoderState
    ) -> tuple[torch.Tensor, DecoderState, torch.Tensor | None]:
        """prev_tokens [B] -> (logits [B, V], next state, attention [B, S] or None)."""
        features, state, attention = self.decoder.step(prev_tokens, memory, state)
        return self.decoder.step_readout(features), state, attention

    def paper_init_(self) -> None:
        self.decoder.paper_init_()
