"""`python -m alignmt.studies.beam_curse SWEEP_DIR`: the beam-search curse on a curve.

Reads the run directories of `alignmt-evaluate ckpt=PATH sweep=beam_curse` (each holds
evaluate.yaml, metrics.json and search.csv) and writes to `--out` (default: SWEEP_DIR):

  beam_curse.png  BLEU and the hypothesis/reference length ratio against the beam size (log x),
                  one line per ranking (no penalty, length normalisation, GNMT's alpha)
  beam_curse.md   the table: BLEU, length ratio, shares of empty and truncated outputs and of
                  search errors,
  beam_curse.csv  and, against the next smaller beam of the same ranking, the share of
                  sentences whose output scores higher, and scores higher with a lower
                  sentence BLEU
"""

from __future__ import annotations

import argparse
import csv
import json
from collections import defaultdict
from pathlib import Path

from matplotlib.figure import Figure
from omegaconf import OmegaConf

from alignmt.atomic import write_text, write_with
from alignmt.evaluation.search import SEARCH_CSV, larger_beam_regressions, read_outcomes
from alignmt.report.runs import find_runs
from alignmt.studies import markdown_table

COLUMNS = {
    "BLEU": "test/bleu",
    "length ratio": "test/length_ratio",
    "empty": "test/search/empty_share",
    "truncated": "test/search/truncated_share",
    "search errors": "test/search/search_error_rate",
}


def ranking_name(length_penalty: float, coverage_penalty: float) -> str:
    """How a run ranks finished hypotheses, in words."""
    if length_penalty == 0:
        name = "log P"
    elif length_penalty == 1:
        name = "length normalised (GNMT lp, alpha=1)"
    else:
        name = f"GNMT lp, alpha={length_penalty:g}"
    return name if coverage_penalty == 0 else f"{name}, beta={coverage_penalty:g}"


def read_runs(paths: list[Path]) -> dict[str, dict[int, Path]]:
    """{ranking: {beam size: run directory}} of the finished evaluation runs."""
    curves: dict[str, dict[int, Path]] = defaultdict(dict)
    for run in find_runs(paths):
        if not all((run / f).is_file() for f in ("evaluate.yaml", "metrics.json", SEARCH_CSV)):
            continue
        decoding = OmegaConf.load(run / "evaluate.yaml").decoding
        if "beam_size" not in decoding:
            continue
        name = ranking_name(decoding.length_penalty, decoding.coverage_penalty)
        if decoding.beam_size in curves[name]:
            raise SystemExit(f"two runs of beam {decoding.beam_size}, {name}: keep one sweep")
        curves[name][decoding.beam_size] = run
    if not curves:
        raise SystemExit(f"no beam-search evaluation runs under {', '.join(map(str, paths))}")
    return dict(curves)


def table(curves: dict[str, dict[int, Path]]) -> list[dict]:
    rows = []
    for name, runs in curves.items():
        previous = None
        for beam in sorted(runs):
            metrics = json.loads((runs[beam] / "metrics.json").read_text())
            row = {"ranking": name, "beam": beam}
            row.update({column: metrics.get(key) for column, key in COLUMNS.items()})
            outcomes = read_outcomes(runs[beam] / SEARCH_CSV)
            shares = {"higher_score_share": None, "higher_score_worse_bleu_share": None}
            if previous is not None:
                shares = larger_beam_regressions(previous, outcomes)
            row["higher score than the smaller beam"] = shares["higher_score_share"]
            row["... with lower sentence BLEU"] = shares["higher_score_worse_bleu_share"]
            rows.append(row)
            previous = outcomes
    return rows


def plot(rows: list[dict], path: Path) -> None:
    fig = Figure(figsize=(11.0, 4.0))
    panels = fig.subplots(1, 2)
    for ax, column in zip(panels, ("BLEU", "length ratio"), strict=True):
        for name in dict.fromkeys(r["ranking"] for r in rows):
            points = [(r["beam"], r[column]) for r in rows if r["ranking"] == name]
            ax.plot(*zip(*points, strict=True), marker="o", label=name)
        ax.set_xscale("log")
        ax.set_xlabel("Beam size")
        ax.set_ylabel(column)
        ax.grid(alpha=0.3, which="both")
    panels[1].axhline(1.0, color="grey", linewidth=0.8)
    panels[0].legend(fontsize="small")
    write_with(path, lambda f: fig.savefig(f, format="png", dpi=150, bbox_inches="tight"))


def formatted(rows: list[dict]) -> list[dict]:
    """BLEU to 2 decimals, the length ratio to 3, shares of sentences in per cent to 1 (one
    sentence in a few thousand still shows)."""

    def cell(column, value):
        if value is None:
            return "-"
        if column == "BLEU":
            return f"{value:.2f}"
        if column == "length ratio":
            return f"{value:.3f}"
        return f"{100 * value:.1f}%" if isinstance(value, float) else str(value)

    return [{k: cell(k, v) for k, v in row.items()} for row in rows]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path, help="sweep or run directories")
    parser.add_argument("--out", type=Path, default=None, help="default: the first path")
    args = parser.parse_args(argv)
    out = args.out or args.paths[0]
    rows = table(read_runs(args.paths))
    out.mkdir(parents=True, exist_ok=True)
    with (out / "beam_curse.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    text = markdown_table(formatted(rows))
    write_text(out / "beam_curse.md", text)
    plot(rows, out / "beam_curse.png")
    print(text, end="")


if __name__ == "__main__":
    main()
