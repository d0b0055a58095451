"""The quickstart's first 50 training losses, pinned: refactoring must not change what it trains.

The values were recorded with the quickstart configuration (RNNsearch on the full toy corpus,
seed 1234, CPU) before the code was restructured, and recorded again when the output layer moved
into the loss and Adam's update became one fused kernel: both equal the earlier computation to
rounding (tests/unit/test_loss.py, test_fast_paths.py), which 50 steps of training amplify past
this tolerance; `tests/data/quickstart_first_50_losses.json`. They pin the attention energies in
PyTorch ops: the native pass (alignmt/models/native_energies.py), compiled for each machine's
CPU, equals them to rounding (tests/unit/test_native_energies.py), which would amplify likewise.
The tolerance admits the rounding of other CPUs' matrix-product kernels: on an AVX-512 Xeon the
same code trains losses up to 1.1e-4 (relative) from the values recorded on an AVX2 EPYC.
"""

import json
from pathlib import Path

import pytest
import pytorch_lightning as pl

from tests.conftest import compose_config

PINNED = Path(__file__).resolve().parents[1] / "data" / "quickstart_first_50_losses.json"


class RecordLosses(pl.Callback):
    def __init__(self):
        self.losses = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.losses.append(float(outputs["loss"]))


def test_the_quickstart_trains_the_pinned_losses(cache_dir, tmp_path, monkeypatch):
    from alignmt.build import build
    from alignmt.models import native_energies

    monkeypatch.setattr(native_energies, "library", lambda: None)

    cfg = compose_config(
        "train",
        [
            f"data.corpus.cache_dir={cache_dir}",
            f"run_dir={tmp_path}",
            "trainer.max_steps=50",
            "trainer.enable_progress_bar=false",
            "trainer.enable_model_summary=false",
            "~logger",
        ],
    )
    record = RecordLosses()
    built = build(cfg)
    trainer = built.trainer(callbacks=[record], logger=False, enable_checkpointing=False)
    trainer.fit(built.task, datamodule=built.datamodule)
    assert record.losses == pytest.approx(json.loads(PINNED.read_text()), rel=3e-4, abs=3e-4)
