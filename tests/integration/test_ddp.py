"""Lightning's DDP on two CPU processes (gloo): training, and corpus BLEU over all ranks."""

import json
import os
import subprocess
import sys
from pathlib import Path

from alignmt.evaluate import evaluate
from tests.conftest import TINY_DATA, TINY_MODEL, compose_config


def run(module: str, *overrides: str) -> None:
    """`python -m module overrides`, each process on one thread (two processes, two cores)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(
        [sys.executable, "-m", module, *overrides], check=True, capture_output=True, env=env
    )


def test_two_process_training_and_evaluation_match_one_process(cache_dir, tmp_path):
    run(
        "alignmt.train",
        "trainer=ddp_cpu",
        *TINY_DATA,
        *TINY_MODEL,
        "trainer.max_steps=4",
        "trainer.val_check_interval=2",
        "trainer.enable_progress_bar=false",
        f"data.corpus.cache_dir={cache_dir}",
        f"hydra.run.dir={tmp_path / 'train'}",
    )
    assert [p.name for p in tmp_path.iterdir()] == ["train"]  # one run directory for both ranks
    metrics = json.loads((tmp_path / "train" / "metrics.json").read_text())
    assert metrics["train_steps"] == 4 and metrics["test_sentences"] == 18
    checkpoint = tmp_path / "train" / "checkpoints" / "last.ckpt"

    run(
        "alignmt.evaluate",
        f"ckpt={checkpoint}",
        "trainer=ddp_cpu",
        "trainer.enable_progress_bar=false",
        f"hydra.run.dir={tmp_path / 'two'}",
    )
    two = json.loads((tmp_path / "two" / "metrics.json").read_text())
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
    # Corpus BLEU over the hypotheses of both ranks, not an average of per-rank BLEUs.
    assert two["test/bleu"] == one["test/bleu"]
    assert two["test_sentences"] == one["test_sentences"] == 18
    assert (tmp_path / "two" / "hypotheses.txt").read_text() == (
        tmp_path / "one" / "hypotheses.txt"
    ).read_text()
    assert abs(two["test/ppl"] - one["test/ppl"]) < 1e-6 * one["test/ppl"]


def peak_memory(cache_dir, folder: Path, *overrides: str) -> list[int]:
    """Peak resident memory (KiB) of each process of a run validating and testing on the
    toy corpus's full validation (300) and test (1,800) sets with a tiny model (outputs cut
    at 4 words: the scores of 1,800 long untrained outputs took most of the test's time)."""
    run(
        "alignmt.train",
        "data.corpus.train_size=400",
        "data.batch_size=16",
        *TINY_MODEL,
        "trainer.max_steps=2",
        "trainer.val_check_interval=2",
        "trainer.enable_progress_bar=false",
        "trainer.enable_model_summary=false",
        "callbacks.result_files.heatmaps=0",
        "decoding.max_length=4",  # what is kept per sentence, not its length, is measured
        "+callbacks.memory._target_=tests.integration.probes.PeakMemory",
        f"+callbacks.memory.folder={folder / 'memory'}",
        f"data.corpus.cache_dir={cache_dir}",
        f"hydra.run.dir={folder / 'run'}",
        *overrides,
    )
    metrics = json.loads((folder / "run" / "metrics.json").read_text())
    assert metrics["test_sentences"] == 1800
    return [int(p.read_text()) for p in sorted((folder / "memory").glob("rank*.txt"))]


def test_two_process_evaluation_needs_no_more_memory_per_process_than_one(cache_dir, tmp_path):
    """Gathering per-sentence results pickles them: results that held views of batch tensors
    pickled whole batches each, and ran two processes out of memory at test time."""
    (one,) = peak_memory(cache_dir, tmp_path / "one")
    two = peak_memory(cache_dir, tmp_path / "two", "trainer=ddp_cpu")
    assert len(two) == 2
    assert max(two) <= 1.5 * one, (two, one)
