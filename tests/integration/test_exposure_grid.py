"""The counting-language exposure study end to end at a tiny size: two cells of the grid train,
and the table reads the four columns of each, averaged and at the probe's positions."""

import csv
import json

import pytest

from alignmt.studies import exposure_grid
from alignmt.train import train
from tests.conftest import compose_config

TINY = [
    "data.corpus.train_size=128",
    "data.corpus.valid_size=10",
    "data.corpus.test_size=10",
    "trainer.max_steps=3",
    "trainer.val_check_interval=3",
    "callbacks.result_files.heatmaps=0",
    "trainer.enable_model_summary=false",
]


def test_two_cells_make_the_table(cache_dir, tmp_path):
    grid = tmp_path / "grid"
    for i, schedule in enumerate(["teacher_forcing", "linear"]):
        cfg = compose_config(
            "train",
            [
                "experiment=exposure_bias/rnnencdec",
                f"sampling={schedule}",
                *TINY,
                f"data.cache_dir={cache_dir}",
                f"run_dir={grid / str(i)}",
            ],
        )
        train(cfg)
    exposure_grid.main([str(grid), "--prefix-dependence"])

    with (grid / "exposure_grid.csv").open() as f:
        rows = {r["sampling"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"TeacherForcing", "LinearDecay"}
    run = grid / "0"
    metrics = json.loads((run / "metrics.json").read_text())
    with (run / "exposure.csv").open() as f:
        curve = list(csv.DictReader(f))
    row = rows["TeacherForcing"]
    assert row["model"] == "RNNEncDec"
    assert float(row["own prefix"]) == pytest.approx(metrics["test/exposure/own_prefix_accuracy"])
    for t in exposure_grid.POSITIONS:
        assert float(row[f"intact share @{t}"]) == pytest.approx(
            float(curve[t - 1]["intact_share"])
        )
    assert 0.0 <= float(row["prefix_tv"]) <= 1.0 and 0.0 <= float(row["source_tv"]) <= 1.0
    text = (grid / "exposure_grid.md").read_text()
    assert "| model | sampling | runs | bleu | reference prefix |" in text
    assert text.count("| RNNEncDec | LinearDecay | 1 |") == 1 + len(exposure_grid.POSITIONS)
    assert (grid / "exposure_grid.png").stat().st_size > 0
