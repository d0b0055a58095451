"""`python -m alignmt.studies.exposure_grid SWEEP_DIR`: the counting-language exposure table.

Reads the training runs of `alignmt-train sweep=counting_exposure` (each holds config.yaml,
metrics.json and exposure.csv) and writes to `--out` (default: SWEEP_DIR):

  exposure_grid.md   models x sampling schedules: the probe's four columns averaged over
  exposure_grid.csv  positions (token-weighted, from metrics.json), and the same columns at
                     target positions 2, 10, 30 and 59 (from exposure.csv); mean ± std over
                     seeds. With --prefix-dependence, the best checkpoint of every run is
                     also probed for prefix dependence (swapped prefixes against perturbed
                     sources, `alignmt.evaluation.prefix_dependence`).
  exposure_grid.png  accuracy on the model's own prefix against position, one panel per model,
                     one line per schedule (the mean over seeds)
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from collections import defaultdict
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from omegaconf import OmegaConf

from alignmt.atomic import write_text, write_with
from alignmt.report.runs import find_runs, short
from alignmt.studies import markdown_table

COLUMNS = {  # the probe's four columns: metrics.json key, exposure.csv column
    "reference prefix": ("teacher_forced_accuracy", "teacher_forced"),
    "own prefix": ("own_prefix_accuracy", "own_prefix"),
    "intact prefix": ("intact_accuracy", "intact_accuracy"),
    "intact share": ("intact_share", "intact_share"),
}
POSITIONS = (2, 10, 30, 59)
PREFIX_DEPENDENCE = ("prefix_tv", "source_tv")


def read_curve(path: Path) -> dict[str, np.ndarray]:
    """exposure.csv's columns by name (NaN where a cell is blank)."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    return {
        name: np.array([float(r[name]) if r[name] else np.nan for r in rows]) for name in rows[0]
    }


def probe_checkpoint(path: str) -> dict[str, float]:
    """The prefix-dependence probe of a checkpoint on its test split."""
    from alignmt.build import restore
    from alignmt.evaluation.prefix_dependence import prefix_dependence_over

    restored = restore(path)
    restored.datamodule.prepare_data()
    restored.datamodule.setup("test")
    loader = restored.datamodule.test_dataloader()
    return prefix_dependence_over(restored.model, loader).summary()


def read_run(run: Path, prefix_dependence: bool) -> dict:
    """One run's row: its model, schedule and seed, and every value of the tables."""
    config = OmegaConf.load(run / "config.yaml")
    metrics = json.loads((run / "metrics.json").read_text())
    curve = read_curve(run / "exposure.csv")
    row = {
        "model": short(OmegaConf.select(config, "model._target_")),
        "sampling": short(OmegaConf.select(config, "sampling._target_")),
        "seed": config.get("seed"),
        "bleu": metrics.get("test/bleu"),
    }
    for column, (key, name) in COLUMNS.items():
        row[column] = metrics.get(f"test/exposure/{key}")
        for t in POSITIONS:
            row[f"{column} @{t}"] = float(curve[name][t - 1]) if t <= len(curve[name]) else None
    row["curve"] = curve["own_prefix"]
    if prefix_dependence:
        summary = probe_checkpoint(metrics.get("best_checkpoint") or run / "checkpoints/last.ckpt")
        row.update({key: summary[key] for key in PREFIX_DEPENDENCE})
    return row


def mean_std(values: list) -> str:
    values = [v for v in values if v is not None and not np.isnan(v)]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"


def tables(rows: list[dict], prefix_dependence: bool) -> tuple[list[dict], list[dict]]:
    """(averages over positions, values at POSITIONS), one entry per model and schedule."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        groups[(row["model"], row["sampling"])].append(row)
    averages, positions = [], []
    for (model, sampling), group in groups.items():
        cell = {"model": model, "sampling": sampling, "runs": len(group)}
        names = ["bleu", *COLUMNS, *(PREFIX_DEPENDENCE if prefix_dependence else ())]
        averages.append({**cell, **{n: mean_std([r[n] for r in group]) for n in names}})
        for t in POSITIONS:
            at = {c: mean_std([r[f"{c} @{t}"] for r in group]) for c in COLUMNS}
            positions.append({**cell, "position": t, **at})
    return averages, positions


def plot(rows: list[dict], path: Path) -> None:
    models = list(dict.fromkeys(r["model"] for r in rows))
    fig = Figure(figsize=(4.5 * len(models), 3.8))
    panels = np.atleast_1d(fig.subplots(1, len(models), sharey=True))
    for ax, model in zip(panels, models, strict=True):
        mine = [r for r in rows if r["model"] == model]
        for sampling in dict.fromkeys(r["sampling"] for r in mine):
            curves = [r["curve"] for r in mine if r["sampling"] == sampling]
            T = min(len(c) for c in curves)
            mean = np.nanmean([c[:T] for c in curves], axis=0)
            ax.plot(np.arange(1, T + 1), mean, label=sampling)
        ax.set_title(model)
        ax.set_xlabel("Target position")
        ax.grid(alpha=0.3)
    panels[0].set_ylabel("Accuracy, own prefix")
    panels[0].legend(fontsize="small")
    write_with(path, lambda f: fig.savefig(f, format="png", dpi=150, bbox_inches="tight"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path, help="sweep or run directories")
    parser.add_argument("--out", type=Path, default=None, help="default: the first path")
    parser.add_argument("--prefix-dependence", action="store_true", help="probe checkpoints")
    args = parser.parse_args(argv)
    runs = [r for r in find_runs(args.paths) if (r / "exposure.csv").is_file()]
    if not runs:
        raise SystemExit("no finished runs with an exposure.csv under the given paths")
    rows = [read_run(run, args.prefix_dependence) for run in runs]
    averages, positions = tables(rows, args.prefix_dependence)
    out = args.out or args.paths[0]
    out.mkdir(parents=True, exist_ok=True)
    text = (
        "Averaged over positions (token-weighted)\n\n"
        + markdown_table(averages)
        + f"\nAt target positions {', '.join(map(str, POSITIONS))}\n\n"
        + markdown_table(positions)
    )
    write_text(out / "exposure_grid.md", text)
    with (out / "exposure_grid.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[k for k in rows[0] if k != "curve"])
        writer.writeheader()
        writer.writerows({k: v for k, v in r.items() if k != "curve"} for r in rows)
    plot(rows, out / "exposure_grid.png")
    print(text, end="")


if __name__ == "__main__":
    main()
