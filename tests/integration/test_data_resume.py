"""The training data order through real Lightning runs: new batches every epoch, and a run
resumed from a checkpoint trains on exactly the batches an uninterrupted run would have."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint, OnExceptionCheckpoint

from alignmt.data import ToyCorpus, TranslationDataModule
from alignmt.data.streaming import StreamPosition


class Recorder(pl.LightningModule):
    """Trains a tiny linear layer and records every batch it trains on, as `indices` lists
    (streamed batches, whose indices restart in every pool, by their source rows instead)."""

    def __init__(self, out: Path | None = None):
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.seen: list[list] = []
        self.out = out

    def training_step(self, batch, batch_idx):
        if isinstance(batch.position, StreamPosition):
            self.seen.append([row[row != 0].tolist() for row in batch.src])
        else:
            self.seen.append(batch.indices.tolist())
        x = batch.src.float().mean(1, keepdim=True)
        return self.layer(x).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def on_train_end(self):
        if self.out is not None:
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / f"rank{self.global_rank}.json").write_text(json.dumps(self.seen))


class StreamedToy:
    """The toy corpus with its training split streamed from `shards` shards."""

    def __init__(self, corpus: ToyCorpus, shards: int):
        self.corpus, self.shards = corpus, shards

    def load(self, split):
        return self.corpus.load(split)

    def stream(self, split):
        text = self.corpus.load(split)
        pairs = datasets.Dataset.from_dict({"source": text.sources, "target": text.targets})
        return pairs.to_iterable_dataset(num_shards=self.shards)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    cache = tmp_path_factory.mktemp("toy")
    return ToyCorpus(cache_dir=str(cache), train_size=200, valid_per_bucket=1, test_per_bucket=1)


def datamodule(toy, stream_shards: int | None = None, **options) -> TranslationDataModule:
    corpus = toy if stream_shards is None else StreamedToy(toy, stream_shards)
    settings = dict(batch_size=16, pool_batches=4, max_length=None, cache_dir=toy.cache_dir)
    if stream_shards is not None:
        settings.update(batch_size=8, pool_batches=3)  # pools of 24 pairs: several per pass
    dm = TranslationDataModule(corpus, **{**settings, **options})
    dm.prepare_data()
    return dm


def trainer(tmp_path=None, every: int | None = None, **options) -> pl.Trainer:
    callbacks = []
    if every is not None:
        callbacks.append(
            ModelCheckpoint(tmp_path, "{step}", every_n_train_steps=every, save_top_k=-1)
        )
    settings = dict(
        max_epochs=-1,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=bool(callbacks),
        callbacks=callbacks,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        use_distributed_sampler=False,
    )
    return pl.Trainer(**{**settings, **options})


def fit(toy, dm_options: dict, ckpt_path=None, **trainer_options) -> list[list]:
    model = Recorder()
    trainer(**trainer_options).fit(
        model, datamodule=datamodule(toy, **dm_options), ckpt_path=ckpt_path
    )
    return model.seen


def test_every_epoch_covers_the_training_pairs_once_in_a_new_order(toy):
    dm = datamodule(toy, seed=3)
    model = Recorder()
    trainer(max_epochs=3).fit(model, datamodule=dm)
    per_epoch = len(dm.train_dataloader())
    assert len(model.seen) == 3 * per_epoch
    epochs = [model.seen[e * per_epoch : (e + 1) * per_epoch] for e in range(3)]
    for batches in epochs:
        assert sorted(i for batch in batches for i in batch) == list(range(len(dm.pairs["train"])))
    assert epochs[0] != epochs[1] != epochs[2] != epochs[0]
    assert fit(toy, dict(seed=3), max_epochs=3) == model.seen  # the same seed, the same order
    assert fit(toy, dict(seed=4), max_epochs=1) != epochs[0]


RESUMES = {
    # name: (datamodule options, steps, checkpoint step, trainer options)
    "mid-epoch": ({}, 30, 5, {}),
    "end of epoch": ({}, 30, 13, {}),  # 200 pairs in batches of 16: 13 per epoch
    "token budget": ({"max_tokens": 400}, 30, 7, {}),
    "workers": ({"num_workers": 2}, 20, 4, {}),
    "stream": ({"stream_shards": 2}, 45, 11, {}),  # over 2 passes of 25 batches
    "stream, workers": ({"stream_shards": 3, "num_workers": 2}, 45, 9, {}),
    # a curriculum's epoch of 10 steps, then ordinary epochs of 13
    "curriculum": ({"curriculum": {"steps": 10, "initial": 0.2}}, 30, 6, {}),
    "after the curriculum": ({"curriculum": {"steps": 10, "initial": 0.2}}, 30, 14, {}),
}


@pytest.mark.parametrize("case", list(RESUMES))
def test_a_resumed_run_trains_on_the_batches_of_an_uninterrupted_one(toy, tmp_path, case):
    dm_options, steps, at, options = RESUMES[case]
    straight = fit(toy, dm_options, max_steps=steps, tmp_path=tmp_path, every=at, **options)
    assert len(straight) == steps
    ckpt = tmp_path / f"step={at}.ckpt"
    resumed = fit(toy, dm_options, ckpt_path=ckpt, max_steps=steps, **options)
    assert straight[:at] + resumed == straight


def test_a_curriculum_refuses_streamed_training_data(toy):
    dm = datamodule(toy, stream_shards=2, curriculum={"steps": 10})
    dm.setup("fit")
    with pytest.raises(ValueError, match=r"data\.curriculum .* not streamed"):
        dm.train_dataloader()


class Validated(Recorder):
    def validation_step(self, batch, batch_idx):
        self.log("val_loss", float(self.global_step), batch_size=len(batch))


def test_a_checkpoint_written_by_a_validation_in_mid_epoch_resumes_after_its_step(toy, tmp_path):
    """The best-model checkpoint: written at the end of a validation, not of a training step."""
    best = ModelCheckpoint(tmp_path, "{step}", monitor="val_loss", mode="max", save_top_k=-1)
    options = dict(max_steps=30, val_check_interval=5, check_val_every_n_epoch=None)
    straight = Validated()
    trainer(callbacks=[best], enable_checkpointing=True, limit_val_batches=1, **options).fit(
        straight, datamodule=datamodule(toy)
    )
    resumed = Validated()
    trainer(limit_val_batches=1, **options).fit(
        resumed, datamodule=datamodule(toy), ckpt_path=tmp_path / "step=5.ckpt"
    )
    assert len(straight.seen) == 30 and straight.seen[:5] + resumed.seen == straight.seen


class FailingStep(Recorder):
    def training_step(self, batch, batch_idx):
        if self.global_step == 6:
            raise RuntimeError("the seventh step fails")
        return super().training_step(batch, batch_idx)


@pytest.mark.parametrize("stream_shards", [None, 2], ids=["loaded", "stream"])
def test_a_step_that_fails_is_trained_again_on_resume(toy, tmp_path, stream_shards):
    """The checkpoint written as a training step fails: its batch was taken, not trained on."""
    straight = fit(toy, {"stream_shards": stream_shards}, max_steps=20)
    failed = FailingStep()
    saved = OnExceptionCheckpoint(tmp_path, "interrupted")
    with pytest.raises(RuntimeError, match="seventh step"):
        trainer(max_steps=20, callbacks=[saved], enable_checkpointing=True).fit(
            failed, datamodule=datamodule(toy, stream_shards)
        )
    interrupted = tmp_path / "interrupted.ckpt"
    resumed = fit(toy, {"stream_shards": stream_shards}, ckpt_path=interrupted, max_steps=20)
    assert len(failed.seen) == 6 and failed.seen + resumed == straight


def test_an_end_of_epoch_checkpoint_resumes_with_the_next_epoch(toy, tmp_path):
    """Epoch-based training: Lightning does not hand a finished epoch's loader state back."""
    callback = ModelCheckpoint(tmp_path, "{epoch}", save_on_train_epoch_end=True, save_top_k=-1)
    model = Recorder()
    trainer(max_epochs=3, callbacks=[callback], enable_checkpointing=True).fit(
        model, datamodule=datamodule(toy, num_workers=1)
    )
    resumed = fit(toy, {"num_workers": 1}, ckpt_path=tmp_path / "epoch=0.ckpt", max_epochs=3)
    assert len(model.seen) == 39 and model.seen[13:] == resumed


def test_ddp_ranks_get_disjoint_shares_that_change_every_epoch(toy, tmp_path):
    dm = datamodule(toy, seed=2)
    model = Recorder(out=tmp_path)
    trainer(max_epochs=2, strategy="ddp_spawn", devices=2).fit(model, datamodule=dm)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    per_epoch = len(ranks[0]) // 2
    assert len(ranks[0]) == len(ranks[1]) == 2 * per_epoch and per_epoch >= 5
    everything = set(range(len(dm.pairs["train"])))
    for epoch in (0, 1):
        shares = [
            {i for b in r[epoch * per_epoch : (epoch + 1) * per_epoch] for i in b} for r in ranks
        ]
        assert not shares[0] & shares[1]
        assert len(everything - shares[0] - shares[1]) <= 16  # one batch cut for evenness
    assert ranks[0][:per_epoch] != ranks[0][per_epoch:]
    assert {i for b in ranks[0][:per_epoch] for i in b} != {
        i for b in ranks[0][per_epoch:] for i in b
    }


@pytest.mark.parametrize("stream_shards", [None, 2], ids=["loaded", "stream"])
def test_ddp_ranks_resume_their_own_shares(toy, tmp_path, stream_shards):
    """Only rank 0 writes the checkpoint; every rank must go on with its own share."""

    def run(out: Path, ckpt_path=None, **options) -> list[list]:
        model = Recorder(out=out)
        dm = datamodule(toy, stream_shards, seed=5, max_length=40)  # ranks drop different pairs
        ddp = trainer(max_steps=14, strategy="ddp_spawn", devices=2, **options)
        ddp.fit(model, datamodule=dm, ckpt_path=ckpt_path)
        return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]

    straight = run(tmp_path / "straight", tmp_path=tmp_path, every=5)
    resumed = run(tmp_path / "resumed", ckpt_path=tmp_path / "step=5.ckpt")
    assert straight[0] != straight[1]
    for rank in (0, 1):
        assert straight[rank][:5] + resumed[rank] == straight[rank]
