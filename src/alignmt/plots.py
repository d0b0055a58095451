"""Figures of the paper: attention heatmaps (Fig. 3) and BLEU against sentence length (Fig. 2).

Figures are built with matplotlib's object-oriented `Figure` API rather than pyplot, so
nothing needs a display, no global figure state is touched, and a figure is freed as
soon as it is written (no leak when plotting thousands of sentences).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from alignmt.atomic import write_with


def _save(fig: Figure, path: str | Path) -> Path:
    write_with(path, lambda f: fig.savefig(f, format="png", dpi=150, bbox_inches="tight"))
    return Path(path)


def plot_attention(
    weights,
    source_tokens: list[str],
    target_tokens: list[str],
    path: str | Path,
    title: str | None = None,
) -> Path:
    """Grey-scale heatmap of attention, 0 black and 1 white, one square cell per word pair.

    `weights` is `[len(target_tokens), len(source_tokens)]`: source words run along the
    top, generated words down the side. Cells and labels shrink with sentence length so
    a sentence of ~80 words still fits on one readable image.
    """
    weights = np.asarray(weights, dtype=float)
    expected = (len(target_tokens), len(source_tokens))
    if weights.shape != expected or 0 in expected:
        raise ValueError(
            f"attention of shape {weights.shape} does not match "
            f"{expected[0]} target and {expected[1]} source tokens"
        )
    longest = max(expected)
    fontsize = min(10.0, max(5.0, 200.0 / longest))
    cell = 1.6 * fontsize / 72  # inches: a cell a bit taller than its label
    fig = Figure(figsize=(cell * expected[1], cell * expected[0]))
    ax = fig.add_axes((0, 0, 1, 1))  # tick labels and title sit outside; bbox "tight" keeps them
    ax.imshow(weights, cmap="gray", vmin=0.0, vmax=1.0, aspect="equal", interpolation="nearest")
    ax.xaxis.tick_top()
    labels = {"fontsize": fontsize, "parse_math": False}
    ax.set_xticks(range(expected[1]), labels=source_tokens, rotation=90, **labels)
    ax.set_yticks(range(expected[0]), labels=target_tokens, **labels)
    ax.tick_params(length=0)
    if title:
        ax.set_title(title, fontsize=max(fontsize, 8.0))
    return _save(fig, path)


def plot_bleu_by_length(
    curves: dict[str, list[dict]], path: str | Path, title: str | None = None
) -> Path:
    """One BLEU line per named run over the source-length buckets of `bleu_by_length`.

    Buckets keep the order of the rows; an empty bucket (`bleu=None`) leaves a gap.
    """
    if not curves:
        raise ValueError("no curves to plot")
    buckets = list(dict.fromkeys(row["bucket"] for rows in curves.values() for row in rows))
    position = {bucket: x for x, bucket in enumerate(buckets)}
    fig = Figure(figsize=(6.0, 4.0))
    ax = fig.add_subplot()
    for name, rows in curves.items():
        x = [position[row["bucket"]] for row in rows]
        y = [np.nan if row["bleu"] is None else row["bleu"] for row in rows]
        ax.plot(x, y, marker="o", label=name)
    ax.set_xticks(range(len(buckets)), labels=buckets)
    ax.set_xlabel("Source sentence length (words)")
    ax.set_ylabel("BLEU")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if len(curves) > 4:  # beside the axes: many curves would hide under an inner legend
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    else:
        ax.legend()
    if title:
        ax.set_title(title)
    return _save(fig, path)


def plot_exposure(curves, path: str | Path, title: str | None = None) -> Path:
    """The exposure-bias probe (`evaluation.exposure.ExposureCurves`) over target positions:
    accuracy after the reference prefix, after the model's own prefix (where an oracle knows
    the right next word), after an own prefix still intact, and the share still intact."""
    positions = np.arange(1, len(curves.sentences) + 1)
    fig = Figure(figsize=(6.0, 4.0))
    ax = fig.add_subplot()
    ax.plot(positions, curves.teacher_forced, label="accuracy, reference prefix")
    if curves.identified:
        ax.plot(positions, curves.own_prefix, label="accuracy, own prefix")
    ax.plot(positions, curves.intact_accuracy, label="accuracy, own prefix still intact")
    ax.plot(positions, curves.intact_share, label="own prefixes still intact")
    ax.set_xlabel("Target position")
    ax.set_ylabel("Share")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend()
    if title:
        ax.set_title(title)
    return _save(fig, path)
