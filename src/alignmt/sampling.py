"""Scheduled sampling (Bengio et al. 2015): feed the model its own predictions during training.

At training step i the decoder is fed the reference token with probability eps_i and its own
previous prediction otherwise, a coin flipped per token. The schedules are the paper's.
"""

from __future__ import annotations

import math

import torch

from alignmt.models.seq2seq import DecoderOutput, Seq2Seq

MODES = ("greedy", "sample")


class Schedule:
    """eps_i, the probability of feeding the reference token at training step i."""

    def __init__(self, mode: str = "greedy"):
        if mode not in MODES:
            raise ValueError(f"sampling.mode must be one of {MODES}, got {mode!r}")
        self.mode = mode  # greedy: the model's argmax; sample: a draw from its softmax

    def ratio(self, step: int) -> float:
        raise NotImplementedError


class TeacherForcing(Schedule):
    """Always the reference (eps = 1): plain maximum-likelihood training."""

    def ratio(self, step: int) -> float:
        return 1.0


class LinearDecay(Schedule):
    """eps_i = max(eps_min, k - c i)."""

    def __init__(self, k: float = 1.0, c: float = 1e-4, eps_min: float = 0.0, mode: str = "greedy"):
        super().__init__(mode)
        self.k, self.c, self.eps_min = k, c, eps_min

    def ratio(self, step: int) -> float:
        return max(self.eps_min, self.k - self.c * step)


class ExponentialDecay(Schedule):
    """eps_i = k^i, k < 1."""

    def __init__(self, k: float = 0.9995, mode: str = "greedy"):
        super().__init__(mode)
        self.k = k

    def ratio(self, step: int) -> float:
        return self.k**step


class InverseSigmoidDecay(Schedule):
    """eps_i = k / (k + exp(i / k)), k >= 1."""

    def __init__(self, k: float = 500.0, mode: str = "greedy"):
        super().__init__(mode)
        self.k = k

    def ratio(self, step: int) -> float:
        return self.k / (self.k + math.exp(min(step / self.k, 700.0)))


def scheduled_forward(
    model: Seq2Seq,
    src: torch.Tensor,
    src_lengths: torch.Tensor,
    tgt_in: torch.Tensor,
    ratio: float,
    mode: str = "greedy",
) -> DecoderOutput:
    """Teacher forcing where each input token after [BOS] is, with probability 1 - ratio,
    replaced by the model's own prediction at the previous step (argmax or a sample; no
    gradient flows through the choice). Runs step by step through `model.step`."""
    memory, state = model.start(src, src_lengths)
    prev = tgt_in[:, 0]
    logits, weights = [], []
    for t in range(tgt_in.size(1)):
        step_logits, state, alpha = model.step(prev, memory, state)
        logits.append(step_logits)
        weights.append(alpha)
        if t + 1 < tgt_in.size(1):
            with torch.no_grad():
                if mode == "greedy":
                    own = step_logits.argmax(-1)
                else:
                    own = torch.multinomial(torch.softmax(step_logits.float(), -1), 1).squeeze(1)
                use_reference = torch.rand(prev.shape, device=prev.device) < ratio
            prev = torch.where(use_reference, tgt_in[:, t + 1], own)
    attention = None if weights[0] is None else torch.stack(weights, 1)
    return DecoderOutput(torch.stack(logits, 1), attention)
