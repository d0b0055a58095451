"""Lightning's DDP on two CPU processes (gloo): training, and corpus BLEU over all ranks."""

import json
import subprocess
import sys

from alignmt.evaluate import evaluate
from tests.conftest import TINY_DATA, TINY_MODEL, compose_config


def run(module: str, *overrides: str) -> None:
    subprocess.run([sys.executable, "-m", module, *overrides], check=True, capture_output=True)


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
