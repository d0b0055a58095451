"""Alignment error rate of attention against gold word alignments (Och and Ney, 2003).

Links are `(source_index, target_index)` pairs, 0-based, as in the Pharaoh `i-j` format
used by fast_align, GIZA++ and most gold alignment sets.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

Alignment = set[tuple[int, int]]

HARD_ALIGNMENT_METHODS = ("argmax", "threshold")

_LINK = re.compile(r"(\d+)-(\d+)", re.ASCII)


def parse_pharaoh(line: str) -> Alignment:
    """`"0-0 1-2"` -> `{(0, 0), (1, 2)}`; a blank line is a sentence with no links."""
    alignment = set()
    for token in line.split():
        match = _LINK.fullmatch(token)
        if match is None:
            raise ValueError(f"malformed alignment link {token!r} in {line!r}; expected i-j")
        alignment.add((int(match[1]), int(match[2])))
    return alignment


def format_pharaoh(alignment: Alignment) -> str:
    """Inverse of `parse_pharaoh`, links sorted so equal alignments give equal lines."""
    return " ".join(f"{i}-{j}" for i, j in sorted(alignment))


def hard_alignment(weights, method: str = "argmax", threshold: float = 0.5) -> Alignment:
    """Turn soft attention `[target_len, source_len]` (rows = output words) into links.

    `argmax` aligns every target word to its most attended source word, so each target
    word gets exactly one link. `threshold` keeps every link with weight >= `threshold`
    and nothing else, as in the usual AER evaluation of attention: a target word whose
    attention is spread out stays unaligned rather than getting a forced guess.
    """
    weights = np.asarray(weights, dtype=float)
    if weights.ndim != 2:
        raise ValueError(f"attention must be [target_len, source_len], got shape {weights.shape}")
    if method == "argmax":
        if weights.shape[1] == 0:
            return set()
        return {(int(i), j) for j, i in enumerate(weights.argmax(axis=1))}
    if method == "threshold":
        targets, sources = np.nonzero(weights >= threshold)
        return {(int(i), int(j)) for j, i in zip(targets, sources, strict=True)}
    raise ValueError(f"unknown method {method!r}; choose one of {HARD_ALIGNMENT_METHODS}")


def alignment_error_rate(
    predicted: Sequence[Alignment],
    sure: Sequence[Alignment],
    possible: Sequence[Alignment] | None = None,
) -> float:
    """Corpus AER = 1 - (|A∩S| + |A∩P|) / (|A| + |S|), counts summed over sentences.

    Sure links are always also possible (P is taken as P ∪ S), so the result lies in
    [0, 1]; without `possible`, P = S and AER is 1 - F1 of the links against S.
    """
    if possible is None:
        possible = sure
    if not len(predicted) == len(sure) == len(possible):
        raise ValueError(
            f"{len(predicted)} predicted, {len(sure)} sure and {len(possible)} possible "
            "alignments; need one of each per sentence"
        )
    hit_sure = hit_possible = n_predicted = n_sure = 0
    for a, s, p in zip(predicted, sure, possible, strict=True):
        a, s, p = set(a), set(s), set(p) | set(s)
        hit_sure += len(a & s)
        hit_possible += len(a & p)
        n_predicted += len(a)
        n_sure += len(s)
    if n_predicted + n_sure == 0:
        raise ValueError("AER is undefined with no predicted and no sure links")
    return 1.0 - (hit_sure + hit_possible) / (n_predicted + n_sure)
