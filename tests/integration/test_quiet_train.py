"""What `alignmt-train` prints: none of the libraries' known noise, a progress bar, and at the
end the run's BLEU per length bucket with the paths of its report and run directory."""

import re
import subprocess
import sys

from tests.conftest import TINY_DATA, TINY_MODEL

NOISE = {
    "the LitLogger advertisement": "litlogger",
    "torch's LeafSpec deprecation inside Lightning": "LeafSpec",
    "a FLOPs column Lightning cannot fill": "FLOPs",
    "Lightning's note on a checkpoint saved without weights_only": "weights_only",
    "Lightning's note on our model summary": "already configured with model summary",
}


def test_a_training_run_prints_no_known_noise_and_ends_with_its_results(cache_dir, tmp_path):
    run_dir = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "alignmt.train",
        *TINY_DATA,
        *TINY_MODEL,
        "trainer.max_steps=4",
        "trainer.val_check_interval=4",
        "trainer.log_every_n_steps=2",
        "callbacks.result_files.heatmaps=1",
        f"data.corpus.cache_dir={cache_dir}",
        f"hydra.run.dir={run_dir}",
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    output = done.stdout + done.stderr
    for what, text in NOISE.items():
        assert text.lower() not in output.lower(), f"{what} is printed"
    assert "trainable parameters" in output  # the model summary is there, without FLOPs
    assert "Epoch 0" in done.stdout and "Testing" in done.stdout  # rich progress bars
    tail = done.stdout[done.stdout.index("test BLEU by source length") :].splitlines()
    buckets = [line.split("│")[1].strip() for line in tail if line.startswith("│")]
    assert buckets == ["1-10", "11-20", "21-30", "31-40", "41-50", "51+", "all"]
    report = re.search(r"^report: +(\S+)$", done.stdout, re.MULTILINE)
    assert report and report[1] == str(run_dir / "report.html")
    assert (run_dir / "report.html").stat().st_size > 100_000
    assert done.stdout.rstrip().splitlines()[-1].split() == ["run", "directory:", str(run_dir)]
