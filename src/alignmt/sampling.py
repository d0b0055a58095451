"""Scheduled sampling (Bengio et al. 2015): feed the model its own predictions during training.

At training step i the decoder is fed the reference token with probability eps_i and its own
previous prediction otherwise, a coin flipped per token. The schedules are the paper's.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from alignmt.special_tokens import BOS_ID, PAD_ID

MODES = ("greedy", "sample")


class Schedule:
    """eps_i, the probability of feeding the reference token at training step i."""

    def __init__(self, mode: str = "greedy"):
        if mode not in MODES:
            raise ValueError(f"sampling.mode must be one of {MODES}, got {mode!r}")
        self.mode = mode  # greedy: the model's argmax; sample: a draw from its softmax

    def ratio(self, step: int) -> float:
        raise NotImplementedError

    def feed(self, step: int):
        """The decoder's `feed` for training step `step`, or None for plain teacher forcing."""
        ratio = self.ratio(step)
        return None if ratio >= 1.0 else MixedFeed(ratio, self.mode)


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


class MixedFeed:
    """Each next input is the reference token with probability `ratio`, else the model's own
    prediction at this step (argmax or a sample; never [PAD] or [BOS], which are not words; no
    gradient flows through the choice). One coin per token, from the global torch generator,
    whose state checkpoints carry. `ratio` may be a 0-dim tensor on the logits' device, which a
    captured CUDA graph reads anew at every replay (`with_ratio`); nothing here copies from the
    host, so the feed can be captured."""

    def __init__(self, ratio: float | torch.Tensor, mode: str = "greedy"):
        self.ratio = ratio
        self.mode = mode

    def with_ratio(self, ratio: float | torch.Tensor) -> MixedFeed:
        """The same feed with another ratio."""
        return MixedFeed(ratio, self.mode)

    @torch.no_grad()
    def __call__(self, t: int, reference: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        own = self.own(logits)
        use_reference = torch.rand(reference.shape, device=reference.device) < self.ratio
        return torch.where(use_reference, reference, own)

    @torch.no_grad()
    def choose(
        self, reference: torch.Tensor, logits_of: Callable[[torch.Tensor], torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """What `__call__` feeds, as (rows [N] fed the model's own prediction, those
        predictions [N]), asking `logits_of(rows)` only for the logits it needs: those rows
        when greedy, every row when sampling (the draws then match `__call__`'s). The fused
        recurrences use it; it reads its coins on the host, so it cannot be captured."""
        B = reference.size(0)
        every_row = torch.arange(B, device=reference.device)
        drawn = self.own(logits_of(every_row)) if self.mode == "sample" else None
        use_reference = torch.rand(reference.shape, device=reference.device) < self.ratio
        rows = (~use_reference).nonzero().squeeze(1)
        if drawn is not None:
            return rows, drawn[rows]
        return rows, self.own(logits_of(rows)) if len(rows) else rows

    def own(self, logits: torch.Tensor) -> torch.Tensor:
        """The model's own next tokens from logits [N, V]: never [PAD] or [BOS]."""
        logits = logits.float().clone()
        for token in (PAD_ID, BOS_ID):
            logits[:, token] = -math.inf
        if self.mode == "greedy":
            return logits.max(-1).indices  # argmax's first maximum, by the faster CPU kernel
        return torch.multinomial(torch.softmax(logits, -1), 1).squeeze(1)
