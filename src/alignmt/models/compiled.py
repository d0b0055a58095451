"""The decoder's training forward pass at accelerator speed, computing what the step path does.

A recurrent decoder's training step is a loop of small kernels: at 80 sentences each step's
matrix products take microseconds, and launching some twenty kernels per position, forward
and backward, one at a time from Python is what takes the time. The fast path (config
`fast_path`, switched on by `trainer=gpu`) keeps the decoder's own `start` and `step`, one
step function per decoder, and changes only how they run:

- `compile`: `torch.compile` of the decoder's `step` fuses each step's element-wise work, in
  the forward and the backward pass. Shapes become dynamic after the second one seen, so
  one or two compilations serve every batch.
- padding: batch, source and target lengths are rounded up (`bucket`), so that batches fall
  into few shapes. Padded source positions are masked, padded target positions come after
  the real ones and are cut away, padded sentences attend to one position and receive no
  gradient: the real rows compute exactly what they compute unpadded.
- `cuda_graphs`: on CUDA, the decoder from `start` to its last step is captured once per
  padded shape as a forward and a backward graph (`cuda_graphs.CapturedGraphs`) and replayed:
  two launches per batch.

A decoder's declared teacher-forcing path (`teacher_forced`) runs where it has one; the output
layer runs outside, on the real positions only. Scheduled sampling is captured too: the feed
reads its ratio from a device tensor (`MixedFeed.with_ratio`). Scoring without gradients
(validation, test) takes the decoder's own path. Where a capture fails, the graphs are
switched off with a warning and the compiled, padded path goes on.
"""

from __future__ import annotations

import logging
from functools import partial

import torch

from alignmt.models.cuda_graphs import CapturedGraphs, CaptureFailed
from alignmt.models.encoder import EncoderOutput
from alignmt.models.seq2seq import Decoder, DecoderOutput, Feed, Step
from alignmt.special_tokens import PAD_ID

log = logging.getLogger(__name__)


def bucket(n: int, multiple: int) -> int:
    """n rounded up to a multiple of `multiple`, or of an eighth of the largest power of two
    not above n where that is larger: at most an eighth more than n, in few distinct values."""
    step = max(multiple, 1 << max(n.bit_length() - 4, 0))
    return -(-n // step) * step


def pad_to(x: torch.Tensor, shape: tuple[int, ...], value: float | bool = 0) -> torch.Tensor:
    """x in the leading corner of a tensor of `shape` filled with `value` (differentiable)."""
    if tuple(x.shape) == shape:
        return x
    out = x.new_full(shape, value)
    out[tuple(slice(0, n) for n in x.shape)] = x
    return out


def pad_batch(
    encoded: EncoderOutput, tgt_in: torch.Tensor, length_multiple: int, batch_multiple: int
) -> tuple[EncoderOutput, torch.Tensor]:
    """The encoder output and decoder input with batch and lengths rounded up by `bucket`."""
    (B, S), T = encoded.mask.shape, tgt_in.size(1)
    Bp, Sp = bucket(B, batch_multiple), bucket(S, length_multiple)
    mask = pad_to(encoded.mask, (Bp, Sp), False)
    if Bp > B:
        mask[B:, 0] = True  # a padded sentence attends to one position: a softmax over none is NaN

    def rows(x: torch.Tensor | None) -> torch.Tensor | None:
        return None if x is None else pad_to(x, (Bp, *x.shape[1:]))

    padded = EncoderOutput(
        pad_to(encoded.states, (Bp, Sp, encoded.states.size(2))),
        mask,
        rows(encoded.hidden),
        rows(encoded.cell),
    )
    return padded, pad_to(tgt_in, (Bp, bucket(T, length_multiple)), PAD_ID)


class FastPath:
    """`Seq2Seq.fast_path`: the decoder's training forward pass from the encoder output,
    compiled (`compile`), padded, and captured as CUDA graphs on CUDA (`cuda_graphs`).
    `backend` is torch.compile's; the `max_graphs` most recently used shapes keep theirs."""

    def __init__(
        self,
        decoder: Decoder,
        compile: bool = False,
        cuda_graphs: bool = False,
        length_multiple: int = 8,
        batch_multiple: int = 8,
        max_graphs: int = 64,
        backend: str = "inductor",
    ):
        if length_multiple < 1 or batch_multiple < 1:
            raise ValueError(
                "fast_path.length_multiple and fast_path.batch_multiple must be at least 1, "
                f"got {length_multiple} and {batch_multiple}"
            )
        self.decoder = decoder
        self.step = compiled_step(decoder, backend) if compile else decoder.step
        self.graphs = CapturedGraphs(max_graphs) if cuda_graphs else None
        self.length_multiple = length_multiple
        self.batch_multiple = batch_multiple

    def __call__(
        self, encoded: EncoderOutput, tgt_in: torch.Tensor, feed: Feed | None = None
    ) -> DecoderOutput:
        decoder = self.decoder
        if not torch.is_grad_enabled():
            memory, state = decoder.start(encoded)
            return decoder(tgt_in, memory, state, feed)
        (B, S), T = encoded.mask.shape, tgt_in.size(1)
        padded, padded_in = pad_batch(encoded, tgt_in, self.length_multiple, self.batch_multiple)
        if self.graphs is not None and tgt_in.is_cuda:
            outputs, attention = self._replay(padded, padded_in, feed)
        else:
            outputs, attention = self.run(padded, padded_in, feed)
        outputs = outputs[:B, :T]
        if feed is None:
            outputs = decoder.readout(outputs)
        return DecoderOutput(outputs, None if attention is None else attention[:B, :T, :S])

    def run(
        self, encoded: EncoderOutput, tgt_in: torch.Tensor, feed: Feed | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The decoder from `start` to its last step: every step's features (their logits
        with `feed`) and attention."""
        memory, state = self.decoder.start(encoded)
        if feed is None:
            return self.decoder.features(tgt_in, memory, state, step=self.step)
        return self.decoder.run_steps(tgt_in, memory, state, feed, step=self.step)

    def _replay(
        self, encoded: EncoderOutput, tgt_in: torch.Tensor, feed: Feed | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`run` by the graphs captured for this shape; the feed's ratio is a graph input."""
        inputs = [t for t in (*encoded, tgt_in) if t is not None]
        if feed is not None:
            inputs.append(torch.full((), float(feed.ratio), device=tgt_in.device))
        has_cell, has_attention = encoded.cell is not None, self.decoder.has_attention

        def captured(states, mask, hidden, *rest):
            cell, rest = (rest[0], rest[1:]) if has_cell else (None, rest)
            run_feed = None if feed is None else feed.with_ratio(rest[1])
            result = self.run(EncoderOutput(states, mask, hidden, cell), rest[0], run_feed)
            return tuple(t for t in result if t is not None)

        params = [p for p in self.decoder.parameters() if p.requires_grad]
        key = (
            tuple((tuple(x.shape), x.dtype, x.requires_grad) for x in inputs),
            None if feed is None else feed.mode,
            self.decoder.training,
            torch.is_autocast_enabled("cuda"),
            torch.get_autocast_dtype("cuda"),
            tuple(p.data_ptr() for p in params),
        )
        try:
            outputs = self.graphs(key, captured, inputs, params)
        except CaptureFailed as error:
            log.warning("fast_path.cuda_graphs switched off: capture failed (%s)", error)
            self.graphs = None
            return self.run(encoded, tgt_in, feed)
        return outputs[0], outputs[1] if has_attention else None


_COMPILED: dict[tuple[type, str], Step] = {}


def compiled_step(decoder: Decoder, backend: str) -> Step:
    """torch.compile of the decoder class's `step`, bound to `decoder`: compiled once per
    class and backend (modules are graph inputs to torch.compile), so a fast path made again
    (another run, another decoder of the same family) does not compile again."""
    key = (type(decoder), backend)
    if key not in _COMPILED:
        _COMPILED[key] = torch.compile(type(decoder).step, backend=backend)
    return partial(_COMPILED[key], decoder)


def fast_path(decoder: Decoder, node) -> FastPath | None:
    """The `fast_path` config node's fast path for `decoder`; None when it switches nothing on
    (or is absent, as in configs written before it existed)."""
    if node is None or not (node.get("compile") or node.get("cuda_graphs")):
        return None
    return FastPath(decoder, **node)
