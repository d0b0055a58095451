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
            "--memory-pairs=800",
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
    assert len(re.findall(r"peak: [\d.]+ GiB at 400, [\d.]+ GiB at 800 .*: -?[\d.]+ GiB", out)) == 2
    # the replica is the hub's layout: Parquet shards of a Translation feature and a card
    assert (tmp_path / "wmt14" / "fr-en" / "train-00000-of-00001.parquet").is_file()
    assert "dataset_info" in (tmp_path / "wmt14" / "README.md").read_text()


def test_the_memory_extrapolation_is_the_line_through_two_sizes(capsys):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import data_pipeline

    gib = 2**20  # KiB
    small = {"peak_kib": 3 * gib, "baseline_kib": gib, "anon_peak_kib": gib, "file_peak_kib": gib}
    large = {**small, "peak_kib": 3.5 * gib, "anon_peak_kib": 1.5 * gib}
    data_pipeline.extrapolate_memory((1_000_000, small), (2_000_000, large))
    out = capsys.readouterr().out
    # 0.5 GiB per million pairs from 2M to 40,836,715: 1.5 + 0.5 * 38.836715 = 20.92
    assert "beyond the imports: 2.00 GiB at 1,000,000, 2.50 GiB at 2,000,000" in out
    assert "(0.500 GiB per million pairs): 21.92 GiB" in out  # 2.5 + 0.5 * 38.84
    assert "anonymous peak: 1.00 GiB at 1,000,000, 1.50 GiB at 2,000,000" in out
    assert "(0.500 GiB per million pairs): 20.92 GiB" in out
    assert "file-backed peak: 1.00 GiB at 1,000,000, 1.00 GiB at 2,000,000" in out
    assert "(0.000 GiB per million pairs): 1.00 GiB" in out
