"""Hard attention, supervised attention and the pointer-generator train and decode through
`alignmt.train.train` on tiny configs; a copying checkpoint translates on its own."""

import csv
import math

import pytest

from alignmt.build import restore
from alignmt.train import train
from tests.conftest import TINY_DATA, TINY_TRAINER


def logged_columns(run_dir) -> set[str]:
    with (run_dir / "logs" / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    return {name for row in rows for name, value in row.items() if value}


LUONG = ("model=luong", "model.embedding_dim=16", "model.hidden_size=16", *TINY_DATA, *TINY_TRAINER)


@pytest.mark.parametrize(
    ("attention", "overrides", "tiny"),
    [("hard", LUONG, False), ("hard_gumbel", ("decoding=beam", "decoding.beam_size=3"), True)],
    ids=["reinforce-luong-greedy", "gumbel-rnnsearch-beam"],
)
def test_hard_attention_trains_and_decodes_one_position_per_step(
    compose_train, tmp_path, attention, overrides, tiny
):
    metrics = train(compose_train(f"model/attention={attention}", *overrides, tiny=tiny))
    assert math.isfinite(metrics["test/loss"]) and "test/bleu" in metrics
    assert metrics["test/attention_entropy"] == 0.0  # every decoded step: one position
    columns = logged_columns(tmp_path / "run")
    assert ("train/reinforce/baseline" in columns) == (attention == "hard")


def test_supervised_attention_trains_on_the_gold_alignments(compose_train, tmp_path):
    metrics = train(compose_train("task.alignment_loss_weight=1.0"))
    assert "test/aer" in metrics and math.isfinite(metrics["test/loss"])
    assert "train/alignment_loss" in logged_columns(tmp_path / "run")


def test_the_pointer_generator_trains_decodes_and_translates_from_its_checkpoint(
    compose_train,
):
    cfg = compose_train(
        "model/copy=pointer_generator",
        "+data.target_vocab_size=40",  # most target words unknown: extended ids in use
        "decoding=beam",
        "decoding.beam_size=3",
    )
    assert cfg.data.copy_ids
    metrics = train(cfg)
    assert math.isfinite(metrics["test/loss"]) and "test/attention_entropy" in metrics
    restored = restore(metrics["best_checkpoint"])
    assert restored.model.copies_source
    sentence = "the Zorglub sees a Blorp"
    translation = restored.translator.translate([sentence])[0][0]
    target = set(restored.datamodule.target_vocab.itos)
    assert all(t in target or t in sentence.split() for t in translation.tokens)
    assert translation.source_tokens.count("[UNK]") == 2
