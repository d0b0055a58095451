"""Crash safety: a run stopped, or killed with SIGKILL at any moment (also while it writes its
checkpoint), and then run again ends bitwise where an uninterrupted run ends: the same
parameters, optimiser state, random states, data order and best checkpoint.

Dropout and scheduled sampling (coins and samples from the model's softmax) draw random
numbers at every step, so a resumed run that drew one number more or less would part ways.
Every run computes on one thread: equal bits need equal reduction orders.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from alignmt.checkpoint import load_checkpoint_file
from alignmt.data import ToyCorpus
from alignmt.data.hub import HUB_SPLITS
from alignmt.data.replica import write_hub_replica
from alignmt.train import train
from tests.conftest import TINY_DATA, TINY_MODEL, TINY_TRAINER, tiny_train_config
from tests.integration.probes import logged_runs, trained_batches

ROOT = Path(__file__).resolve().parents[2]
PROBES = "tests.integration.probes"
STEPS = 10
CRASH = [
    "model.dropout=0.3",
    "sampling=linear",
    "sampling.c=0.05",  # eps falls from 1 to 0.5 over the ten steps
    "sampling.mode=sample",
    f"trainer.max_steps={STEPS}",
    "trainer.val_check_interval=4",  # validations at steps 4 and 8
    "callbacks.last_checkpoint.every_n_train_steps=2",
    "callbacks.result_files.heatmaps=0",
    "trainer.enable_model_summary=true",  # it must not draw from the generators either
]
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def batch_log(folder: Path) -> list[str]:
    return [f"+callbacks.batches._target_={PROBES}.BatchLog", f"+callbacks.batches.folder={folder}"]


def probe(name: str, cls: str, **arguments) -> list[str]:
    return [f"+callbacks.{name}._target_={PROBES}.{cls}"] + [
        f"+callbacks.{name}.{key}={value}" for key, value in arguments.items()
    ]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ------------------------------------------------------------------ comparing runs
def same(a, b) -> bool:
    """Equal values, tensors bit for bit, nested in dicts, lists and tuples."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def best_of(checkpoint: dict) -> tuple[str, torch.Tensor]:
    """The best checkpoint's file name and score, as the best-checkpoint callback kept them."""
    (state,) = (s for key, s in checkpoint["callbacks"].items() if "'val/bleu'" in key)
    return Path(state["best_model_path"]).name, state["best_model_score"]


def assert_same_final_state(run_dir: Path, reference: Path) -> None:
    """The final last.ckpt of `run_dir` holds what the uninterrupted run's does."""
    ours = load_checkpoint_file(run_dir / "checkpoints" / "last.ckpt")
    theirs = load_checkpoint_file(reference / "checkpoints" / "last.ckpt")
    assert ours["global_step"] == theirs["global_step"] == STEPS
    assert ours["state_dict"].keys() == theirs["state_dict"].keys()
    for name, tensor in ours["state_dict"].items():
        assert torch.equal(tensor, theirs["state_dict"][name]), name
    assert same(ours["optimizer_states"], theirs["optimizer_states"])
    assert same(ours["random_state"], theirs["random_state"])
    assert same(ours["loops"], theirs["loops"])  # progress counters, the data loader's place
    assert same(best_of(ours), best_of(theirs))


def assert_same_batches(log: Path, reference: Path, resumed_at: int, rank: int = 0) -> None:
    """Every step trained on the uninterrupted run's batch; the run was killed or stopped
    after `resumed_at` and its second process went on from there."""
    assert trained_batches(log, rank) == trained_batches(reference, rank)
    assert [r["step"] for r in logged_runs(log, rank)[-1]] == list(range(resumed_at + 1, STEPS + 1))


# --------------------------------------------------------------- subprocess runs
def train_command(cache_dir, run_dir: Path, *overrides: str, data=TINY_DATA) -> list[str]:
    return [
        sys.executable,
        "-m",
        "alignmt.train",
        *data,
        *TINY_MODEL,
        *TINY_TRAINER,
        *CRASH,
        f"data.corpus.cache_dir={cache_dir}",
        f"hydra.run.dir={run_dir}",
        *overrides,
    ]


def environment() -> dict:
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, **ONE_THREAD, "PYTHONPATH": path}


def run_to_end(command: list[str], log: Path) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as output:
        done = subprocess.run(command, cwd=ROOT, env=environment(), stdout=output, stderr=output)
    assert done.returncode == 0, log.read_text()[-3000:]


def kill_when(command: list[str], marker: Path, log: Path, timeout: float = 240) -> None:
    """Starts `command` in a process group of its own and SIGKILLs the whole group (every
    DDP rank) once `marker` exists."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as output:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=environment(),
            stdout=output,
            stderr=output,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    while not marker.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            os.killpg(process.pid, signal.SIGKILL)
            pytest.fail(f"the run ended before {marker.name} appeared:\n{log.read_text()[-3000:]}")
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL


def checkpoint_step(path: Path) -> int:
    return load_checkpoint_file(path)["global_step"]


# ------------------------------------------------------------------------ tests
@pytest.fixture(scope="module")
def straight(cache_dir, tmp_path_factory):
    """The uninterrupted run (in this process) and its batch log."""
    folder = tmp_path_factory.mktemp("straight")
    run_dir, log = folder / "run", folder / "batches"
    train(tiny_train_config(cache_dir, run_dir, *CRASH, *batch_log(log)))
    return run_dir, log


@pytest.mark.parametrize("stop", [3, 4], ids=["mid-interval", "after a validation"])
def test_a_run_stopped_and_run_again_with_more_steps_ends_as_an_uninterrupted_one(
    compose_train, tmp_path, straight, stop
):
    run_dir, log = tmp_path / "run", tmp_path / "batches"
    train(compose_train(*CRASH, *batch_log(log), f"trainer.max_steps={stop}", run_dir=run_dir))
    assert checkpoint_step(run_dir / "checkpoints" / "last.ckpt") == stop
    train(compose_train(*CRASH, *batch_log(log), run_dir=run_dir))  # the run directory's own
    assert_same_final_state(run_dir, straight[0])
    assert_same_batches(log, straight[1], resumed_at=stop)


def test_a_run_killed_mid_epoch_and_run_again_ends_as_an_uninterrupted_one(
    cache_dir, tmp_path, straight
):
    """SIGKILL as step 7 starts: last.ckpt holds step 6; the rerun validates at step 8."""
    run_dir, log, marker = tmp_path / "run", tmp_path / "batches", tmp_path / "held"
    command = train_command(
        cache_dir, run_dir, *batch_log(log), *probe("hold", "Hold", step=7, marker=marker)
    )
    kill_when(command, marker, tmp_path / "output.txt")
    assert checkpoint_step(run_dir / "checkpoints" / "last.ckpt") == 6
    assert not (run_dir / "metrics.json").exists()
    run_to_end(command, tmp_path / "output.txt")  # the same command: it resumes its directory
    assert_same_final_state(run_dir, straight[0])
    assert_same_batches(log, straight[1], resumed_at=6)


def test_a_run_killed_while_writing_its_checkpoint_keeps_the_old_one_and_ends_the_same(
    cache_dir, tmp_path, straight
):
    """SIGKILL between writing last.ckpt of step 6 and renaming it over that of step 4."""
    run_dir, log, marker = tmp_path / "run", tmp_path / "batches", tmp_path / "writing"
    pause = probe("pause", "PauseInCheckpointWrite", step=6, marker=marker)
    command = train_command(cache_dir, run_dir, *batch_log(log), *pause)
    kill_when(command, marker, tmp_path / "output.txt")
    checkpoints = run_dir / "checkpoints"
    (partial,) = checkpoints.glob(".last.ckpt.*.partial")
    assert partial.stat().st_size > 0
    assert checkpoint_step(checkpoints / "last.ckpt") == 4  # the old one, whole
    run_to_end(command, tmp_path / "output.txt")
    assert not list(checkpoints.glob(".*.partial"))
    assert_same_final_state(run_dir, straight[0])
    assert_same_batches(log, straight[1], resumed_at=4)


def straight_subprocess(cache_dir, folder: Path, *overrides: str, **data) -> tuple[Path, Path]:
    """An uninterrupted run in a subprocess (a DDP run re-executes its command)."""
    run_dir, log = folder / "run", folder / "batches"
    command = train_command(cache_dir, run_dir, *batch_log(log), *overrides, **data)
    run_to_end(command, folder / "out.txt")
    return run_dir, log


def kill_and_rerun(cache_dir, folder: Path, *overrides: str, **data) -> tuple[Path, Path]:
    """The run SIGKILLed (all its processes) as step 7 starts, then the same command again."""
    run_dir, log, marker = folder / "run", folder / "batches", folder / "held"
    hold = probe("hold", "Hold", step=7, marker=marker)
    command = train_command(cache_dir, run_dir, *batch_log(log), *hold, *overrides, **data)
    kill_when(command, marker, folder / "out.txt")
    assert checkpoint_step(run_dir / "checkpoints" / "last.ckpt") == 6
    run_to_end(command, folder / "out.txt")
    return run_dir, log


def test_two_ddp_processes_killed_mid_epoch_and_run_again_end_as_uninterrupted_ones(
    cache_dir, tmp_path
):
    ddp = ["trainer=ddp_cpu"]
    reference = straight_subprocess(cache_dir, tmp_path / "straight", *ddp)
    run_dir, log = kill_and_rerun(cache_dir, tmp_path / "killed", *ddp)
    assert_same_final_state(run_dir, reference[0])
    for rank in (0, 1):
        assert_same_batches(log, reference[1], resumed_at=6, rank=rank)
    assert trained_batches(log, 0) != trained_batches(log, 1)


@pytest.fixture(scope="module")
def hub_replica(cache_dir, tmp_path_factory) -> Path:
    """The tiny toy corpus in the hub's layout, its training split in two shards."""
    corpus = ToyCorpus(
        cache_dir=str(cache_dir), train_size=400, valid_per_bucket=2, test_per_bucket=3
    )
    splits = {}
    for split, hub_split in HUB_SPLITS.items():
        text = corpus.load(split)
        splits[hub_split] = {"xs": list(text.sources), "xt": list(text.targets)}
    return write_hub_replica(tmp_path_factory.mktemp("hub") / "toy", {"xs-xt": splits}, 2)


def streamed_data(hub_replica: Path, cache_dir) -> list[str]:
    return [
        "data=wmt14_fr_en",
        "data/tokenizer=whitespace",
        f"data.corpus.path={hub_replica}",
        "data.corpus.name=xs-xt",
        "data.corpus.source_lang=xs",
        "data.corpus.target_lang=xt",
        "data.corpus.streaming=true",
        f"data.corpus.cache_dir={cache_dir / 'hf'}",
        f"data.cache_dir={cache_dir}",
        "data.batch_size=16",
        "data.eval_batch_size=32",
        "data.max_length=100",
    ]


def test_a_streamed_run_killed_mid_epoch_and_run_again_ends_as_an_uninterrupted_one(
    cache_dir, tmp_path, hub_replica
):
    data = streamed_data(hub_replica, cache_dir)
    reference = tmp_path / "straight" / "run", tmp_path / "straight" / "batches"
    straight = [*data, *TINY_MODEL, *TINY_TRAINER, *CRASH, *batch_log(reference[1])]
    train(tiny_train_config(cache_dir, reference[0], *straight, tiny=False))
    run_dir, log = kill_and_rerun(cache_dir, tmp_path / "killed", data=data)
    assert_same_final_state(run_dir, reference[0])
    assert_same_batches(log, reference[1], resumed_at=6)
    assert "streamed training data" in (tmp_path / "killed" / "out.txt").read_text()
