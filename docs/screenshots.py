"""The README's screenshots, taken in headless Chromium (Debian's `chromium`; Playwright from
the `dev` extra drives it and downloads no browser):

- `docs/report_runs.png`, `docs/report_explorer.png`: `alignmt-report` over RUN_DIRS, the
  runs table with BLEU by length, and the attention explorer on one test sentence;
- `docs/tensorboard.png`: a real `tensorboard` server on localhost over the same runs (they
  need `logger=[csv,tensorboard]`), its time-series page with the test figures.

Made once from two small runs (a few minutes each on a CPU):

    alignmt-train -m model=rnnsearch,rnnencdec data.corpus.train_size=20000 \\
        data.corpus.max_length=40 data.corpus.test_per_bucket=8 data.corpus.valid_per_bucket=4 \\
        data.batch_size=32 model.embedding_dim=48 model.encoder_hidden_size=48 \\
        model.decoder_hidden_size=64 model.maxout_size=48 trainer.max_steps=600 \\
        trainer.val_check_interval=200 trainer.log_every_n_steps=10 "logger=[csv,tensorboard]" \\
        hydra.sweep.dir=multirun/screenshots
    python docs/screenshots.py multirun/screenshots
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import sync_playwright

from alignmt.report import report

DOCS = Path(__file__).resolve().parent
CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@contextmanager
def browser_page(width: int = 1400, height: int = 1000):
    with sync_playwright() as playwright, tempfile.TemporaryDirectory() as profile:
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=FLAGS,
            viewport={"width": width, "height": height},
        )
        try:
            yield context.new_page()
        finally:
            context.close()


def report_screenshots(runs: list[Path], sentence: int) -> None:
    out = Path(tempfile.mkdtemp(prefix="alignmt-report-"))
    report(runs, out)
    with browser_page() as page:
        page.goto((out / "report.html").as_uri())
        page.wait_for_selector("body[data-explorer=ready]", timeout=60_000)
        page.locator("#runs").screenshot(path=DOCS / "report_runs.png")
        page.locator("#section-bleu_by_length").screenshot(path=DOCS / "report_bleu_by_length.png")
        page.select_option("#view", "forced")
        page.check("#gold")
        page.locator(f"#sentence-list .item[data-index='{sentence}']").click()
        page.wait_for_timeout(500)
        page.locator("#explorer").screenshot(path=DOCS / "report_explorer.png")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def tensorboard(logdir: Path):
    """A tensorboard server on 127.0.0.1 over `logdir`, stopped on leaving."""
    port = free_port()
    command = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir)]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):  # up to a minute for it to load the event files
            try:
                urllib.request.urlopen(f"{url}/data/runs", timeout=1).read()
                break
            except OSError:
                time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


def tensorboard_screenshot(logdir: Path, tags: str) -> None:
    """The time-series page, image cards only, filtered to `tags` (a regex)."""
    with tensorboard(logdir) as url, browser_page(1400, 1100) as page:
        page.goto(f"{url}/?darkMode=false#timeseries")
        search = page.locator("input[placeholder='Filter tags (regex)']")
        search.wait_for(timeout=60_000)
        search.fill(tags)
        page.locator("button", has_text="Image").first.click()
        close = page.locator("button:visible", has_text="Close")
        if close.count():  # the settings pane
            close.first.click()
        page.wait_for_selector("img", timeout=60_000)
        page.wait_for_timeout(3_000)
        page.screenshot(path=DOCS / "tensorboard.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run or sweep directories")
    parser.add_argument("--sentence", type=int, default=20, help="the explorer's test sentence")
    parser.add_argument("--tags", default="^test/", help="TensorBoard's tag filter (regex)")
    args = parser.parse_args()
    report_screenshots(args.runs, args.sentence)
    tensorboard_screenshot(args.runs[0], args.tags)


if __name__ == "__main__":
    main()
