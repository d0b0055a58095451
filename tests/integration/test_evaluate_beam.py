"""alignmt-evaluate with beam search, [UNK] replacement and the "No UNK" subset."""

import json

import pytest

from alignmt.build import restore
from alignmt.data.corpus import ToyCorpus
from alignmt.decoding import GreedySearch
from alignmt.evaluate import evaluate
from alignmt.evaluation.bleu import corpus_scores
from alignmt.train import train
from tests.conftest import compose_config, tiny_train_config


def evaluate_config(ckpt, run_dir, *overrides):
    return compose_config(
        "evaluate",
        [f"ckpt={ckpt}", f"run_dir={run_dir}", *overrides],
    )


def test_evaluate_with_beam_search_writes_the_metrics_and_files(trained_run, tmp_path):
    _, trained = trained_run
    cfg = evaluate_config(
        trained["best_checkpoint"],
        tmp_path,
        "decoding=beam",
        "decoding.beam_size=3",
        "decoding.length_penalty=0.6",
        "decoding.min_length=1",  # a 30-step model's most probable output is the empty one
        "heatmaps=1",
        "heatmap_sentences=[0,7]",
    )
    returned = evaluate(cfg)
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved == returned
    for key in (
        "test/bleu",
        "test/chrf",
        "bleu_signature",
        "chrf_signature",
        "test/bleu_no_unk",
        "no_unk_sentences",
        "test/ppl",
        "test/bleu_len_1_10",
        "test/aer",
        "test/decode_sentences_per_sec",
        "test/decode_tokens_per_sec",
    ):
        assert key in saved, key
    assert saved["test/decode_sentences_per_sec"] > 0 and saved["test/decode_tokens_per_sec"] > 0
    assert len((tmp_path / "hypotheses.txt").read_text().splitlines()) == 18
    assert (tmp_path / "bleu_by_length.csv").is_file() and (
        tmp_path / "bleu_by_length.png"
    ).is_file()
    heatmaps = {p.name for p in (tmp_path / "attention").glob("*.png")}
    assert {"test_00000.png", "test_00007.png"} <= heatmaps and len(heatmaps) <= 3


@pytest.fixture(scope="module")
def small_vocabulary_run(cache_dir, tmp_path_factory):
    """A model whose vocabularies leave words out (10% of training target words are [UNK]),
    and only 2 of the 18 test sentences free of unknown words."""
    run_dir = tmp_path_factory.mktemp("small-vocabulary") / "run"
    cfg = tiny_train_config(
        cache_dir,
        run_dir,
        "++data.source_vocab_size=250",
        "++data.target_vocab_size=200",
        "model.attention.attention_size=24",
        "trainer.max_steps=40",  # long enough to learn that [UNK] is its most frequent word
        "trainer.val_check_interval=40",
    )
    return cfg, train(cfg)


def test_no_unk_bleu_covers_the_sentences_without_unknown_words(small_vocabulary_run, tmp_path):
    cfg, trained = small_vocabulary_run
    ckpt = trained["best_checkpoint"]
    restored = restore(ckpt)
    known_source, known_target = (
        restored.datamodule.source_vocab.stoi,
        restored.datamodule.target_vocab.stoi,
    )
    test = ToyCorpus(**{k: v for k, v in cfg.data.corpus.items() if k != "_target_"}).load("test")
    without_unknowns = [
        all(w in known_source for w in s.split()) and all(w in known_target for w in t.split())
        for s, t in zip(test.sources, test.targets, strict=True)
    ]
    assert 0 < sum(without_unknowns) < len(test)

    plain = evaluate(evaluate_config(ckpt, tmp_path / "plain"))
    replaced = evaluate(evaluate_config(ckpt, tmp_path / "replaced", "unk_replace=true"))
    for metrics in (plain, replaced):
        assert metrics["no_unk_sentences"] == sum(without_unknowns)
    # By its definition: those sentences alone, each translated with [UNK] forbidden.
    subset = [i for i, known in enumerate(without_unknowns) if known]
    translator = restored.translator
    translator.search = GreedySearch(forbid_unk=True)
    outputs = translator.translate([test.sources[i] for i in subset])
    assert all("[UNK]" not in nbest[0].tokens for nbest in outputs)
    expected = corpus_scores([n[0].text for n in outputs], [test.targets[i] for i in subset])
    assert plain["test/bleu_no_unk"] == pytest.approx(expected["bleu"])
    plain_text = (tmp_path / "plain" / "hypotheses.txt").read_text()
    replaced_text = (tmp_path / "replaced" / "hypotheses.txt").read_text()
    assert "[UNK]" in plain_text and "[UNK]" not in replaced_text
    source_words = {w for s in test.sources for w in s.split()}
    copied = set(replaced_text.split()) - set(plain_text.split())
    assert copied and copied <= source_words
