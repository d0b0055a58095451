"""A Hydra multirun over every attention variant, then one report over the sweep."""

import json
import subprocess
import sys

from omegaconf import OmegaConf

from alignmt.config import CONF_DIR
from alignmt.report import report

VARIANTS = sorted(p.stem for p in (CONF_DIR / "model" / "attention").glob("*.yaml"))


def test_multirun_over_all_attention_variants(cache_dir, tmp_path):
    sweep = tmp_path / "sweep"
    command = [
        sys.executable,
        "-m",
        "alignmt.train",
        "-m",
        "model=luong",
        "model/attention=glob(*)",
        f"data.corpus.cache_dir={cache_dir}",
        "data.corpus.train_size=300",
        "data.corpus.valid_per_bucket=1",
        "data.corpus.test_per_bucket=2",
        "data.batch_size=16",
        "model.embedding_dim=8",
        "model.hidden_size=8",
        "trainer.max_steps=3",
        "trainer.val_check_interval=3",
        "trainer.enable_progress_bar=false",
        "trainer.enable_model_summary=false",
        "callbacks.result_files.heatmaps=1",
        f"hydra.sweep.dir={sweep}",
    ]
    subprocess.run(command, check=True, capture_output=True, text=True)
    runs = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert len(runs) == len(VARIANTS)
    seen = set()
    for run in runs:
        metrics = json.loads((run / "metrics.json").read_text())
        assert metrics["train_steps"] == 3 and "test/bleu" in metrics
        seen.add(OmegaConf.to_yaml(OmegaConf.load(run / "config.yaml").model.attention))
    assert len(seen) == len(VARIANTS)  # one run directory per variant
    label = ["model._target_", "model.attention._target_"]  # curves named by two keys
    keys = ["model.attention._target_", "model.attention.estimator"]  # hard: two estimators
    table = report([sweep], tmp_path / "report", keys, ["test/bleu"], label)
    assert len(table) == len(VARIANTS)
    header = (tmp_path / "report" / "runs.csv").read_text().splitlines()[0]
    assert "model._target_" in header.split(",")
    assert (tmp_path / "report" / "report.md").is_file()
    assert (tmp_path / "report" / "bleu_by_length.png").is_file()
