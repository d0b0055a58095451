"""report.html of a greedy run and its beam-search evaluation, opened in headless Chromium:
the table, the charts and the attention explorer render, with no console error."""

import shutil
import tempfile
from pathlib import Path

import pytest

from alignmt.evaluate import evaluate
from alignmt.report import report
from alignmt.report.sentences import SENTENCES_FILE, read_sentences
from tests.conftest import compose_config

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def runs(trained_run, tmp_path_factory):
    """The shared tiny greedy run and a beam-search evaluation of its best checkpoint."""
    cfg, metrics = trained_run
    beam = tmp_path_factory.mktemp("beam") / "run"
    overrides = ["decoding=beam", "decoding.beam_size=3", "decoding.min_length=1", "heatmaps=0"]
    evaluate(
        compose_config(
            "evaluate", [f"ckpt={metrics['best_checkpoint']}", f"run_dir={beam}", *overrides]
        )
    )
    return cfg.run_dir, beam


@pytest.fixture(scope="module")
def page_file(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    table = report(list(map(str, runs)), out)
    assert len(table) == 2  # greedy and beam: two rows
    return out / "report.html"


def test_the_sentences_file_holds_every_test_sentence_with_its_attention(runs):
    run_dir = Path(runs[0])
    records = read_sentences(run_dir / SENTENCES_FILE)
    hypotheses = (run_dir / "hypotheses.txt").read_text().splitlines()
    assert [r["hypothesis"] for r in records] == hypotheses
    assert [r["index"] for r in records] == list(range(len(hypotheses)))
    for r in records:
        rows, columns = len(r["target_tokens"]), len(r["source_tokens"])
        assert [len(row) for row in r["attention"]] == [columns] * rows
        assert all(abs(sum(row) - 1) < 0.01 for row in r["attention"])  # a distribution each
        assert len(r["forced_attention"]) == len(r["reference_tokens"])
        # the toy corpus has word-level gold, one link per target word at least
        assert {cell[0] for cell in r["gold_cells"]} == set(range(len(r["reference_tokens"])))


def test_the_page_needs_no_network(page_file):
    """Everything is inline: plotly.js once, then the page's own parts, which name no
    address (the browser test also sees no request leave the file)."""
    from plotly.offline import get_plotlyjs

    text = page_file.read_text()
    assert text.count(get_plotlyjs()) == 1
    own = text.replace(get_plotlyjs(), "")
    for reference in ("http:", "https:", "<link", "@import", "src="):
        assert reference not in own
    assert own.count("<script") == 4  # plotly.js, the figures, the explorer's data, ours


def browser_page(playwright, profile):
    context = playwright.chromium.launch_persistent_context(
        profile,
        executable_path=CHROMIUM,
        headless=True,
        args=CHROMIUM_FLAGS,
        viewport={"width": 1400, "height": 1000},
    )
    return context, context.new_page()


@pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium: apt-get install chromium chromium-driver"
)
def test_the_page_renders_in_chromium(page_file, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    errors = []
    with sync_api.sync_playwright() as playwright, tempfile.TemporaryDirectory() as profile:
        context, page = browser_page(playwright, profile)
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on(
            "request",
            lambda r: r.url.startswith(("file:", "data:", "blob:")) or errors.append(r.url),
        )
        page.goto(page_file.as_uri())
        page.wait_for_selector("body[data-explorer=ready]", timeout=30_000)
        check_tables_and_charts(page)
        check_explorer(page)
        page.screenshot(path=tmp_path / "report.png", full_page=True)
        context.close()
    assert errors == []
    assert (tmp_path / "report.png").stat().st_size > 50_000


def check_tables_and_charts(page):
    assert page.locator("#runs-table tbody tr").count() == 2
    assert page.locator("#every-run-table tbody tr").count() == 2
    traces = page.evaluate("document.getElementById('bleu_by_length').data.length")
    assert traces == 2  # one BLEU-by-length curve per row
    assert page.locator("#bleu_by_length .main-svg").count() >= 1
    assert page.locator("[id='curves:val/bleu'] .main-svg").count() >= 1
    # a click on BLEU sorts the rows by it
    page.locator("#runs-table th", has_text="BLEU").first.click()
    bleus = page.eval_on_selector_all(
        "#runs-table tbody tr",
        "rows => rows.map(r => Number(r.cells[r.cells.length - 1].dataset.sort))",
    )
    assert len(bleus) == 2


def check_explorer(page):
    sentences = page.evaluate("explorer.data.testsets[explorer.data.runs[0].test].source.length")
    assert page.locator("#sentence-list .item").count() == sentences
    assert page.locator("#panels .panel").count() == 2  # greedy and beam side by side
    assert page.locator("#panels .heatmap .main-svg").count() >= 2
    # sort by sentence BLEU, lowest first
    page.select_option("#sort", "bleu-ascending")
    first = int(page.locator("#sentence-list .item").first.get_attribute("data-index"))
    lowest = page.evaluate("Math.min(...explorer.data.runs[0].bleu)")
    assert page.evaluate(f"explorer.data.runs[0].bleu[{first}]") == lowest
    # search narrows the list to sentences with the word
    word = page.evaluate(
        "explorer.data.testsets[explorer.data.runs[0].test].source[0].split(' ')[1]"
    )
    page.fill("#search", word)
    shown = page.locator("#sentence-list .item").count()
    assert 1 <= shown < sentences or sentences == 1
    page.fill("#search", "")
    hover_a_cell(page)
    # the teacher-forced view with gold links adds their markers
    page.select_option("#view", "forced")
    page.check("#gold")
    assert page.evaluate("document.querySelector('#panels .heatmap').data.length") == 2


def hover_a_cell(page):
    """The mouse over cell (row 0, column 1) of the first heatmap shows its words and weight."""
    heatmap = page.locator("#panels .heatmap").first
    heatmap.scroll_into_view_if_needed()
    position = heatmap.evaluate(
        """gd => { const x = gd._fullLayout.xaxis, y = gd._fullLayout.yaxis;
                  return {x: x._offset + x.l2p(1), y: y._offset + y.l2p(0)}; }"""
    )
    box = heatmap.bounding_box()
    page.mouse.move(box["x"] + position["x"], box["y"] + position["y"])
    tooltip = page.locator(".hoverlayer .hovertext").first
    tooltip.wait_for(timeout=5_000)
    run = page.evaluate("explorer.run('run-a')")
    i = page.evaluate("explorer.selected")
    target, source = run["target_tokens"][i][0], run["source_tokens"][i][1]
    weight = run["attention"][i][1] / page.evaluate("explorer.data.scale")
    text = tooltip.text_content()
    assert f"{target} ← {source}" in text and f"weight {weight:.2f}" in text
