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
    "task.heatmaps=2",
]


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("alignmt-cache")


@pytest.fixture
def compose_train(cache_dir, tmp_path):
    """compose_train(*overrides): the training config, tiny everything, run_dir in tmp_path."""

    def _compose(*overrides: str, tiny: bool = True, run_dir=None):
        base = [f"data.corpus.cache_dir={cache_dir}", f"run_dir={run_dir or tmp_path / 'run'}"]
        if tiny:
            base += TINY_DATA + TINY_MODEL + TINY_TRAINER
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            return compose("train", overrides=[*base, *overrides])

    return _compose
