"""Training on real text (a Multi30k subset, local folder) and evaluating from the checkpoint."""

import gzip
import shutil
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate

from alignmt.data.corpus import read_lines
from alignmt.evaluate import evaluate
from alignmt.evaluation.bleu import corpus_scores
from alignmt.train import train
from alignmt.translate import translate_lines
from tests.conftest import TINY_MODEL, TINY_TRAINER, compose_config

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
pytestmark = pytest.mark.skipif(
    not (SHARED_DATA / "multi30k").is_dir(),
    reason=f"Multi30k not found at {SHARED_DATA / 'multi30k'} (the repository's ../shared/data)",
)
SIZES = {"train": 2000, "val": 60, "test_2016_flickr": 60}


@pytest.fixture(scope="module")
def multi30k(tmp_path_factory):
    """The first lines of each split, in the raw release's layout (gzip-compressed)."""
    folder = tmp_path_factory.mktemp("multi30k")
    for stem, n in SIZES.items():
        for lang in ("de", "en"):
            lines = read_lines(SHARED_DATA / "multi30k" / f"{stem}.{lang}.gz")[:n]
            with gzip.open(folder / f"{stem}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in lines))
    return folder


def multi30k_config(folder, cache_dir, run_dir, *overrides):
    return compose_config(
        "train",
        [
            "data=multi30k",
            f"data.corpus.path={folder}",
            f"data.cache_dir={cache_dir}",
            f"run_dir={run_dir}",
            "data.batch_size=32",
            "data.eval_batch_size=30",
            *TINY_MODEL,
            *TINY_TRAINER,
            *overrides,
        ],
    )


def evaluate_checkpoint(checkpoint, run_dir):
    return evaluate(
        compose_config(
            "evaluate",
            [
                f"ckpt={checkpoint}",
                f"run_dir={run_dir}",
                "trainer.enable_progress_bar=false",
                "heatmaps=1",
            ],
        )
    )


def test_word_level_training_on_multi30k_then_evaluation_from_the_checkpoint(multi30k, tmp_path):
    cfg = multi30k_config(multi30k, tmp_path / "cache", tmp_path / "run")
    metrics = train(cfg)
    assert metrics["train_steps"] == 12 and metrics["test_sentences"] == 60
    hypotheses = (tmp_path / "run" / "hypotheses.txt").read_text().splitlines()
    assert len(hypotheses) == 60
    assert "tok:13a" in metrics["bleu_signature"]
    references = read_lines(multi30k / "test_2016_flickr.en.gz")
    assert metrics["test/bleu"] == pytest.approx(corpus_scores(hypotheses, references)["bleu"])
    again = evaluate_checkpoint(metrics["best_checkpoint"], tmp_path / "eval")
    assert again["test/bleu"] == pytest.approx(metrics["test/bleu"])
    assert (tmp_path / "eval" / "hypotheses.txt").read_text().splitlines() == hypotheses


def test_a_subword_checkpoint_evaluates_and_translates_on_its_own(multi30k, tmp_path):
    cache = tmp_path / "cache"
    cfg = multi30k_config(
        multi30k, cache, tmp_path / "run", "data/tokenizer=subword", "data.tokenizer.vocab_size=600"
    )
    metrics = train(cfg)
    checkpoint = metrics["best_checkpoint"]
    stored = torch.load(checkpoint, weights_only=True)
    assert isinstance(stored["tokenizers"]["source"]["model"], bytes)
    assert "target" not in stored["tokenizers"]  # one joint model
    shutil.rmtree(cache)  # no SentencePiece model, no tokenised data left behind
    again = evaluate_checkpoint(checkpoint, tmp_path / "eval")
    assert again["test/bleu"] == pytest.approx(metrics["test/bleu"])
    assert not (cache / "sentencepiece").exists()  # the checkpoint's model was used
    hypotheses = (tmp_path / "run" / "hypotheses.txt").read_text().splitlines()
    assert (tmp_path / "eval" / "hypotheses.txt").read_text().splitlines() == hypotheses
    sources = read_lines(multi30k / "test_2016_flickr.de.gz")[:3]
    translate_cfg = compose_config("translate", [f"ckpt={checkpoint}"])
    outputs = translate_lines(translate_cfg, [sources[0], "", sources[1], sources[2]])
    assert len(outputs) == 4 and outputs[1] == "" and "▁" not in "".join(outputs)


def test_separate_subword_models_are_trained_and_restored_per_language(multi30k, tmp_path):
    cfg = multi30k_config(
        multi30k,
        tmp_path / "cache",
        tmp_path / "run",
        "data/tokenizer=subword_separate",
        "data.tokenizer.vocab_size=400",
        "data.tokenizer.model_type=unigram",
    )
    dm = instantiate(cfg.data, seed=1)
    assert dm.source_tokenizer is not dm.target_tokenizer
    dm.setup("fit")
    state = dm.tokenizer_state()
    assert set(state) == {"source", "target"} and state["source"] != state["target"]
    restored = instantiate(cfg.data, seed=1)
    restored.load_tokenizer_state(state)
    sentence = read_lines(multi30k / "val.en.gz")[0]
    assert restored.target_tokenizer.tokenize(sentence) == dm.target_tokenizer.tokenize(sentence)
    assert restored.source_tokenizer.fingerprint == dm.source_tokenizer.fingerprint
