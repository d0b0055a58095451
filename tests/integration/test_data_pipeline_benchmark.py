"""The data pipeline benchmark runs end to end at a tiny N and prints every figure it promises."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_data_pipeline_benchmark_prints_its_figures(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "data_pipeline.py"),
            "--pairs=400",
            "--procs=1",
            "--vocab=500",
            "--sp-vocab=300",
            "--epoch-pairs=20000",
            "--batches=0",
            f"--workdir={tmp_path}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    for tokenizer in ("word", "subword"):
        rate = re.search(rf"{tokenizer}, 1 process\(es\): .* = ([\d,]+) pairs/s", out)
        assert rate and int(rate[1].replace(",", "")) > 0, out
    for figure in (
        r"40.8M pairs: [\d.]+ h here, [\d.]+ h on 16 cores",
        r"cache on disk: [\d,]+ MiB",
        r"first training batch after [\d.]+ s; over [\d,]+ training batches peak RSS [\d.]+ GiB",
        r"at most [\d.]+ GiB anonymous and [\d.]+ GiB memory-mapped file pages",
        r"one epoch of token-budget batches for 20,000 pairs: [\d,]+ batches in [\d.]+ s",
    ):
        assert len(re.findall(figure, out)) >= 1, (figure, out)
    # the replica is the hub's layout: Parquet shards of a Translation feature and a card
    assert (tmp_path / "wmt14" / "fr-en" / "train-00000-of-00001.parquet").is_file()
    assert "dataset_info" in (tmp_path / "wmt14" / "README.md").read_text()
