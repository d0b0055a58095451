"""Test-only callbacks, added to a run's config (`+callbacks.NAME._target_=tests.integration.
probes.CLASS`): they record what a run trained on, stop it at a chosen moment to be killed
there, or measure it. Each works in a subprocess and on every DDP rank."""

from __future__ import annotations

import json
import os
import resource
import shutil
import time
import uuid
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint

from alignmt.atomic import AtomicCheckpointIO, write_with

WAIT_TO_BE_KILLED = 600  # seconds; the test kills the process long before


class BatchLog(pl.Callback):
    """One JSON line per training step in `folder/rank<R>.jsonl`: the step, the run (each
    `fit` a new one), the batch's indices into the split and its source ids (streamed batches'
    indices restart in every pool; their ids tell them apart)."""

    def __init__(self, folder: str):
        self.folder = Path(folder)
        self.run = uuid.uuid4().hex

    def on_train_batch_start(self, trainer, task, batch, batch_idx) -> None:
        record = {
            "step": trainer.global_step + 1,
            "run": self.run,
            "indices": batch.indices.tolist(),
            "src": batch.src.tolist(),
        }
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / f"rank{trainer.global_rank}.jsonl", "a") as log:
            log.write(json.dumps(record) + "\n")


def logged_runs(folder: Path, rank: int = 0) -> list[list[dict]]:
    """The records of `BatchLog`, one list per run, in order."""
    runs: dict[str, list[dict]] = {}
    for line in (folder / f"rank{rank}.jsonl").read_text().splitlines():
        record = json.loads(line)
        runs.setdefault(record["run"], []).append(record)
    return list(runs.values())


def trained_batches(folder: Path, rank: int = 0) -> list[tuple]:
    """(step, indices, source ids) of every step, as the last run to train it had it."""
    by_step = {r["step"]: r for run in logged_runs(folder, rank) for r in run}
    return [(s, by_step[s]["indices"], by_step[s]["src"]) for s in sorted(by_step)]


class Hold(pl.Callback):
    """As training is about to take step `step`, writes `marker` and waits to be killed; only
    the first time (while `marker` does not exist), so the same command then runs through."""

    def __init__(self, step: int, marker: str):
        self.step = step
        self.marker = Path(marker)
        self._armed = not self.marker.exists()

    def on_train_batch_start(self, trainer, task, batch, batch_idx) -> None:
        if self._armed and trainer.global_step + 1 == self.step:
            if trainer.is_global_zero:
                self.marker.write_text(str(os.getpid()))
            time.sleep(WAIT_TO_BE_KILLED)


class PausingCheckpointIO(AtomicCheckpointIO):
    """Writes last.ckpt of step `step` as `AtomicCheckpointIO` does, but waits to be killed
    between writing the temporary file and renaming it, after writing `marker`."""

    def __init__(self, step: int, marker: Path):
        super().__init__()
        self.step, self.marker = step, marker

    def save_checkpoint(self, checkpoint, path, storage_options=None) -> None:
        if Path(path).name != "last.ckpt" or checkpoint["global_step"] != self.step:
            return super().save_checkpoint(checkpoint, path, storage_options)

        def write_then_wait(file) -> None:
            torch.save(checkpoint, file)
            file.flush()
            self.marker.write_text(str(path))
            time.sleep(WAIT_TO_BE_KILLED)

        write_with(path, write_then_wait)


class PauseInCheckpointWrite(pl.Callback):
    """Installs `PausingCheckpointIO` for the write of last.ckpt at `step`, the first time only
    (while `marker` does not exist)."""

    def __init__(self, step: int, marker: str):
        self.step = step
        self.marker = Path(marker)

    def setup(self, trainer, task, stage: str) -> None:
        if stage == "fit" and not self.marker.exists():
            trainer.strategy.checkpoint_io = PausingCheckpointIO(self.step, self.marker)


class PeakMemory(pl.Callback):
    """After testing, this process's peak resident memory (ru_maxrss, KiB on Linux) in
    `folder/rank<R>.txt`."""

    def __init__(self, folder: str):
        self.folder = Path(folder)

    def on_test_end(self, trainer, task) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        (self.folder / f"rank{trainer.global_rank}.txt").write_text(str(peak))


class SwapBestCheckpoint(pl.Callback):
    """Once training is over, copies `source` over the best checkpoint, the file that testing
    reads next."""

    def __init__(self, source: str):
        self.source = source

    def on_train_end(self, trainer, task) -> None:
        for callback in trainer.checkpoint_callbacks:
            if isinstance(callback, ModelCheckpoint) and callback.best_model_path:
                shutil.copyfile(self.source, callback.best_model_path)


class Fail(pl.Callback):
    """Raises as training takes step `step`."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(self, trainer, task, batch, batch_idx) -> None:
        if trainer.global_step + 1 == self.step:
            raise RuntimeError(f"step {self.step} fails")
