"""Several processes, by simulation on one machine: DDP ranks and SLURM nodes started together
on a cold cache prepare the data once; two SLURM "nodes" (gloo) train and gather the test
BLEU of one process; and the submitit launcher's job script for a sweep, written without
submitting it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import cloudpickle
import pytest

from alignmt.data import ToyCorpus
from alignmt.evaluate import evaluate
from tests.conftest import TINY_DATA, TINY_MODEL, compose_config

ROOT = Path(__file__).resolve().parents[2]

# Imported at start-up by every interpreter of a run (PYTHONPATH): counts the sentences each
# process tokenises for data preparation (slowly, so that processes started together overlap
# in it), and lets a sweep "submitted" to a fake sbatch end.
SITECUSTOMIZE = """
import os
import time

if os.environ.get("ALIGNMT_COUNT_TOKENIZED"):
    from alignmt.data import tokenizers

    def counting(tokenize_batch):
        def counted(self, texts):
            with open(os.environ["ALIGNMT_COUNT_TOKENIZED"], "a") as f:
                f.write(f"{os.getpid()} {len(texts)}\\n")
            time.sleep(0.5)
            return tokenize_batch(self, texts)
        return counted

    for name in ("WhitespaceTokenizer", "MosesTokenizer"):
        owner = getattr(tokenizers, name)
        owner.tokenize_batch = counting(owner.tokenize_batch)

if os.environ.get("ALIGNMT_FAKE_SLURM_RESULTS"):
    import submitit.core.core
    from hydra.core.utils import JobReturn, JobStatus

    def finished(self):
        return [JobReturn(status=JobStatus.COMPLETED, _return_value=0.0)]

    submitit.core.core.Job.results = finished
"""
FAKE_SBATCH = """#!/bin/sh
cp "$1" "$SBATCH_CAPTURE/$(basename "$1")"
echo "Submitted batch job 4242"
"""


@pytest.fixture
def hooks(tmp_path) -> Path:
    folder = tmp_path / "hooks"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(textwrap.dedent(SITECUSTOMIZE))
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(hooks: Path, **variables) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "LOCAL_RANK"))}
    env["PYTHONPATH"] = f"{hooks}:{ROOT / 'src'}:{ROOT}"
    return {**env, **{k: str(v) for k, v in variables.items()}}


def start_together(commands: list[tuple[list[str], dict]], timeout: int = 400) -> None:
    runs = [
        subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for cmd, env in commands
    ]
    outputs = [run.communicate(timeout=timeout)[0].decode() for run in runs]
    for run, output in zip(runs, outputs, strict=True):
        assert run.returncode == 0, output[-4000:]


def tokenized_by_process(counts: Path) -> Counter:
    tally = Counter()
    for line in counts.read_text().splitlines():
        pid, n = line.split()
        tally[pid] += int(n)
    return tally


def one_preparation(cache_dir: Path) -> int:
    """Sentences that preparing the tiny toy data once tokenises: both sides of every split."""
    options = {k.split(".")[-1]: int(v) for k, v in (o.split("=") for o in TINY_DATA[:3])}
    corpus = ToyCorpus(str(cache_dir), **options)
    return 2 * sum(len(corpus.load(split)) for split in ("train", "valid", "test"))


TRAIN = [
    sys.executable,
    "-m",
    "alignmt.train",
    *TINY_DATA,
    *TINY_MODEL,
    "trainer.max_steps=4",
    "trainer.val_check_interval=2",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "++trainer.precision=32-true",
]


def test_two_ddp_cpu_ranks_started_together_on_a_cold_cache_tokenise_once(hooks, tmp_path):
    cache, counts, port = tmp_path / "cache", tmp_path / "tokenized.txt", free_port()
    command = [*TRAIN, "trainer=ddp_cpu", f"data.corpus.cache_dir={cache}"]
    command.append(f"hydra.run.dir={tmp_path / 'run'}")
    ranks = [
        environment(
            hooks,
            ALIGNMT_COUNT_TOKENIZED=counts,
            LOCAL_RANK=rank,
            NODE_RANK=0,
            WORLD_SIZE=2,
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
        )
        for rank in (0, 1)
    ]
    start_together([(command, env) for env in ranks])
    tally = tokenized_by_process(counts)
    assert len(tally) == 1 and sum(tally.values()) == one_preparation(cache)
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["train_steps"] == 4


def test_two_slurm_nodes_prepare_once_train_and_gather_the_bleu_of_one_process(hooks, tmp_path):
    cache, counts, port = tmp_path / "cache", tmp_path / "tokenized.txt", free_port()
    run_dir = tmp_path / "run"
    command = [
        *TRAIN,
        "trainer=multinode",
        "trainer.num_nodes=2",
        "trainer.devices=1",
        "trainer.accelerator=cpu",
        f"data.corpus.cache_dir={cache}",
        f"hydra.run.dir={run_dir}",
    ]
    nodes = [
        environment(
            hooks,
            ALIGNMT_COUNT_TOKENIZED=counts,
            SLURM_NTASKS=2,
            SLURM_PROCID=node,
            SLURM_LOCALID=0,
            SLURM_NODEID=node,
            SLURM_JOB_NAME="alignmt",
            SLURM_JOB_ID=4242,
            SLURM_NNODES=2,
            SLURM_NTASKS_PER_NODE=1,
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
        )
        for node in (0, 1)
    ]
    start_together([(command, env) for env in nodes])
    tally = tokenized_by_process(counts)
    assert len(tally) == 1 and sum(tally.values()) == one_preparation(cache)  # one cache, once
    two = json.loads((run_dir / "metrics.json").read_text())
    assert two["train_steps"] == 4
    checkpoint = two["best_checkpoint"] or str(run_dir / "checkpoints" / "last.ckpt")
    one = evaluate(
        compose_config(
            "evaluate",
            [
                f"ckpt={checkpoint}",
                "trainer.enable_progress_bar=false",
                f"run_dir={tmp_path / 'one'}",
            ],
        )
    )
    assert two["test/bleu"] == one["test/bleu"]
    assert two["test_sentences"] == one["test_sentences"]
    assert (run_dir / "hypotheses.txt").read_text() == (
        tmp_path / "one" / "hypotheses.txt"
    ).read_text()


def test_the_slurm_launcher_writes_the_job_script_of_a_two_run_sweep(hooks, tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    for tool, text in (("sbatch", FAKE_SBATCH), ("srun", "#!/bin/sh\nexit 0\n")):
        (fake / tool).write_text(text)
        (fake / tool).chmod(0o755)
    capture = tmp_path / "submitted"
    capture.mkdir()
    env = environment(hooks, ALIGNMT_FAKE_SLURM_RESULTS=1, SBATCH_CAPTURE=capture)
    env["PATH"] = f"{fake}:{env['PATH']}"
    sweep = tmp_path / "sweep"
    command = [
        sys.executable,
        "-m",
        "alignmt.train",
        "-m",
        "hydra/launcher=slurm",
        "trainer=multinode",
        "hydra.launcher.nodes=2",
        "hydra.launcher.tasks_per_node=4",
        "hydra.launcher.timeout_min=600",
        "hydra.launcher.partition=gpu",
        f"hydra.sweep.dir={sweep}",
        "seed=1,2",
    ]
    start_together([(command, env)], timeout=200)
    (script,) = capture.iterdir()
    text = script.read_text()
    for line in (
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=4",
        "#SBATCH --gpus-per-node=4",  # one GPU per task
        "#SBATCH --cpus-per-task=8",
        "#SBATCH --time=600",
        "#SBATCH --partition=gpu",
        "#SBATCH --array=0-1",
    ):
        assert line in text, (line, text)
    assert "srun --unbuffered" in text and "-m submitit.core._submit" in text
    jobs = sorted((sweep / ".submitit").rglob("*_submitted.pkl"))
    assert len(jobs) == 2
    overrides = [cloudpickle.loads(job.read_bytes()).args[0] for job in jobs]
    assert sorted(overrides) == [["trainer=multinode", "seed=1"], ["trainer=multinode", "seed=2"]]
