"""What a kill at any moment costs: last.ckpt is written every N steps (and after the last),
every checkpoint goes through `AtomicCheckpointIO`, and every file of a run directory is
written to a temporary file and renamed over its name, never left half written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from alignmt.atomic import AtomicCheckpointIO
from alignmt.train import train
from tests.conftest import tiny_train_config


def record_writes(monkeypatch) -> dict:
    """Every checkpoint AtomicCheckpointIO saves, every torch.save (and whether it ran inside
    one), and every file renamed into place, from now on."""
    record = {"checkpoints": [], "torch.save": [], "renamed": set()}
    inside = [0]
    save_checkpoint = AtomicCheckpointIO.save_checkpoint
    torch_save = torch.save
    replace = os.replace

    def atomic_save(self, checkpoint, path, storage_options=None):
        record["checkpoints"].append((Path(path).name, checkpoint["global_step"]))
        inside[0] += 1
        try:
            return save_checkpoint(self, checkpoint, path, storage_options)
        finally:
            inside[0] -= 1

    def any_save(obj, f, *args, **kwargs):
        record["torch.save"].append(inside[0] > 0)
        return torch_save(obj, f, *args, **kwargs)

    def renaming(source, destination, *args, **kwargs):
        record["renamed"].add(Path(destination).resolve())
        return replace(source, destination, *args, **kwargs)

    monkeypatch.setattr(AtomicCheckpointIO, "save_checkpoint", atomic_save)
    monkeypatch.setattr(torch, "save", any_save)
    monkeypatch.setattr(os, "replace", renaming)
    return record


STEPS = [
    "trainer.max_steps=10",
    "trainer.val_check_interval=4",  # validations at steps 4 and 8
    "callbacks.last_checkpoint.every_n_train_steps=2",
]


@pytest.fixture(scope="module")
def recorded(cache_dir, tmp_path_factory) -> tuple[Path, dict]:
    """A whole run (training, validations, test, result files) and what it wrote."""
    run_dir = tmp_path_factory.mktemp("recorded") / "run"
    with pytest.MonkeyPatch.context() as monkeypatch:
        writes = record_writes(monkeypatch)
        train(tiny_train_config(cache_dir, run_dir, *STEPS))
    return run_dir, writes


def test_last_checkpoint_every_n_steps_after_validations_and_at_the_end(recorded):
    run_dir, writes = recorded
    saved = writes["checkpoints"]
    assert [step for name, step in saved if name == "last.ckpt"] == [2, 4, 6, 8, 10]
    # a step that a validation follows is saved once the validation (and its best) is done
    assert saved.index(("best-step000004.ckpt", 4)) < saved.index(("last.ckpt", 4))
    assert writes["torch.save"] and all(writes["torch.save"])  # none outside AtomicCheckpointIO
    checkpoints = {p.resolve() for p in (run_dir / "checkpoints").iterdir()}
    assert checkpoints <= writes["renamed"]


def test_a_run_stopped_by_an_error_writes_its_interrupted_checkpoint_atomically(
    compose_train, tmp_path, monkeypatch
):
    writes = record_writes(monkeypatch)
    fail = ["+callbacks.fail._target_=tests.integration.probes.Fail", "+callbacks.fail.step=6"]
    with pytest.raises(RuntimeError, match="step 6 fails"):
        train(compose_train(*STEPS, *fail, run_dir=tmp_path / "run"))
    assert writes["checkpoints"][-1] == ("interrupted.ckpt", 5)
    assert all(writes["torch.save"])
    assert (tmp_path / "run" / "checkpoints" / "interrupted.ckpt").resolve() in writes["renamed"]


# Written by others directly: Lightning's CSV logger (appends rows as it goes) and the two
# tables that alignmt.evaluation writes with open().
NOT_RENAMED = {"logs/metrics.csv", "logs/hparams.yaml", "bleu_by_length.csv", "exposure.csv"}


def test_every_file_of_a_run_directory_is_renamed_into_place(recorded):
    run_dir, writes = recorded
    files = {p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*") if p.is_file()}
    assert {"metrics.json", "hypotheses.txt", "config.yaml", "bleu_by_length.png"} <= files
    assert any(name.startswith("attention/") for name in files)
    renamed = {name for name in files if (run_dir / name).resolve() in writes["renamed"]}
    assert files - renamed == NOT_RENAMED & files
