"""Scheduled sampling and coverage inside real (tiny) training runs."""

import csv
from pathlib import Path

import pytest
import torch

from alignmt.train import train


def logged(run_dir: Path, column: str) -> list[float]:
    with (run_dir / "logs" / "metrics.csv").open() as f:
        return [float(row[column]) for row in csv.DictReader(f) if row.get(column)]


def final_weights(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]


def test_eps_one_trains_exactly_like_teacher_forcing(compose_train, tmp_path):
    common = ["trainer.max_steps=4", "trainer.val_check_interval=4"]
    train(compose_train(*common, run_dir=tmp_path / "tf"))
    train(compose_train(*common, "sampling=linear", "sampling.c=0", run_dir=tmp_path / "eps1"))
    a, b = final_weights(tmp_path / "tf"), final_weights(tmp_path / "eps1")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert logged(tmp_path / "eps1", "train/teacher_forcing_ratio") == [1.0, 1.0]


def test_scheduled_sampling_and_coverage_train_and_log(compose_train, tmp_path):
    run_dir = tmp_path / "run"
    metrics = train(
        compose_train(
            "trainer.max_steps=4",
            "trainer.val_check_interval=4",
            "sampling=linear",
            "sampling.c=0.1",
            "model/coverage=linguistic",
            "task.coverage_loss_weight=1.0",
            run_dir=run_dir,
        )
    )
    ratios = logged(run_dir, "train/teacher_forcing_ratio")
    assert ratios == pytest.approx([0.9, 0.7])  # steps 1 and 3 (logged every 2): 1 - 0.1 i
    # Soft attention of an untrained model returns to every source word: overlap is positive.
    assert all(value > 0 for value in logged(run_dir, "train/coverage_loss"))
    assert metrics["train_steps"] == 4 and "test/bleu" in metrics
