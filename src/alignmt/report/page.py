"""`report.html`: one self-contained page (plotly.js, styles and data inlined; no network)
with the runs table, the charts and the attention explorer.

Plotly draws the charts and heatmaps: its Python package ships the minified plotly.js of
its pinned version, so the page inlines it once and needs nothing else; its heatmaps give
per-cell hover text and `Plotly.newPlot` swaps sentences in the explorer, so the page's own
script stays small.
"""

from __future__ import annotations

import html
import json
import math
from datetime import datetime, timezone
from importlib.resources import files
from string import Template

import pandas as pd

from alignmt.report.explorer import pack

ASSETS = files("alignmt.report") / "assets"
LABELS = {
    "test/bleu": "BLEU",
    "test/chrf": "chrF",
    "test/bleu_no_unk": "BLEU no UNK",
    "test/aer": "AER",
    "test/ppl": "ppl",
    "val/best_bleu": "best val BLEU",
    "test/exposure/teacher_forced_accuracy": "acc. ref. prefix",
    "test/exposure/own_prefix_accuracy": "acc. own prefix",
    "test/exposure/intact_accuracy": "acc. intact prefix",
    "test/exposure/intact_share": "intact share",
}
SECTIONS = {
    "bleu_by_length": "BLEU by source sentence length",
    "curves": "Training and validation",
    "beam_size": "Beam size",
    "exposure": "Exposure bias",
}


def label(metric: str) -> str:
    """`test/bleu_len_1_10` -> `BLEU 1-10`, `test/bleu_len_51_plus` -> `BLEU 51+`."""
    if metric in LABELS:
        return LABELS[metric]
    if metric.startswith("test/bleu_len_"):
        return "BLEU " + metric.removeprefix("test/bleu_len_").replace("_plus", "+").replace(
            "_", "-"
        )
    return metric


def plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def _number(value) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else repr(value)


def mean_std(row, metric: str) -> str:
    """`94.53 ± 0.12` over seeds, `94.53` for one run, `–` for none."""
    n = row.get(f"{metric} n", 1 if pd.notna(row.get(metric)) else 0)
    if not n or pd.isna(row.get(metric)):
        return "–"
    if n == 1:
        return f"{row[metric]:.2f}"
    return f"{row[metric]:.2f} ± {row[f'{metric} std']:.2f}"


def p_value_text(p) -> str:
    return "–" if p is None or pd.isna(p) else ("< 0.001" if p < 0.001 else f"{p:.3f}")


def summary_table(summary: pd.DataFrame, settings: list[str], metrics: list[str], colours) -> str:
    """The grouped runs table: settings, runs, seeds, metrics as mean ± std, p-value."""
    head = [f'<th class="setting">{html.escape(s)}</th>' for s in settings]
    head += ['<th class="setting">runs</th>', '<th class="setting">seeds</th>']
    head += [f'<th title="{html.escape(m)}">{html.escape(label(m))}</th>' for m in metrics]
    if "p" in summary:
        head.append(
            '<th title="paired bootstrap (Koehn 2004), largest over seed pairs">p (BLEU)</th>'
        )
    body = []
    for g, (_, row) in enumerate(summary.iterrows()):
        swatch = f'<span class="swatch" style="background:{colours(g)}"></span>'
        cells = [
            f'<td class="setting">{swatch if k == 0 else ""}{html.escape(str(row[s]))}</td>'
            for k, s in enumerate(settings)
        ]
        if not settings:
            cells.append(f'<td class="setting">{swatch}all</td>')
        cells.append(f'<td class="setting">{html.escape(row["runs"])}</td>')
        cells.append(f'<td class="setting">{html.escape(str(row["seeds"]))}</td>')
        cells += [f'<td data-sort="{_number(row[m])}">{mean_std(row, m)}</td>' for m in metrics]
        if "p" in summary:
            cells.append(f'<td data-sort="{_number(row["p"])}">{p_value_text(row["p"])}</td>')
        classes = " ".join(c for c in ("baseline" if row.get("baseline") else "",) if c)
        body.append(f'<tr class="{classes}">' + "".join(cells) + "</tr>")
    if not settings:
        head.insert(0, '<th class="setting">runs of</th>')
    return _table(head, body, "runs-table")


def runs_table(frame: pd.DataFrame, metrics: list[str]) -> str:
    """Every run, one row each (failed runs marked)."""
    columns = [c for c in frame.columns if c not in metrics and c != "p"]
    head = [f'<th class="setting">{html.escape(c)}</th>' for c in columns]
    head += [f'<th title="{html.escape(m)}">{html.escape(label(m))}</th>' for m in metrics]
    if "p" in frame:
        head.append("<th>p (BLEU)</th>")
    body = []
    for _, row in frame.iterrows():
        cells = [f'<td class="setting">{html.escape(str(row[c]))}</td>' for c in columns]
        cells += [
            f'<td data-sort="{_number(row[m])}">{"–" if pd.isna(row[m]) else f"{row[m]:.2f}"}</td>'
            for m in metrics
        ]
        if "p" in frame:
            cells.append(f'<td data-sort="{_number(row["p"])}">{p_value_text(row["p"])}</td>')
        failed = ' class="failed"' if row["status"] != "ok" else ""
        body.append(f"<tr{failed}>" + "".join(cells) + "</tr>")
    return _table(head, body, "every-run-table")


def _table(head: list[str], body: list[str], id_: str) -> str:
    return (
        f'<div class="table-wrap"><table class="sortable" id="{id_}"><thead><tr>'
        + "".join(head)
        + "</tr></thead><tbody>"
        + "\n".join(body)
        + "</tbody></table></div>"
    )


def figure_sections(figures: dict[str, dict]) -> str:
    """A section per kind of chart that has data, a div per chart (drawn by report.js)."""
    sections = []
    for section, title in SECTIONS.items():
        ids = [k for k in figures if k == section or k.startswith(section + ":")]
        if ids:
            divs = "".join(f'<div class="figure" id="{html.escape(i)}"></div>' for i in ids)
            sections.append(
                f'<section id="section-{section}"><h2>{title}</h2>'
                f'<div class="figures">{divs}</div></section>'
            )
    return "\n".join(sections)


def explorer_controls(data: dict | None) -> str:
    if data is None:
        return (
            '<p class="missing">No run here has test_sentences.jsonl.gz (written at test time).</p>'
        )
    gold = any(cells for run in data["runs"] for cells in run["gold_cells"] if cells)
    disabled = "" if gold else " disabled"
    template = Template((ASSETS / "explorer.html").read_text(encoding="utf-8"))
    return template.substitute(gold_disabled=disabled)


def _script_json(value) -> str:
    """JSON safe inside a <script> element."""
    return json.dumps(value, ensure_ascii=False).replace("</", "<\\/")


def page(
    title: str,
    meta: str,
    runs_html: tuple[str, str, str],
    figures: dict[str, dict],
    explorer: dict | None,
) -> str:
    """The whole page. `runs_html`: (note, grouped table, every-run table)."""
    note, grouped, every = runs_html
    sections = [
        "runs",
        *[s for s in SECTIONS if any(k.split(":")[0] == s for k in figures)],
        "explorer",
    ]
    nav = "".join(
        f'<a href="#{"section-" + s if s in SECTIONS else s}">{SECTIONS.get(s, s.capitalize())}</a>'
        for s in sections
    )
    data = ""
    if explorer is not None:
        data = f'<script type="text/plain" id="explorer-data">{pack(explorer)}</script>'
    template = Template((ASSETS / "report.html").read_text(encoding="utf-8"))
    return template.substitute(
        title=html.escape(title),
        meta=meta,
        css=(ASSETS / "report.css").read_text(encoding="utf-8"),
        plotly=plotly_js(),
        nav=nav,
        runs_note=note,
        runs_table=grouped,
        every_run_table=every,
        figure_sections=figure_sections(figures),
        explorer=explorer_controls(explorer),
        figures=_script_json(figures),
        explorer_data=data,
        script=(ASSETS / "report.js").read_text(encoding="utf-8"),
    )


def generated_note(runs: int, rows: int, paths) -> str:
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    where = ", ".join(html.escape(str(p)) for p in paths)
    plural = {"runs": "s" * (runs != 1), "rows": "s" * (rows != 1)}
    return (
        f"{runs} run{plural['runs']} in {rows} row{plural['rows']}, from {where}; "
        f"written {when} by alignmt-report."
    )
