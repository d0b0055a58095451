"""The counting language: its sentences, splits, oracle and data config."""

from collections import Counter

import pytest
from hydra.utils import instantiate

from alignmt.data.counting import WORDS, CountingCorpus, counting_oracle, counting_sentence
from alignmt.special_tokens import EOS_ID
from tests.conftest import compose_config


def test_a_sentence_counts_up_modulo_ten():
    assert counting_sentence("7", 6) == "7 8 9 0 1 2"
    assert len(counting_sentence("0").split()) == 60


def test_splits_are_seeded_balanced_and_translate_into_themselves():
    corpus = CountingCorpus(seed=3, train_size=2000, valid_size=100, test_size=100)
    train = corpus.load("train")
    assert len(train) == 2000
    assert train.sources == train.targets
    assert Counter(s.split()[0] for s in train.sources) == {w: 200 for w in WORDS}
    assert all(s == counting_sentence(s.split()[0]) for s in train.sources)
    again = CountingCorpus(seed=3).load("test")
    assert corpus.load("test").sources == again.sources
    other = CountingCorpus(seed=4).load("test")
    assert other.sources != again.sources and sorted(other.sources) == sorted(again.sources)
    with pytest.raises(ValueError, match="unknown split"):
        corpus.load("dev")


def test_the_oracle_follows_the_previous_word_however_wrong_the_prefix():
    stoi = {w: 10 + int(w) for w in WORDS}  # "0" -> 10, ..., "9" -> 19
    sources = [counting_sentence("8", 5), counting_sentence("3", 5)]
    oracle = counting_oracle(sources, stoi, length=5)
    assert oracle(0, []) == {18}  # the source's first word
    assert oracle(1, []) == {13}
    assert oracle(0, [18]) == {19}
    assert oracle(0, [18, 19]) == {10}  # 9 + 1 wraps to 0
    assert oracle(0, [18, 14]) == {15}  # derailed: still previous + 1, not the reference's 0
    assert oracle(0, [18, 19, 10, 11, 12]) == {EOS_ID}  # five words are out
    assert oracle(0, [18, 1]) == set()  # after [UNK] nothing is right
    with pytest.raises(ValueError, match=r"lacks the counting words \['9'\]"):
        counting_oracle(sources, {w: int(w) + 4 for w in WORDS[:9]})


def test_on_the_reference_prefix_the_oracle_gives_the_reference_token():
    corpus = CountingCorpus(test_size=20, length=12)
    test = corpus.load("test")
    stoi = {w: 4 + int(w) for w in WORDS}
    oracle = counting_oracle(test.sources, stoi, length=12)
    for i, target in enumerate(test.targets):
        reference = [stoi[w] for w in target.split()] + [EOS_ID]
        assert all(oracle(i, reference[:t]) == {reference[t]} for t in range(len(reference)))
    bound = corpus.oracle(test.sources, stoi)  # at the corpus' own length, 12
    assert bound(0, [4] * 11) == {5} and bound(0, [4] * 12) == {EOS_ID}


def test_the_data_config_builds_the_counting_task(tmp_path):
    config = compose_config("train", ["data=counting", f"data.cache_dir={tmp_path}"])
    data = instantiate(config.data)
    assert isinstance(data.corpus, CountingCorpus)
    data.setup("fit")
    assert len(data.text["train"]) == 2000 and len(data.text["test"]) == 100
    assert sorted(data.target_vocab.itos[4:]) == list(WORDS)
    assert data.source_tokenizer.tokenize(data.text["test"].sources[0]) == (
        data.text["test"].sources[0].split()
    )
