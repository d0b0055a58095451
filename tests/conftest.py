"""Shared fixtures: tiny configs composed through Hydra's compose API, a private corpus cache."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from alignmt.config import CONF_DIR

TINY_DATA = [
    "data.corpus.train_size=400",
    "data.corpus.valid_per_bucket=2",
    "data.corpus.test_per_bucket=3",
    "data.batch_size=16",
    "data.eval_batch_size=32",
]
TINY_MODEL = [
    "model.embedding_dim=16",
    "model.encoder_hidden_size=16",
    "model.decoder_hidden_size=24",
    "model.maxout_size=16",
]
TINY_TRAINER = [
    "trainer.max_steps=12",
    "trainer.val_check_interval=6",
    "trainer.log_every_n_steps=2",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "callbacks.result_files.heatmaps=2",
]


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("alignmt-cache")


def compose_config(name: str, overrides: list[str]):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose(name, overrides=overrides)


def tiny_train_config(cache_dir, run_dir, *overrides: str, tiny: bool = True):
    base = [f"data.corpus.cache_dir={cache_dir}", f"run_dir={run_dir}"]
    if tiny:
        base += TINY_DATA + TINY_MODEL + TINY_TRAINER
    return compose_config("train", [*base, *overrides])


@pytest.fixture
def compose_train(cache_dir, tmp_path):
    """compose_train(*overrides): the training config, tiny everything, run_dir in tmp_path."""

    def _compose(*overrides: str, tiny: bool = True, run_dir=None):
        return tiny_train_config(cache_dir, run_dir or tmp_path / "run", *overrides, tiny=tiny)

    return _compose


@pytest.fixture(scope="session")
def trained_run(cache_dir, tmp_path_factory):
    """One tiny RNNsearch run shared by the tests that only read its outputs."""
    from alignmt.train import train

    run_dir = tmp_path_factory.mktemp("trained") / "run"
    cfg = tiny_train_config(
        cache_dir, run_dir, "trainer.max_steps=30", "trainer.val_check_interval=15"
    )
    metrics = train(cfg)
    return cfg, metrics
