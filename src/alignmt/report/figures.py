"""The report's charts as Plotly figure specs (plain dicts, drawn by the inlined plotly.js):
BLEU by source length (Bahdanau et al.'s Figure 2), training and validation curves, the
beam-size curve, the exposure-bias probe.

A group is a row of the runs table: `{"label": str, "runs": [Path, ...]}`; its colour is
the same in every chart.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

# Plotly's default colour sequence.
PALETTE = (
    "#636efa",
    "#ef553b",
    "#00cc96",
    "#ab63fa",
    "#ffa15a",
    "#19d3f3",
    "#ff6692",
    "#b6e880",
    "#ff97ff",
    "#fecb52",
)
CURVES = {
    "train/loss": "Training loss",
    "val/loss": "Validation loss",
    "val/bleu": "Validation BLEU",
}
EXPOSURE = {
    "teacher_forced": "reference prefix",
    "own_prefix": "own prefix",
    "intact_accuracy": "own prefix still intact",
}


def colour(group: int) -> str:
    return PALETTE[group % len(PALETTE)]


def layout(title: str, x: str, y: str, **extra) -> dict:
    return {
        "title": {"text": title},
        "xaxis": {"title": {"text": x}},
        "yaxis": {"title": {"text": y}},
        "height": 460,
        "margin": {"l": 60, "r": 20, "t": 50, "b": 40},
        "legend": {"font": {"size": 11}, "orientation": "h", "yanchor": "top", "y": -0.18},
        "hovermode": "closest",
        **extra,
    }


def values(series) -> list:
    """A column as JSON values: NaN becomes null (a gap in a line)."""
    return [None if isinstance(v, float) and math.isnan(v) else v for v in series]


def line(name: str, x, y, g: int, **extra) -> dict:
    return {
        "type": "scatter",
        "mode": "lines+markers",
        "name": name,
        "x": values(x),
        "y": values(y),
        "line": {"color": colour(g)},
        **extra,
    }


def _tables(runs: list[Path], name: str) -> list[pd.DataFrame]:
    return [pd.read_csv(run / name) for run in runs if (run / name).is_file()]


def bleu_by_length(groups: list[dict]) -> dict | None:
    """One line per group: the mean BLEU of its runs per source-length bucket, ± the
    standard deviation over seeds as error bars."""
    traces, units = [], set()
    for g, group in enumerate(groups):
        tables = _tables(group["runs"], "bleu_by_length.csv")
        if not tables:
            continue
        rows = pd.concat(tables)
        if "length_unit" in rows:
            units.update(rows["length_unit"].dropna())
        stats = rows.groupby("bucket", sort=False)["bleu"].agg(["mean", "std"])
        errors = {
            "type": "data",
            "array": values(stats["std"].fillna(0)),
            "visible": len(tables) > 1,
        }
        traces.append(line(group["label"], stats.index, stats["mean"], g, error_y=errors))
    if not traces:
        return None
    unit = " / ".join(sorted(units)) or "words"
    return {
        "data": traces,
        "layout": layout("BLEU by source sentence length", f"source length ({unit})", "BLEU"),
    }


def training_curves(groups: list[dict], labels: dict[Path, str]) -> dict[str, dict]:
    """Per logged curve (`CURVES`), one line per run from its `logs/metrics.csv`, coloured
    by group."""
    figures = {}
    for metric, title in CURVES.items():
        traces = []
        for g, group in enumerate(groups):
            for run in group["runs"]:
                log = run / "logs" / "metrics.csv"
                if not log.is_file():
                    continue
                frame = pd.read_csv(log)
                if metric not in frame:
                    continue
                points = frame[["step", metric]].dropna()
                traces.append(
                    line(labels[run], points["step"], points[metric], g, legendgroup=group["label"])
                )
        if traces:
            figures[metric] = {"data": traces, "layout": layout(title, "step", metric)}
    return figures


def beam_size(summary: pd.DataFrame, settings: list[str], metric: str = "test/bleu") -> dict | None:
    """BLEU against the beam size, one line per combination of the other settings, where the
    runs vary a `*beam_size` setting (`alignmt-evaluate sweep=beam_size`)."""
    beam = next((s for s in settings if s.split(".")[-1] == "beam_size"), None)
    if beam is None or metric not in summary:
        return None
    frame = summary.assign(_beam=pd.to_numeric(summary[beam], errors="coerce"))
    frame = frame.dropna(subset=["_beam"])
    if frame["_beam"].nunique() < 2:
        return None
    others = [s for s in settings if s != beam]
    traces = []
    for g, (key, rows) in enumerate(frame.groupby(others or (lambda _: ""), sort=False)):
        rows = rows.sort_values("_beam")
        parts = key if isinstance(key, tuple) else (key,)
        name = (
            ", ".join(f"{s}={v}" for s, v in zip(others, parts, strict=True)) if others else metric
        )
        errors = {"type": "data", "array": values(rows[f"{metric} std"].fillna(0))}
        traces.append(line(name, rows["_beam"], rows[metric], g, error_y=errors))
    return {
        "data": traces,
        "layout": layout(
            "BLEU by beam size", beam, "BLEU", xaxis={"type": "log", "title": {"text": beam}}
        ),
    }


def exposure(groups: list[dict]) -> dict | None:
    """The exposure-bias probe per target position, mean over each group's runs: accuracy
    after the reference prefix (solid), after the model's own prefix where the corpus knows
    the right next words (dashed), else after own prefixes still intact (dotted)."""
    traces = []
    for g, group in enumerate(groups):
        tables = _tables(group["runs"], "exposure.csv")
        if not tables:
            continue
        mean = pd.concat(tables).groupby("position").mean(numeric_only=True)
        own = "own_prefix" if mean["own_prefix"].notna().any() else "intact_accuracy"
        for column, dash in (
            ("teacher_forced", "solid"),
            (own, "dash" if own == "own_prefix" else "dot"),
        ):
            name = f"{group['label']}: {EXPOSURE[column]}"
            traces.append(
                line(
                    name,
                    mean.index,
                    mean[column],
                    g,
                    mode="lines",
                    legendgroup=group["label"],
                    line={"color": colour(g), "dash": dash},
                )
            )
    if not traces:
        return None
    return {
        "data": traces,
        "layout": layout(
            "Exposure bias: next-token accuracy by target position", "target position", "accuracy"
        ),
    }
