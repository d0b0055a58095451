"""The benchmark scripts run end to end on tiny settings and print their figures.

They are the only way speed is reported, so a broken script would go unnoticed until the day a
GPU (or a quiet machine) is available. No figure is asserted beyond being a positive number.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import TINY_DATA, TINY_MODEL

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def run_script(name: str, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / name), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def figure(pattern: str, text: str) -> float:
    match = re.search(pattern, text)
    assert match, f"{pattern!r} not in output:\n{text}"
    return float(match.group(1))


def test_gpu_smoke_runs_the_paper_size_model_on_any_device():
    out = run_script(
        "gpu_smoke.py",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--batch",
        "2",
        "--vocab",
        "60",
        "--no-bf16",
    )
    assert figure(r"RNNsearch ([\d.]+)M parameters", out) > 10  # paper sizes, tiny vocabulary
    assert figure(r"train\s+(\d+) target tokens/s", out) > 0


def test_throughput_prints_training_and_decoding_speed(cache_dir, tmp_path):
    overrides = [f"data.corpus.cache_dir={cache_dir}", *TINY_DATA, *TINY_MODEL]
    out = run_script(
        "throughput.py", *overrides, "--steps", "2", "--warmup", "1", "--decode-sentences", "8"
    )
    assert figure(r"train\s+(\d+) target tokens/s", out) > 0
    assert figure(r"decode\s+([\d.]+) sentences/s", out) > 0
    assert figure(r"peak memory (\d+) MiB", out) > 0


def test_decoding_benchmark_reads_a_trained_checkpoint(trained_run):
    _, metrics = trained_run
    out = run_script(
        "decoding.py",
        "--ckpt",
        metrics["best_checkpoint"],
        "--sentences",
        "8",
        "--batch-sizes",
        "1",
        "4",
        "--beam-size",
        "2",
    )
    for search in ("greedy", "beam 2"):
        for batch_size in (1, 4):
            assert figure(rf"(?m)^{search}\s+{batch_size}\s+([\d.]+)", out) > 0
