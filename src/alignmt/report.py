"""`alignmt-report PATH...`: one table and one BLEU-by-length figure for many runs.

Every directory below PATH holding a `config.yaml` is a run; runs without `metrics.json`
are reported as failed. Rows that differ only in `seed` are merged into mean ± std.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from collections import defaultdict
from pathlib import Path

from omegaconf import OmegaConf

from alignmt.evaluation.by_length import read_bleu_by_length_csv
from alignmt.plots import plot_bleu_by_length

DEFAULT_KEYS = ("model._target_", "model.attention._target_")
DEFAULT_METRICS = (
    "test/bleu",
    "test/bleu_len_41_50",
    "test/bleu_len_51_plus",
    "test/ppl",
    "test/aer",
)


def find_runs(paths: list[Path]) -> list[Path]:
    runs = set()
    for path in paths:
        if (path / "config.yaml").is_file():
            runs.add(path)
        runs.update(p.parent for p in path.rglob("config.yaml") if p.parent.name != ".hydra")
    return sorted(runs)


def config_value(config, key: str):
    value = OmegaConf.select(config, key, default=None)
    if isinstance(value, str) and value.startswith("alignmt."):
        value = value.rsplit(".", 1)[-1]  # RNNSearch, AdditiveAttention, ...
    return value


def collect(runs: list[Path], keys: list[str], metrics: list[str]) -> list[dict]:
    rows = []
    for run in runs:
        config = OmegaConf.load(run / "config.yaml")
        if (run / "evaluate.yaml").is_file():  # an evaluation run: its decoding settings win
            config = OmegaConf.merge(config, OmegaConf.load(run / "evaluate.yaml"))
        row = {"run": str(run), **{k: config_value(config, k) for k in keys}}
        row["seed"] = config.get("seed")
        file = run / "metrics.json"
        if file.is_file():
            values = json.loads(file.read_text())
            row.update({m: values.get(m) for m in metrics}, status="ok")
        else:
            row.update({m: None for m in metrics}, status="failed")
        rows.append(row)
    return rows


def summarise(rows: list[dict], keys: list[str], metrics: list[str]) -> list[dict]:
    """Merge runs with equal `keys` (different seeds): `mean ± std` and the number of runs."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        groups[tuple(str(row[k]) for k in keys)].append(row)
    table = []
    for group in groups.values():
        ok = [r for r in group if r["status"] == "ok"]
        entry = {k: group[0][k] for k in keys}
        entry["runs"] = f"{len(ok)}/{len(group)}" + ("" if len(ok) == len(group) else " failed")
        for metric in metrics:
            values = [r[metric] for r in ok if r[metric] is not None]
            if not values:
                entry[metric] = "-"
            elif len(values) == 1:
                entry[metric] = f"{values[0]:.2f}"
            else:
                entry[metric] = f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"
        table.append(entry)
    return table


def markdown(table: list[dict]) -> str:
    columns = list(table[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(row[c]) for c in columns) + " |" for row in table]
    return "\n".join(lines) + "\n"


def report(
    paths: list[Path],
    out: Path,
    keys: list[str],
    metrics: list[str],
    label: list[str] | None = None,
):
    runs = find_runs(paths)
    if not runs:
        where = ", ".join(map(str, paths))
        raise SystemExit(f"no runs (directories with config.yaml) under {where}")
    label = label or []
    rows = collect(runs, [*keys, *(k for k in label if k not in keys)], metrics)
    table = summarise(rows, keys, metrics)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "runs.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (out / "report.md").write_text(markdown(table))
    curves = {}
    for run, row in zip(runs, rows, strict=True):
        if (run / "bleu_by_length.csv").is_file():
            name = " ".join(str(row[k]) for k in label) if label else run.name
            curves[name if name not in curves else f"{name} ({run.name})"] = (
                read_bleu_by_length_csv(run / "bleu_by_length.csv")
            )
    if curves:
        plot_bleu_by_length(curves, out / "bleu_by_length.png")
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path, help="run or sweep directories")
    parser.add_argument("--out", type=Path, default=None, help="default: the first path")
    parser.add_argument("--keys", nargs="*", default=list(DEFAULT_KEYS), help="config keys")
    parser.add_argument("--metrics", nargs="*", default=list(DEFAULT_METRICS))
    parser.add_argument("--label", nargs="*", default=None, help="config keys naming each curve")
    args = parser.parse_args(argv)
    table = report(args.paths, args.out or args.paths[0], args.keys, args.metrics, args.label)
    print(markdown(table), end="")


if __name__ == "__main__":
    main()
