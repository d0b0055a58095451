"""WMT'14 through `datasets.load_dataset`, on a replica of the hub's layout built from real text."""

import json
import logging
import shutil
from pathlib import Path

import datasets
import huggingface_hub
import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from hydra.utils import instantiate

from alignmt.data import DataUnavailableError, HubCorpus, MosesTokenizer, TranslationDataModule
from alignmt.data.batching import Batch
from alignmt.data.corpus import read_lines
from alignmt.data.replica import write_hub_replica
from alignmt.special_tokens import EOS_ID
from tests.conftest import compose_config

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
pytestmark = pytest.mark.skipif(
    not (SHARED_DATA / "multi30k").is_dir(),
    reason=f"real parallel text not found at {SHARED_DATA} (the repository's ../shared/data)",
)


def multi30k(split: str, lang: str, n: int) -> list[str]:
    return read_lines(SHARED_DATA / "multi30k" / f"{split}.{lang}.gz")[:n]


def tatoeba(n: int) -> tuple[list[str], list[str]]:
    rows = [line.split("\t") for line in read_lines(SHARED_DATA / "tatoeba-en-fr" / "eng-fra.tsv")]
    return [r[0] for r in rows[-n:]], [r[1] for r in rows[-n:]]


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """fr-en: Multi30k train (500) and validation (60), Tatoeba test (80); de-en: Multi30k."""
    folder = tmp_path_factory.mktemp("hub") / "wmt14"
    en_tatoeba, fr_tatoeba = tatoeba(80)
    splits = {
        "fr-en": {
            "train": {"fr": multi30k("train", "fr", 500), "en": multi30k("train", "en", 500)},
            "validation": {"fr": multi30k("val", "fr", 60), "en": multi30k("val", "en", 60)},
            "test": {"fr": fr_tatoeba, "en": en_tatoeba},
        },
        "de-en": {
            "train": {"de": multi30k("train", "de", 300), "en": multi30k("train", "en", 300)},
            "validation": {"de": multi30k("val", "de", 40), "en": multi30k("val", "en", 40)},
            "test": {
                "de": multi30k("test_2016_flickr", "de", 40),
                "en": multi30k("test_2016_flickr", "en", 40),
            },
        },
    }
    write_hub_replica(folder, splits, train_shards=3)
    return folder, splits


@pytest.fixture
def corpus(hub, tmp_path):
    def make(**kwargs):
        options = dict(path=str(hub[0]), name="fr-en", cache_dir=str(tmp_path / "hf"))
        return HubCorpus(**{**options, **kwargs})

    return make


def test_pairs_load_in_either_direction(corpus, hub):
    _, splits = hub
    en_fr = corpus(source_lang="en", target_lang="fr")
    valid = en_fr.load("valid")
    assert list(valid.sources) == splits["fr-en"]["validation"]["en"]
    assert list(valid.targets) == splits["fr-en"]["validation"]["fr"]
    test = corpus(source_lang="fr", target_lang="en").load("test")
    assert list(test.sources) == splits["fr-en"]["test"]["fr"]
    assert len(en_fr.load("train")) == 500
    assert "fr-en" in valid.origin and "validation" in valid.origin


def test_training_subset_first_or_seeded_sample(corpus, hub):
    english = hub[1]["fr-en"]["train"]["en"]
    first = corpus(train_size=50).load("train")
    assert list(first.sources) == english[:50]
    sample = list(corpus(train_size=50, sample="random", seed=3).load("train").sources)
    assert sample == list(corpus(train_size=50, sample="random", seed=3).load("train").sources)
    assert sample != list(corpus(train_size=50, sample="random", seed=4).load("train").sources)
    positions = [english.index(s) for s in sample]
    assert positions == sorted(positions) and sample != english[:50]
    # only training is cut: references stay whole
    assert len(corpus(train_size=50).load("test")) == 80


def test_a_subset_larger_than_the_split_is_an_error(corpus):
    with pytest.raises(ValueError, match=r"train_size=501.*has 500 pairs"):
        corpus(train_size=501).load("train")


def test_streaming_reads_the_first_pairs_once_and_then_from_the_cache(hub, tmp_path):
    copy = shutil.copytree(hub[0], tmp_path / "wmt14")
    english = hub[1]["fr-en"]["train"]["en"]

    def load(split):
        corpus = HubCorpus(str(copy), "fr-en", streaming=True, train_size=40, cache_dir=tmp_path)
        return list(corpus.load(split).sources)

    assert load("train") == english[:40]
    assert load("valid") == hub[1]["fr-en"]["validation"]["en"]
    shutil.rmtree(copy)  # nothing left to stream from
    assert load("train") == english[:40]
    assert load("valid") == hub[1]["fr-en"]["validation"]["en"]


def test_a_language_the_dataset_lacks_is_named_with_the_available_ones(corpus):
    with pytest.raises(
        ValueError, match=r"no language 'de' \(data.corpus.source_lang\); available: en, fr"
    ):
        corpus(source_lang="de", target_lang="en").load("valid")


def test_a_streamed_subset_checks_its_languages_too(corpus):
    with pytest.raises(ValueError, match=r"no language 'cs' \(data.corpus.target_lang\)"):
        corpus(target_lang="cs", streaming=True, train_size=10).load("train")


def test_an_unknown_pair_lists_the_configs(corpus):
    with pytest.raises(ValueError, match=r"cs-en.*de-en.*fr-en|cs-en.*fr-en.*de-en"):
        corpus(name="cs-en").load("valid")


def test_offline_without_a_cached_copy_says_what_to_do(tmp_path, monkeypatch):
    for module in (datasets.config, huggingface_hub.constants):
        monkeypatch.setattr(module, "HF_HUB_OFFLINE", True)
    corpus = HubCorpus("wmt/wmt14", "fr-en", cache_dir=str(tmp_path))
    with pytest.raises(DataUnavailableError) as error:
        corpus.load("valid")
    message = str(error.value)
    for part in ("'wmt/wmt14'", "'fr-en'", "HF_HUB_OFFLINE", str(tmp_path), "data.corpus.path"):
        assert part in message, part
    assert error.value.__cause__ is None and error.value.__suppress_context__


def test_a_missing_local_folder_is_named(tmp_path):
    with pytest.raises(DataUnavailableError, match=f"local folder {tmp_path / 'nowhere'}"):
        HubCorpus(str(tmp_path / "nowhere"), "fr-en").load("test")


@pytest.mark.parametrize(
    ("config", "direction", "train_pairs"),
    [("wmt14_fr_en", ("en", "fr"), 500), ("wmt14_de_en", ("de", "en"), 300)],
)
def test_the_wmt14_configs_read_through_the_same_call(
    hub, tmp_path, config, direction, train_pairs
):
    source, target = direction
    cfg = compose_config(
        "train",
        [
            f"data={config}",
            f"data.corpus.path={hub[0]}",
            f"data.corpus.cache_dir={tmp_path / 'hf'}",
            f"data.cache_dir={tmp_path / 'cache'}",
            f"data.corpus.source_lang={source}",
            f"data.corpus.target_lang={target}",
        ],
    )
    # the paper's setting: 30,000 words per language, pairs up to 50 tokens, batches of 80
    assert (cfg.data.source_vocab_size, cfg.data.max_length, cfg.data.batch_size) == (30000, 50, 80)
    dm = instantiate(cfg.data, seed=1)
    assert isinstance(dm.source_tokenizer, MosesTokenizer) and dm.source_tokenizer.lang == source
    dm.prepare_data()
    dm.setup("fit")
    pair = config.removeprefix("wmt14_").replace("_", "-")
    assert len(dm.pairs["train"]) == train_pairs
    assert dm.text["test"].targets == hub[1][pair]["test"][target]
    assert len(dm.source_vocab) > 500


def counting_tokenizer(monkeypatch) -> list[int]:
    calls = [0]
    tokenize = MosesTokenizer.tokenize

    def counted(self, text):
        calls[0] += 1
        return tokenize(self, text)

    monkeypatch.setattr(MosesTokenizer, "tokenize", counted)
    return calls


def word_datamodule(corpus, cache_dir, **kwargs) -> TranslationDataModule:
    return TranslationDataModule(
        corpus,
        MosesTokenizer(corpus.source_lang),
        MosesTokenizer(corpus.target_lang),
        source_vocab_size=1000,
        target_vocab_size=1000,
        cache_dir=str(cache_dir),
        **kwargs,
    )


def test_the_second_load_reads_the_tokenised_cache(corpus, tmp_path, monkeypatch):
    calls = counting_tokenizer(monkeypatch)
    first = word_datamodule(corpus(), tmp_path / "cache")
    first.setup("fit")
    assert calls[0] == 2 * (500 + 60 + 80)
    second = word_datamodule(corpus(), tmp_path / "cache")
    second.setup("fit")
    assert calls[0] == 2 * (500 + 60 + 80)  # nothing tokenised again
    assert second.source_vocab == first.source_vocab
    for split in ("train", "valid", "test"):
        a, b = first.pairs[split], second.pairs[split]
        assert [a[i][1].tolist() for i in range(len(a))] == [
            b[i][1].tolist() for i in range(len(b))
        ]
    other = word_datamodule(corpus(train_size=100), tmp_path / "cache")
    other.setup("fit")
    assert calls[0] == 2 * (500 + 60 + 80 + 100)  # another subset is another cache entry


def test_streamed_training_yields_batches_without_loading_the_split(
    corpus, tmp_path, caplog, monkeypatch
):
    # datasets pauses 5 s whenever a Parquet stream is closed (an Arrow threading workaround)
    monkeypatch.setattr(datasets.config, "SLEEP_TIME_ON_THREADS_SHUTDOWN", 0.1)
    dm = word_datamodule(
        corpus(streaming=True), tmp_path / "cache", batch_size=16, stream_sample_size=200
    )
    with caplog.at_level(logging.INFO):
        dm.setup("fit")
    assert "train" not in dm.pairs and dm.train_stream is not None
    assert "vocabularies from its first 200 pairs" in caplog.text
    batches = iter(dm.train_dataloader())
    seen = [next(batches) for _ in range(40)]
    assert all(isinstance(b, Batch) and len(b) <= 16 for b in seen)
    assert sum(len(b) for b in seen[:32]) == 500  # one pass: 31 batches of 16 and one of 4
    assert seen[32].src.tolist() != seen[0].src.tolist()  # and round again, reshuffled
    assert len(dm.pairs["test"]) == 80


def test_streamed_training_gives_ranks_distinct_shares_and_works_with_workers(
    corpus, hub, tmp_path, monkeypatch
):
    monkeypatch.setattr(datasets.config, "SLEEP_TIME_ON_THREADS_SHUTDOWN", 0.1)
    shares = []
    for rank in (0, 1):
        dm = word_datamodule(corpus(streaming=True), tmp_path / "cache", batch_size=16)
        dm.setup("fit")
        monkeypatch.setattr(dm, "_world", lambda rank=rank: (2, rank))
        batches = iter(dm.train_dataloader())
        first_pass = [next(batches) for _ in range(16)]  # 250 pairs: 15 batches of 16, one of 10
        assert sum(len(b) for b in first_pass) == 250
        shares.append([tuple(row[row != 0].tolist()) for b in first_pass for row in b.src])
    encode = dm.source_vocab.encode
    tokenize = dm.source_tokenizer.tokenize
    everything = {(*encode(tokenize(s)), EOS_ID) for s in hub[1]["fr-en"]["train"]["en"]}
    assert set(shares[0]) | set(shares[1]) == everything
    dm.num_workers = 2  # one Parquet shard: the second worker has nothing to read
    batches = iter(dm.train_dataloader())
    assert all(len(next(batches)) <= 16 for _ in range(5))


def test_the_replica_declares_translation_as_the_hub_does(hub):
    folder, _ = hub
    shards = sorted(p.name for p in (folder / "fr-en").glob("train-*.parquet"))
    assert shards == [f"train-0000{k}-of-00003.parquet" for k in range(3)]
    metadata = pq.read_schema(folder / "fr-en" / shards[0]).metadata[b"huggingface"]
    assert json.loads(metadata)["info"]["features"]["translation"]["_type"] == "Translation"
    card = yaml.safe_load((folder / "README.md").read_text().split("---")[1])
    (fr_en,) = [c for c in card["dataset_info"] if c["config_name"] == "fr-en"]
    assert fr_en["features"] == [
        {"name": "translation", "dtype": {"translation": {"languages": ["fr", "en"]}}}
    ]
    loaded = datasets.load_dataset(str(folder), "fr-en", split="validation")
    assert isinstance(loaded.features["translation"], datasets.Translation)


@pytest.mark.parametrize(("source", "target"), [("en", "fr"), ("fr", "en")])
def test_streaming_reads_the_replica_in_both_directions(corpus, hub, source, target, monkeypatch):
    monkeypatch.setattr(datasets.config, "SLEEP_TIME_ON_THREADS_SHUTDOWN", 0.1)
    splits = hub[1]["fr-en"]
    streamed = corpus(source_lang=source, target_lang=target, streaming=True)
    rows = list(streamed.stream("train"))
    assert [r["source"] for r in rows] == splits["train"][source]
    assert [r["target"] for r in rows] == splits["train"][target]
    test = streamed.load("test")
    assert list(test.sources) == splits["test"][source]
    assert list(test.targets) == splits["test"][target]
    subset = corpus(source_lang=source, target_lang=target, streaming=True, train_size=7)
    assert list(subset.load("train").targets) == splits["train"][target][:7]


@pytest.mark.parametrize(("max_length", "max_tokens"), [(50, 50), (None, 400)])
def test_a_streamed_token_budget_is_checked_at_start_up(corpus, tmp_path, max_length, max_tokens):
    dm = word_datamodule(
        corpus(streaming=True),
        tmp_path / "cache",
        max_length=max_length,
        max_tokens=max_tokens,
        stream_sample_size=50,
    )
    with pytest.raises(
        ValueError,
        match=rf"data.max_tokens={max_tokens} must hold .* data.max_length={max_length} ",
    ):
        dm.setup("fit")
    fits = word_datamodule(
        corpus(streaming=True),
        tmp_path / "cache",
        max_length=50,
        max_tokens=51,
        stream_sample_size=50,
    )
    fits.setup("fit")
    assert fits.train_stream is not None


def test_the_training_path_holds_no_python_list_per_pair(corpus, tmp_path):
    """Text, tokens and ids of the training split stay in memory-mapped Arrow files: what
    keeps 40.8M pairs from costing RAM (no Python object per pair anywhere on the path)."""
    dm = word_datamodule(corpus(), tmp_path / "cache", max_length=20)
    dm.setup("fit")
    text = dm.text["train"]
    assert not isinstance(text.sources, list) and text.dataset.cache_files
    assert all(f["filename"].endswith(".arrow") for f in text.dataset.cache_files)
    pairs = dm.pairs["train"]
    assert all(values.base is not None for values in pairs.sources.values)  # views of Arrow
    assert len(pairs) < 500 and isinstance(pairs.index, np.ndarray)  # the filter, as an array
