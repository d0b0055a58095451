"""A checkpoint trained with a given SentencePiece `model_file` evaluates without that file."""

import pytest

from alignmt.data import SentencePieceTokenizer
from alignmt.data.corpus import read_lines
from alignmt.train import train
from tests.integration.test_corpora import (  # noqa: F401 (the fixture)
    SHARED_DATA,
    evaluate_checkpoint,
    multi30k,
    multi30k_config,
)

pytestmark = pytest.mark.skipif(
    not (SHARED_DATA / "multi30k").is_dir(), reason=f"Multi30k not found at {SHARED_DATA}"
)


def test_a_checkpoint_needs_no_model_file_on_disk(multi30k, tmp_path):  # noqa: F811
    model_file = tmp_path / "given" / "joint.model"
    lines = read_lines(multi30k / "train.de.gz") + read_lines(multi30k / "train.en.gz")
    SentencePieceTokenizer(vocab_size=500).fit(lines, model_file)
    cfg = multi30k_config(
        multi30k,
        tmp_path / "cache",
        tmp_path / "run",
        "data/tokenizer=subword",
        f"data.tokenizer.model_file={model_file}",
        "trainer.max_steps=4",
        "trainer.val_check_interval=2",
    )
    metrics = train(cfg)
    assert not (tmp_path / "cache" / "sentencepiece").exists()  # the given model, not trained
    model_file.unlink()
    again = evaluate_checkpoint(metrics["best_checkpoint"], tmp_path / "eval")
    assert again["test/bleu"] == pytest.approx(metrics["test/bleu"])
    assert (tmp_path / "eval" / "hypotheses.txt").read_text() == (
        tmp_path / "run" / "hypotheses.txt"
    ).read_text()
