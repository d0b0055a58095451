"""Sequence-level fine-tuning end to end: an MLE checkpoint's weights start a MIXER or minimum
risk run (`init_from`), whose optimiser and step count start afresh."""

import csv
from pathlib import Path

import pytest
import torch

from alignmt.build import build
from alignmt.train import train


def logged(run_dir: Path, column: str) -> list[float]:
    with (run_dir / "logs" / "metrics.csv").open() as f:
        return [float(row[column]) for row in csv.DictReader(f) if row.get(column)]


@pytest.fixture
def mle_checkpoint(trained_run):
    cfg, _ = trained_run
    return Path(cfg.run_dir) / "checkpoints" / "last.ckpt"


def test_init_from_starts_from_the_weights_alone(compose_train, mle_checkpoint):
    built = build(compose_train("objective=mixer", f"init_from={mle_checkpoint}"))
    saved = torch.load(mle_checkpoint, weights_only=True)
    weights = {k[len("model.") :]: v for k, v in saved["state_dict"].items() if k[:6] == "model."}
    state = built.model.state_dict()
    assert state.keys() == weights.keys()
    assert all(torch.equal(state[k], weights[k]) for k in weights)
    assert built.datamodule.target_vocab.itos == saved["vocabularies"]["target"]
    assert built.task.objective.baseline is not None  # the objective's own, fresh


@pytest.mark.parametrize(
    "objective",
    [
        ["objective=mixer", "objective.delta_start=4", "objective.increment_every=2"],
        ["objective=mrt", "objective.candidates=4"],
        ["objective=mrt", "objective.candidates=3", "objective.source=beam"],
    ],
    ids=["mixer", "mrt", "mrt-beam"],
)
def test_sequence_objectives_fine_tune_end_to_end(compose_train, mle_checkpoint, objective):
    cfg = compose_train(
        *objective,
        f"init_from={mle_checkpoint}",
        "trainer.max_steps=4",
        "trainer.val_check_interval=4",
    )
    metrics = train(cfg)
    assert metrics["train_steps"] == 4  # not the checkpoint's 30 and then 4 more
    assert "test/bleu" in metrics and "test/exposure/intact_share" in metrics
    rewards = logged(Path(cfg.run_dir), "train/reward")
    assert len(rewards) == 2 and all(0.0 <= r <= 1.0 for r in rewards)
    if objective[0] == "objective=mixer":
        assert logged(Path(cfg.run_dir), "train/delta") == [4.0, 6.0]  # steps 1 and 3


def test_init_from_names_itself_when_the_model_does_not_fit(compose_train, mle_checkpoint):
    with pytest.raises(ValueError, match=r"init_from=.*last\.ckpt.*model settings"):
        build(compose_train(f"init_from={mle_checkpoint}", "model.decoder_hidden_size=32"))


def test_coverage_loss_needs_an_objective_that_scores_the_reference(compose_train):
    with pytest.raises(ValueError, match=r"coverage_loss_weight.*objective=mle"):
        build(compose_train("objective=mrt", "task.coverage_loss_weight=1.0"))
