"""The datamodule's batches on real sentences: token budgets, seeds, DDP shares, workers."""

from pathlib import Path

import numpy as np
import pytest
from lightning_fabric.utilities.data import _set_sampler_epoch

from alignmt.data import MosesTokenizer, TextFilesCorpus, TranslationDataModule
from alignmt.data.batching import EncodedPairs
from alignmt.data.corpus import read_lines

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
pytestmark = pytest.mark.skipif(
    not (SHARED_DATA / "multi30k").is_dir(),
    reason=f"Multi30k not found at {SHARED_DATA / 'multi30k'} (the repository's ../shared/data)",
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """1,500 training and 100 test pairs of Multi30k de-en, as plain text files."""
    folder = tmp_path_factory.mktemp("text")
    splits = {}
    for split, stem, n in (("train", "train", 1500), ("valid", "val", 100), ("test", "val", 100)):
        splits[split] = {}
        for side, lang in (("source", "de"), ("target", "en")):
            lines = read_lines(SHARED_DATA / "multi30k" / f"{stem}.{lang}.gz")[:n]
            path = folder / f"{split}.{lang}"
            path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
            splits[split][side] = str(path)
    return TextFilesCorpus(**splits, source_lang="de", target_lang="en")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def datamodule(corpus, cache_dir, **kwargs) -> TranslationDataModule:
    dm = TranslationDataModule(
        corpus, MosesTokenizer("de"), MosesTokenizer("en"), cache_dir=str(cache_dir), **kwargs
    )
    dm.setup("fit")
    return dm


def indices(loader) -> list[list[int]]:
    return [batch.indices.tolist() for batch in loader]


def test_token_budget_batches_group_similar_lengths_within_the_budget(corpus, cache_dir):
    dm = datamodule(corpus, cache_dir, max_tokens=300, seed=1)
    lengths = dm.pairs["train"].lengths()
    batches = list(dm.train_dataloader())
    assert sorted(i for b in batches for i in b.indices.tolist()) == list(range(1500))
    for batch in batches:
        assert batch.src.numel() <= 300 and batch.tgt_in.numel() <= 300
    spread = np.mean([np.ptp(lengths[b.indices.numpy()]) for b in batches])
    assert spread < 2 and np.mean([len(b) for b in batches]) > 10


def test_batches_are_seeded_and_reshuffled_each_epoch(corpus, cache_dir):
    a = datamodule(corpus, cache_dir, batch_size=32, seed=7).train_dataloader()
    b = datamodule(corpus, cache_dir, batch_size=32, seed=7).train_dataloader()
    assert indices(a) == indices(b)
    _set_sampler_epoch(b, 1)  # what Lightning's fit loop calls at each epoch
    assert indices(a) != indices(b)
    c = datamodule(corpus, cache_dir, batch_size=32, seed=8).train_dataloader()
    assert indices(a) != indices(c)


def test_ddp_ranks_get_distinct_equal_shares(corpus, cache_dir, monkeypatch):
    shares = []
    for rank in (0, 1):
        dm = datamodule(corpus, cache_dir, batch_size=32, seed=3)
        monkeypatch.setattr(dm, "_world", lambda rank=rank: (2, rank))
        shares.append(indices(dm.train_dataloader()))
    assert len(shares[0]) == len(shares[1])
    seen = [{i for batch in share for i in batch} for share in shares]
    assert not seen[0] & seen[1] and len(seen[0] | seen[1]) > 1400


def test_worker_processes_load_the_same_batches(corpus, cache_dir):
    serial = datamodule(corpus, cache_dir, batch_size=64, seed=2)
    parallel = datamodule(corpus, cache_dir, batch_size=64, seed=2, num_workers=2)
    for a, b in zip(serial.train_dataloader(), parallel.train_dataloader(), strict=True):
        assert a.indices.tolist() == b.indices.tolist()
        assert a.src.tolist() == b.src.tolist() and a.tgt_out.tolist() == b.tgt_out.tolist()


def test_arrow_backed_pairs_match_the_encoded_lists(corpus, cache_dir):
    dm = datamodule(corpus, cache_dir)
    pairs = dm.pairs["valid"]
    sources = [
        dm.source_vocab.encode(dm.source_tokenizer.tokenize(s)) for s in dm.text["valid"].sources
    ]
    targets = [
        dm.target_vocab.encode(dm.target_tokenizer.tokenize(t)) for t in dm.text["valid"].targets
    ]
    from_lists = EncodedPairs(sources, targets)
    for i in range(len(pairs)):
        assert pairs[i][1].tolist() == from_lists[i][1].tolist()
        assert pairs[i][2].tolist() == from_lists[i][2].tolist()
    assert pairs.lengths().tolist() == from_lists.lengths().tolist()
