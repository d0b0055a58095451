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


def test_gpu_benchmark_prints_its_figures_at_toy_size(tmp_path):
    """benchmarks/gpu.py through the training path on a CPU: every line it prints on a GPU."""
    out = run_script(
        "gpu.py", "--tiny", "--out", str(tmp_path), "--models", "rnnsearch", "rnnencdec",
        "--variants", "eager", "fast", "--device", "cpu",
    )  # fmt: skip
    for model in ("rnnsearch", "rnnencdec"):
        for variant, batching in (
            ("eager", "batch 80"),
            ("fast", "batch 80"),
            ("fast", "tokens 512"),
        ):
            pattern = rf"train  {model}\s+{variant}\s+{batching}\s+(\d+) target tokens/s"
            assert figure(pattern, out) > 0
        assert re.search(rf"check  {model}\s+fast vs eager.*: ok", out), out
        assert figure(rf"speedup {model}\s+fast / eager at batch 80: ([\d.]+)x", out) > 0
        assert figure(rf"best   {model}\s+.* in ([\d.]+) h", out) > 0
    for search in ("greedy", "beam 12"):
        assert figure(rf"decode rnnsearch\s+{search}\s+40 sentences in [\d.]+ s: ([\d.]+)", out) > 0


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
