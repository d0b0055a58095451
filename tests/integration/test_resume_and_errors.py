"""Resuming interrupted training, and the errors a researcher gets for bad configs."""

from functools import partial
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from hydra.errors import ConfigCompositionException, MissingConfigException

from alignmt.config import ConfigError, instantiate
from alignmt.data.batching import EncodedPairs, collate
from alignmt.models import RNNSearch
from alignmt.task import TranslationTask
from alignmt.train import train


def checkpoint_step(path) -> int:
    return torch.load(path, weights_only=True)["global_step"]


def test_resume_from_a_checkpoint_continues_the_step_count(compose_train, tmp_path):
    first = compose_train(
        "trainer.max_steps=6", "trainer.val_check_interval=3", run_dir=tmp_path / "first"
    )
    train(first)
    last = tmp_path / "first" / "checkpoints" / "last.ckpt"
    assert checkpoint_step(last) == 6
    resumed = compose_train(
        "trainer.max_steps=10",
        "trainer.val_check_interval=3",
        f"ckpt_path={last}",
        run_dir=tmp_path / "resumed",
    )
    metrics = train(resumed)
    assert metrics["train_steps"] == 10
    assert checkpoint_step(tmp_path / "resumed" / "checkpoints" / "last.ckpt") == 10


class Interrupt(pl.Callback):
    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == 4:
            raise RuntimeError("simulated crash")


def test_an_interrupted_run_saves_a_checkpoint_to_resume_from(compose_train, tmp_path, monkeypatch):
    import alignmt.build as build_module

    build = build_module.build_callbacks
    monkeypatch.setattr(build_module, "build_callbacks", lambda cfg: [*build(cfg), Interrupt()])
    cfg = compose_train(
        "trainer.max_steps=10", "trainer.val_check_interval=100", run_dir=tmp_path / "crashed"
    )
    with pytest.raises(RuntimeError, match="simulated crash"):
        train(cfg)
    interrupted = tmp_path / "crashed" / "checkpoints" / "interrupted.ckpt"
    assert checkpoint_step(interrupted) == 4
    monkeypatch.setattr(build_module, "build_callbacks", build)
    metrics = train(
        compose_train(
            "trainer.max_steps=7",
            "trainer.val_check_interval=100",
            f"ckpt_path={interrupted}",
            run_dir=tmp_path / "again",
        )
    )
    assert metrics["train_steps"] == 7


def test_an_unknown_group_choice_fails_naming_the_choices(compose_train):
    with pytest.raises(MissingConfigException) as error:
        compose_train("model=rnnsarch")
    message = str(error.value)
    assert "rnnsarch" in message and "rnnsearch" in message and "rnnencdec" in message


def test_an_unknown_key_fails_at_composition(compose_train):
    with pytest.raises(ConfigCompositionException, match="hidden_sise"):
        compose_train("model.hidden_sise=3")


def test_a_misspelt_key_added_to_a_group_fails_naming_key_and_class(compose_train):
    cfg = compose_train("+model.maxout_sise=3")
    with pytest.raises(ConfigError) as error:
        instantiate(cfg.model, src_vocab_size=10, tgt_vocab_size=10)
    message = str(error.value)
    assert "'model'" in message and "maxout_sise" in message and "RNNSearch" in message


def test_experiments_are_addressable_as_experiment_name(compose_train):
    cfg = compose_train("experiment=toy/rnnencdec", tiny=False)
    assert cfg.model._target_ == "alignmt.models.RNNEncDec"


def test_a_non_finite_loss_stops_training_with_a_clear_error():
    model = RNNSearch(20, 20, 8, 8, 8, 4, attention=None)
    with torch.no_grad():
        model.decoder.maxout.output.bias.fill_(float("nan"))
    task = TranslationTask(model, optimizer=partial(torch.optim.Adam), evaluator=None)
    batch = collate([EncodedPairs([[5, 6]], [[7, 8]])[0]])
    with pytest.raises(FloatingPointError, match="training loss is nan at step 0"):
        task.training_step(batch, 0)


def test_the_quickstart_config_is_the_default(compose_train):
    cfg = compose_train(tiny=False)
    assert cfg.model._target_ == "alignmt.models.RNNSearch"
    assert cfg.data.corpus._target_ == "alignmt.data.ToyCorpus"
    assert cfg.trainer.accelerator == "cpu"
    assert Path(cfg.run_dir).name == "run"
