"""Dropped and repeated source words, read off the attention of the decoded output."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def source_coverage_errors(
    attentions: Iterable[np.ndarray], low: float = 0.5, high: float = 1.5
) -> dict[str, float]:
    """Over every source word of every sentence, the share whose total attention (summed over
    the output words) is below `low` (dropped) or above `high` (repeated). Each matrix is
    [output words, source words], without the [EOS] rows and columns."""
    dropped = repeated = words = 0
    for weights in attentions:
        totals = np.asarray(weights).sum(axis=0)
        dropped += int((totals < low).sum())
        repeated += int((totals > high).sum())
        words += totals.size
    if words == 0:
        raise ValueError("no source words to count")
    return {"dropped_words": dropped / words, "repeated_words": repeated / words}
