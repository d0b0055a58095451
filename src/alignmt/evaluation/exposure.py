"""The exposure-bias probe: how much worse the decoder is on its own prefixes than on gold ones.

For every target position t: token accuracy when the decoder is fed the reference prefix
(teacher forcing, what training measures) and when it is fed its own (free running, what
decoding does), and the share of sentences whose own output is still error-free up to t.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class ExposureCurves:
    sentences: np.ndarray  # [T] sentences whose reference reaches position t
    teacher_forced: np.ndarray  # [T] accuracy at t given the reference prefix
    free_running: np.ndarray  # [T] accuracy at t of the model's own output
    error_free: np.ndarray  # [T] share of those sentences with no error up to t

    def summary(self) -> dict[str, float]:
        """Token-weighted accuracies over all positions, and their difference."""
        n = self.sentences.sum()
        tf = float((self.teacher_forced * self.sentences).sum() / n)
        free = float((self.free_running * self.sentences).sum() / n)
        return {"teacher_forced_accuracy": tf, "free_running_accuracy": free, "gap": tf - free}

    def write_csv(self, path: str | Path) -> None:
        with Path(path).open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(
                ["position", "sentences", "teacher_forced", "free_running", "error_free"]
            )
            for t in range(len(self.sentences)):
                writer.writerow(
                    [
                        t + 1,
                        int(self.sentences[t]),
                        self.teacher_forced[t],
                        self.free_running[t],
                        self.error_free[t],
                    ]
                )


def exposure_curves(
    references: Sequence[Sequence[int]],
    teacher_forced: Sequence[Sequence[int]],
    free_running: Sequence[Sequence[int]],
) -> ExposureCurves:
    """Each argument holds one id sequence per sentence, ending in [EOS]: the reference, the
    argmax at every reference position under teacher forcing, and the decoded output."""
    if not (len(references) == len(teacher_forced) == len(free_running)) or not references:
        raise ValueError("the probe needs the same, non-zero number of sentences in each list")
    T = max(len(r) for r in references)
    counts, tf_hits, free_hits, clean = (np.zeros(T) for _ in range(4))
    for ref, tf, free in zip(references, teacher_forced, free_running, strict=True):
        ref = np.asarray(ref)
        n = len(ref)
        tf = np.asarray(tf[:n])
        if len(tf) != n:
            raise ValueError("teacher-forced predictions must cover every reference position")
        own = np.full(n, -1)
        own[: min(n, len(free))] = np.asarray(free[:n])
        correct = own == ref
        counts[:n] += 1
        tf_hits[:n] += tf == ref
        free_hits[:n] += correct
        clean[:n] += np.cumprod(correct)
    return ExposureCurves(counts, tf_hits / counts, free_hits / counts, clean / counts)
