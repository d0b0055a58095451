"""A checkpoint is read as tensors and plain values only, on every path that reads one:
resuming, testing the best checkpoint, alignmt-evaluate, alignmt-translate. A file whose
unpickling would run code is refused without running it; a truncated, corrupt or foreign
file is one error naming it."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from alignmt.checkpoint import CheckpointError
from alignmt.evaluate import evaluate
from alignmt.train import train
from alignmt.translate import translate_lines
from tests.conftest import compose_config


class RunsCode:
    """Unpickled, it would run a shell command that leaves `marker` behind."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


KINDS = {
    # kind: what the error says
    "runs code": "refused to load: unpickling it would call posix.system",
    "truncated": r"not a readable checkpoint \(truncated or corrupt: ",
    "random bytes": r"not a (readable )?checkpoint",
    "bit flipped": "a corrupt checkpoint: .* fails its CRC-32 check",
    "empty": "an empty file, not a checkpoint",
}


@pytest.fixture(scope="module")
def bad(trained_run, tmp_path_factory):
    """One file of each kind, made from the trained run's best checkpoint, and the marker a
    run of the planted code would create."""
    folder = tmp_path_factory.mktemp("bad")
    marker = folder / "code-ran"
    good = Path(trained_run[1]["best_checkpoint"])
    checkpoint = torch.load(good, weights_only=True)
    checkpoint["hyper_parameters"]["note"] = RunsCode(marker)  # an alignmt checkpoint, plus
    torch.save(checkpoint, folder / "runs code.ckpt")
    torch.load(folder / "runs code.ckpt", weights_only=False)  # unpickled unsafely, it runs:
    assert marker.exists()
    marker.unlink()
    data = good.read_bytes()
    (folder / "truncated.ckpt").write_bytes(data[: len(data) // 2])
    (folder / "random bytes.ckpt").write_bytes(random.Random(0).randbytes(4096))
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF  # inside the largest tensor's record
    (folder / "bit flipped.ckpt").write_bytes(bytes(flipped))
    (folder / "empty.ckpt").write_bytes(b"")
    return {kind: folder / f"{kind}.ckpt" for kind in KINDS}, marker


def resume(compose_train, path: Path, tmp_path: Path) -> None:
    train(compose_train(f"ckpt_path='{path}'", run_dir=tmp_path / "run"))


def through_the_best_checkpoint_test(compose_train, path: Path, tmp_path: Path) -> None:
    """Trains two steps, validates, and finds `path` in place of the best checkpoint."""
    train(
        compose_train(
            "trainer.max_steps=2",
            "trainer.val_check_interval=2",
            "+callbacks.swap._target_=tests.integration.probes.SwapBestCheckpoint",
            f"+callbacks.swap.source='{path}'",
            run_dir=tmp_path / "run",
        )
    )


def alignmt_evaluate(compose_train, path: Path, tmp_path: Path) -> None:
    evaluate(compose_config("evaluate", [f"ckpt='{path}'", f"run_dir={tmp_path / 'eval'}"]))


def alignmt_translate(compose_train, path: Path, tmp_path: Path) -> None:
    translate_lines(compose_config("translate", [f"ckpt='{path}'"]), ["a cat sleeps"])


def same_file(path: Path, tmp_path: Path) -> Path:
    return path


READERS = {
    # reader: (what reads `path`, the file its error must name)
    "resume": (resume, same_file),
    "best checkpoint": (
        through_the_best_checkpoint_test,
        lambda path, tmp_path: tmp_path / "run" / "checkpoints" / "best-step000002.ckpt",
    ),
    "evaluate": (alignmt_evaluate, same_file),
    "translate": (alignmt_translate, same_file),
}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("reader", list(READERS))
def test_a_bad_checkpoint_is_one_clear_error_naming_it(compose_train, tmp_path, bad, reader, kind):
    files, marker = bad
    path = tmp_path / f"{kind}.ckpt"
    shutil.copyfile(files[kind], path)
    read, named = READERS[reader]
    with pytest.raises(CheckpointError) as error:
        read(compose_train, path, tmp_path)
    message = str(error.value)
    assert message.startswith(f"{named(path, tmp_path)}: "), message
    assert re.search(KINDS[kind], message), message
    shown = error.value.__cause__ or (
        None if error.value.__suppress_context__ else error.value.__context__
    )
    assert shown is None  # no pickle or zip error printed above ours
    assert not marker.exists()


@pytest.mark.parametrize("reader", ["resume", "evaluate", "translate"])
def test_a_missing_checkpoint_is_named(compose_train, tmp_path, reader):
    path = tmp_path / "nowhere.ckpt"
    read, _ = READERS[reader]
    with pytest.raises(FileNotFoundError, match=f"checkpoint not found: {re.escape(str(path))}"):
        read(compose_train, path, tmp_path)


def test_the_command_line_refuses_a_checkpoint_that_runs_code_without_running_it(bad, tmp_path):
    """In a process of its own, where unpickling would run the planted command for real."""
    files, marker = bad
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "alignmt.evaluate",
            f"ckpt='{files['runs code']}'",
            f"hydra.run.dir={tmp_path / 'eval'}",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    error = next(line for line in lines if line.startswith("alignmt.checkpoint.CheckpointError"))
    assert f"{files['runs code']}: refused to load" in error
    assert "UnpicklingError" not in done.stderr and "Weights only load failed" not in done.stderr
    assert not marker.exists()
