"""wandb (offline) and TensorBoard receive scalars, sample translations and heatmaps."""

import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from alignmt.train import train


def test_tensorboard_gets_scalars_samples_and_heatmaps(compose_train, tmp_path):
    run_dir = tmp_path / "run"
    train(
        compose_train(
            "logger=[csv,tensorboard]",
            "trainer.max_steps=4",
            "trainer.val_check_interval=2",
            run_dir=run_dir,
        )
    )
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"images": 0})
    events.Reload()
    tags = events.Tags()
    assert {"val/bleu", "val/loss", "train/loss"} <= set(tags["scalars"])
    assert "val/attention/0" in tags["images"]
    assert any("val/samples" in tag for tag in tags["tensors"])
    assert len(events.Images("val/attention/0")) == 2  # one per validation


def test_wandb_runs_offline_and_is_always_finished(compose_train, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run_dir = tmp_path / "run"
    train(
        compose_train(
            "logger=wandb",
            "logger.wandb.group=test",
            "trainer.max_steps=2",
            "trainer.val_check_interval=2",
            run_dir=run_dir,
        )
    )
    import wandb

    assert wandb.run is None  # finished, so a next run in this process starts its own
    runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert list(runs[0].glob("*.wandb"))
    assert "wandb" in sys.modules
