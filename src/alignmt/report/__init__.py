"""`alignmt-report DIR...`: runs side by side in `report.html` (runs table, charts, attention
explorer), `report.md`, `summary.csv` (a row per setting, seeds merged) and `runs.csv`.

Every directory below DIR holding a `config.yaml` is a run; runs without `metrics.json` are
reported as failed. Rows are what the runs' overrides vary (`alignmt.report.runs`), `seed`
merged into mean ± std; `--keys` groups by chosen config keys instead.
"""

from __future__ import annotations

import argparse
import html
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from alignmt.atomic import write_text
from alignmt.evaluation.by_length import read_bleu_by_length_csv
from alignmt.plots import plot_bleu_by_length
from alignmt.report import figures, page
from alignmt.report.explorer import explorer_data
from alignmt.report.runs import (
    SEED,
    find_runs,
    load_run,
    metric_columns,
    runs_frame,
    setting_columns,
    short,
    summarise,
)
from alignmt.report.significance import BOOTSTRAP_SAMPLES, paired_bootstrap_p

__all__ = ["collect", "collect_report", "find_runs", "main", "report", "run_report"]
log = logging.getLogger(__name__)
EXPLORER_CHOICES = ("groups", "all", "none")


def collect(runs: list[Path], keys: list[str] | None, metrics: list[str]) -> list[dict]:
    """One dict per run: `run`, `status`, the settings (`keys`, or what the runs vary),
    `seed` and `metrics` (None where missing)."""
    frame = runs_frame([load_run(r) for r in runs], metrics, keys)
    return frame.astype(object).where(frame.notna(), None).to_dict("records")


def group_labels(summary: pd.DataFrame, settings: list[str]) -> list[str]:
    return [
        ", ".join(f"{s}={row[s]}" for s in settings) or "all runs" for _, row in summary.iterrows()
    ]


def run_labels(summary: pd.DataFrame, groups: list[str], frame: pd.DataFrame) -> dict[Path, str]:
    """`group, seed N` (or the group alone for a group of one run), unique per run."""
    seeds = dict(zip(frame["run"], frame[SEED], strict=True))
    labels = {}
    for group, members in zip(groups, summary["members"], strict=True):
        for run in members:
            name = group if len(members) == 1 else f"{group}, seed {seeds[run]}"
            if name in labels.values():
                name = f"{name} ({Path(run).name})"
            labels[Path(run)] = name
    return labels


def choose_baseline(summary: pd.DataFrame, groups: list[str], baseline: str | None) -> int:
    """The row named by `baseline` (`key=value,...` of its settings, or a run directory in
    it); the first row when None."""
    if baseline is None:
        return 0
    wanted = set(re.split(r"\s*,\s*", baseline.strip()))
    for g, (group, members) in enumerate(zip(groups, summary["members"], strict=True)):
        if wanted <= set(group.split(", ")) or any(
            Path(baseline).resolve() == Path(m).resolve() for m in members
        ):
            return g
    raise SystemExit(f"--baseline {baseline!r} names no row; the rows are: " + "; ".join(groups))


def add_p_values(frame: pd.DataFrame, summary: pd.DataFrame, base: int, samples: int) -> None:
    """Per run, the paired-bootstrap p-value of its BLEU against the baseline row's run of
    the same seed (its first run where no seed matches); per row, the largest."""
    ok = set(frame.loc[frame["status"] == "ok", "run"])
    seeds = dict(zip(frame["run"], frame[SEED].astype(str), strict=True))
    baseline = [r for r in summary["members"].iloc[base] if r in ok]
    p_of_run = {}
    for g, members in enumerate(summary["members"]):
        if g == base or not baseline:
            continue
        for run in (r for r in members if r in ok):
            partner = next((b for b in baseline if seeds[b] == seeds[run]), baseline[0])
            p_of_run[run] = paired_bootstrap_p(Path(partner), Path(run), samples)
    frame["p"] = [p_of_run.get(r) for r in frame["run"]]
    summary["p"] = [
        max((p_of_run[r] for r in m if p_of_run.get(r) is not None), default=None)
        for m in summary["members"]
    ]
    summary["baseline"] = [g == base for g in range(len(summary))]


def markdown(summary: pd.DataFrame, settings: list[str], metrics: list[str]) -> str:
    columns = [*settings, "runs", *metrics] + (["p"] if "p" in summary else [])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for _, row in summary.iterrows():
        cells = [str(row[c]) for c in [*settings, "runs"]]
        cells += [page.mean_std(row, m).replace("–", "-") for m in metrics]
        if "p" in summary:
            cells.append(
                "baseline" if row["baseline"] else page.p_value_text(row["p"]).replace("–", "-")
            )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def explorer_runs(summary: pd.DataFrame, labels: dict[Path, str], frame, which: str):
    """The runs the explorer holds: the first finished run of each row, or all of them."""
    ok = set(frame.loc[frame["status"] == "ok", "run"])
    chosen = []
    for members in summary["members"]:
        finished = [Path(r) for r in members if r in ok]
        chosen += finished if which == "all" else finished[:1]
    return [(labels[run], run) for run in chosen] if which != "none" else []


@dataclass
class Report:
    """The runs found, one row each (`frame`), and the table (`summary`: a row per setting,
    seeds merged, `members` listing its runs)."""

    paths: list[Path]
    runs: list
    frame: pd.DataFrame
    summary: pd.DataFrame
    settings: list[str]
    metrics: list[str]
    groups: list[str]  # a label per row
    labels: dict[Path, str]  # a label per run


def collect_report(
    paths: list[Path],
    keys: list[str] | None = None,
    metrics: list[str] | None = None,
    label: list[str] | None = None,
    baseline: str | None = None,
    bootstrap_samples: int = BOOTSTRAP_SAMPLES,
) -> Report:
    found = find_runs(paths)
    if not found:
        where = ", ".join(map(str, paths))
        raise SystemExit(f"no runs (directories with config.yaml) under {where}")
    runs = [load_run(p) for p in found]
    metrics = list(metrics or metric_columns(runs))
    frame = runs_frame(runs, metrics, keys)
    settings = setting_columns(frame, metrics)
    for key in label or []:  # extra columns naming the curves of bleu_by_length.png
        if key not in frame:
            frame.insert(len(settings) + 2, key, [short(run.config.get(key)) for run in runs])
    summary = summarise(frame, settings, metrics)
    groups = group_labels(summary, settings)
    if len(summary) > 1 and bootstrap_samples > 0:
        add_p_values(frame, summary, choose_baseline(summary, groups, baseline), bootstrap_samples)
    labels = run_labels(summary, groups, frame)
    return Report(list(paths), runs, frame, summary, settings, metrics, groups, labels)


def report(
    paths: list[Path],
    out: Path | None = None,
    keys: list[str] | None = None,
    metrics: list[str] | None = None,
    label: list[str] | None = None,
    baseline: str | None = None,
    write_html: bool = True,
    explorer: str = "groups",
    bootstrap_samples: int = BOOTSTRAP_SAMPLES,
) -> pd.DataFrame:
    """Writes report.html, report.md, summary.csv, runs.csv and bleu_by_length.png into `out`
    (default: the first path) and returns the table: one row per setting (seeds merged),
    `members` listing its runs."""
    result = collect_report(paths, keys, metrics, label, baseline, bootstrap_samples)
    out = Path(out or paths[0])
    out.mkdir(parents=True, exist_ok=True)
    result.frame.to_csv(out / "runs.csv", index=False)
    result.summary.drop(columns="members").to_csv(out / "summary.csv", index=False)
    write_text(out / "report.md", markdown(result.summary, result.settings, result.metrics))
    _bleu_by_length_png(result, label, out)
    if write_html:
        write_text(out / "report.html", html_page(result, explorer))
    return result.summary


def run_report(run_dir: Path) -> Path | None:
    """report.html of one run, in its directory (the end of `alignmt-train`). A report that
    cannot be written is a warning: it never costs the run."""
    try:
        write_text(run_dir / "report.html", html_page(collect_report([run_dir]), "all"))
    except Exception as e:  # the run's own files are written; the page is an extra
        log.warning("no report.html for %s: %s", run_dir, e)
        return None
    return run_dir / "report.html"


def _bleu_by_length_png(result: Report, label, out: Path) -> None:
    curves, labels = {}, result.labels
    for run, (_, row) in zip(result.runs, result.frame.iterrows(), strict=True):
        if (run.path / "bleu_by_length.csv").is_file():
            name = " ".join(str(row[k]) for k in label) if label else labels[run.path]
            curves[name if name not in curves else f"{name} ({run.path.name})"] = (
                read_bleu_by_length_csv(run.path / "bleu_by_length.csv")
            )
    if curves:
        plot_bleu_by_length(curves, out / "bleu_by_length.png")


def html_page(result: Report, explorer: str = "groups") -> str:
    """The text of report.html."""
    summary, settings, groups, labels = (
        result.summary,
        result.settings,
        result.groups,
        result.labels,
    )
    frame, metrics = result.frame, result.metrics
    group_runs = [
        {"label": g, "runs": [Path(r) for r in m]}
        for g, m in zip(groups, summary["members"], strict=True)
    ]
    charts = {}
    if (chart := figures.bleu_by_length(group_runs)) is not None:
        charts["bleu_by_length"] = chart
    charts.update(
        {f"curves:{k}": v for k, v in figures.training_curves(group_runs, labels).items()}
    )
    if (chart := figures.beam_size(summary, settings)) is not None:
        charts["beam_size"] = chart
    if (chart := figures.exposure(group_runs)) is not None:
        charts["exposure"] = chart
    note = ""
    if "p" in summary:
        base = groups[int(summary["baseline"].to_numpy().argmax())]
        note = (
            f'<p class="note">p: paired bootstrap resampling of BLEU (Koehn 2004) against the '
            f"baseline row <b>{html.escape(base)}</b>, seed by seed; a row shows its largest p.</p>"
        )
    tables = (
        note,
        page.summary_table(summary, settings, metrics, figures.colour),
        page.runs_table(frame, metrics),
    )
    title = "alignmt report" + (f": {Path(frame['run'].iloc[0]).name}" if len(frame) == 1 else "")
    data = explorer_data(explorer_runs(summary, labels, frame, explorer))
    note = page.generated_note(len(frame), len(summary), result.paths)
    return page.page(title, note, tables, charts, data)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path, help="run or sweep directories")
    parser.add_argument("--out", type=Path, default=None, help="default: the first path")
    parser.add_argument(
        "--keys", nargs="*", default=None, help="group by these config keys instead"
    )
    parser.add_argument("--metrics", nargs="*", default=None, help="default: every test metric")
    parser.add_argument(
        "--label", nargs="*", default=None, help="config keys naming each PNG curve"
    )
    parser.add_argument("--baseline", default=None, help="key=value,... of the row to test against")
    parser.add_argument(
        "--html", action=argparse.BooleanOptionalAction, default=True, help="write report.html"
    )
    parser.add_argument(
        "--explorer", choices=EXPLORER_CHOICES, default="groups", help="runs in the explorer"
    )
    parser.add_argument(
        "--bootstrap", type=int, default=BOOTSTRAP_SAMPLES, help="resamples; 0: no p-values"
    )
    args = parser.parse_args(argv)
    out = args.out or args.paths[0]
    summary = report(
        args.paths,
        out,
        args.keys,
        args.metrics,
        args.label,
        args.baseline,
        args.html,
        args.explorer,
        args.bootstrap,
    )
    print((out / "report.md").read_text(), end="")
    if args.html:
        print(f"report: {out / 'report.html'}")
    del summary
