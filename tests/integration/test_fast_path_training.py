"""Training through `build` and Lightning with the fast path on (the step compiled by
inductor, torch.compile's code generator, here for the CPU) takes the steps the plain step
path takes: the same loss at every step."""

from __future__ import annotations

import pytorch_lightning as pl
import torch

from alignmt.build import build
from alignmt.models.compiled import FastPath


class Losses(pl.Callback):
    def __init__(self):
        self.values = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.values.append(float(outputs["loss"]))


def train_losses(cfg) -> tuple[list[float], object]:
    built = build(cfg)
    losses = Losses()
    trainer = built.trainer(
        max_steps=4, limit_val_batches=0, logger=False, callbacks=[losses],
        enable_checkpointing=False,
    )  # fmt: skip
    trainer.fit(built.task, datamodule=built.datamodule)
    return losses.values, built.model.fast_path


def test_training_with_the_compiled_step_takes_the_same_steps(compose_train):
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    common = ["model/attention=general", "trainer.enable_progress_bar=false"]
    plain, none = train_losses(compose_train(*common))
    fast, made = train_losses(
        compose_train(*common, "fast_path.compile=true", "fast_path.cuda_graphs=true")
    )
    assert none is None and isinstance(made, FastPath)
    assert torch._dynamo.utils.counters["frames"]["ok"] > 0  # inductor compiled the step
    assert len(fast) == len(plain) == 4
    torch.testing.assert_close(fast, plain, atol=1e-5, rtol=1e-5)
