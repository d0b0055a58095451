"""Competence-based curriculum (Platanios et al., 2019): short sentences first.

A model learns word order and attention's long jumps on short sentences, where the word an
output needs is one of few, long before it finds them in long ones. At step t training draws
its pairs from the shortest c(t) share of the training set, with the square-root competence

    c(t) = min(1, sqrt(t (1 - c0^2) / T + c0^2)),

which admits new lengths fastest at the start, while each is a large part of a small pool;
from step T on, training sees every pair, in ordinary epochs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Curriculum:
    """The schedule: which share of the training pairs, shortest first, each step draws from."""

    steps: int  # T: the step from which every pair is in reach
    initial: float = 0.1  # c0: the share of the pairs, shortest first, in reach at step 0

    def __post_init__(self):
        if self.steps < 1:
            raise ValueError(f"curriculum.steps must be positive, got {self.steps}")
        if not 0 < self.initial <= 1:
            raise ValueError(f"curriculum.initial must be in (0, 1], got {self.initial}")

    def competence(self, step: np.ndarray | int) -> np.ndarray:
        """c(step): the share of the pairs, shortest first, that training draws from."""
        c0 = self.initial
        grown = np.asarray(step, dtype=np.float64) * (1 - c0 * c0) / self.steps + c0 * c0
        return np.minimum(1.0, np.sqrt(grown))

    def reach(self, step: np.ndarray | int, pairs: int) -> np.ndarray:
        """How many of `pairs` pairs, shortest first, are in reach at `step` (at least one)."""
        return np.clip(np.ceil(self.competence(step) * pairs), 1, pairs).astype(np.int64)
