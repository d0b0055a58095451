"""Diagnostics of attention itself, read off the attention of the decoded outputs: how spread
it is, how far from the diagonal, which source words it never reaches, and whether it shows
the classic failures (uniform weights that never learnt to focus, or every step on one place).

Each matrix is one sentence's attention [output tokens + [EOS], source tokens + [EOS]], as
`Translation.attention` holds it. Entropy and collapse are taken over whole rows ([EOS]
included: attention stuck on the source [EOS] is a collapse); distance from the diagonal and
unattended words over the words only ([EOS] row and column left out). Rows are normalised
first, so variants whose weights do not sum to 1 (local-p) are measured as distributions.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

UNIFORM_RATIO = 0.9  # a step whose entropy is at least this share of log(positions) is uniform
COLLAPSE_SHARE = 0.9  # a sentence whose focused steps' argmax sits this often on one position
UNATTENDED = 0.05  # a source word whose total weight over the output words is below this
DEGENERATE = 0.5  # share of uniform steps or collapsed sentences that flags the attention
MIN_STEPS = 3  # fewer focused steps or source positions than this cannot show a collapse


def _rows(weights: np.ndarray) -> np.ndarray:
    """Each row as a distribution (rows without weight stay 0)."""
    totals = weights.sum(axis=1, keepdims=True)
    return np.divide(weights, totals, out=np.zeros_like(weights), where=totals > 0)


def step_entropies(weights: np.ndarray) -> np.ndarray:
    """-sum_j a_ij log a_ij of every row (nats), 0 log 0 = 0."""
    p = _rows(np.asarray(weights, dtype=float))
    logs = np.log(p, out=np.zeros_like(p), where=p > 0)
    return -(p * logs).sum(axis=1)


def modal_share(weights: np.ndarray) -> float:
    """The share of rows whose most attended position is the sentence's most common one."""
    argmax = np.asarray(weights).argmax(axis=1)
    return np.bincount(argmax).max() / len(argmax)


def diagonal_distance(weights: np.ndarray) -> np.ndarray:
    """Per output word i of T, sum_j a_ij |(j + 1/2) / S - (i + 1/2) / T| over the S source
    words (rows renormalised over the words; a row without weight on them is left out): 0
    for attention on the diagonal of the length-normalised square, up to 1."""
    words = _rows(np.asarray(weights, dtype=float)[:-1, :-1])
    T, S = words.shape
    if T == 0 or S == 0:
        return np.zeros(0)
    offset = np.abs((np.arange(S) + 0.5) / S - ((np.arange(T) + 0.5) / T)[:, None])
    distance = (words * offset).sum(axis=1)
    return distance[words.sum(axis=1) > 0]


def attention_statistics(
    attentions: Iterable[np.ndarray],
    uniform_ratio: float = UNIFORM_RATIO,
    collapse_share: float = COLLAPSE_SHARE,
    unattended: float = UNATTENDED,
) -> dict[str, float]:
    """Corpus diagnostics: mean entropy per step (nats) and as a share of its maximum log S;
    the share of steps near uniform; the share of sentences whose focused (not near-uniform)
    steps collapsed onto one position (among sentences with at least MIN_STEPS focused steps
    and source positions: a uniform row's argmax means nothing); `attention_degenerate` 1 when
    either share reaches DEGENERATE; the mean distance from the diagonal; the share of source
    words whose total attention over the output words stays below `unattended`."""
    entropies, ratios, distances = [], [], []
    collapsed = long_enough = unattended_words = source_words = 0
    for weights in attentions:
        weights = np.asarray(weights, dtype=float)
        entropy = step_entropies(weights)
        entropies.append(entropy)
        ratio = entropy / np.log(weights.shape[1]) if weights.shape[1] > 1 else np.zeros(0)
        ratios.append(ratio)
        focused = weights[ratio < uniform_ratio] if ratio.size else weights[:0]
        if min(focused.shape) >= MIN_STEPS:
            long_enough += 1
            collapsed += modal_share(focused) >= collapse_share
        distances.append(diagonal_distance(weights))
        totals = weights[:-1, :-1].sum(axis=0)
        unattended_words += int((totals < unattended).sum())
        source_words += totals.size
    if not entropies:
        raise ValueError("no attention to measure")
    ratio = np.concatenate(ratios)
    uniform = float((ratio >= uniform_ratio).mean()) if ratio.size else 0.0
    collapse = collapsed / long_enough if long_enough else 0.0
    distance = np.concatenate(distances)
    return {
        "attention_entropy": float(np.concatenate(entropies).mean()),
        "attention_entropy_ratio": float(ratio.mean()) if ratio.size else 0.0,
        "attention_uniform_steps": uniform,
        "attention_collapsed_sentences": float(collapse),
        "attention_degenerate": float(max(uniform, collapse) >= DEGENERATE),
        "attention_diagonal_distance": float(distance.mean()) if distance.size else 0.0,
        "unattended_words": unattended_words / source_words if source_words else 0.0,
    }
