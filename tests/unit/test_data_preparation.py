"""Data preparation: parallel, batched, on one process per cache entry, reproducible."""

import hashlib
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import datasets
import pytest

from alignmt.data import (
    MosesTokenizer,
    ParallelText,
    SentencePieceTokenizer,
    TranslationDataModule,
    Vocabulary,
)
from alignmt.data import encoding as encoding_module
from alignmt.data.corpus import read_lines
from alignmt.special_tokens import UNK_ID

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
pytestmark = pytest.mark.skipif(
    not (SHARED_DATA / "multi30k").is_dir(),
    reason=f"Multi30k not found at {SHARED_DATA / 'multi30k'} (the repository's ../shared/data)",
)


def multi30k(lang: str, n: int, split: str = "train") -> list[str]:
    return read_lines(SHARED_DATA / "multi30k" / f"{split}.{lang}.gz")[:n]


class Captions:
    """Multi30k en->de as a corpus: `n` training pairs, 50 for validation and test."""

    source_lang, target_lang = "en", "de"

    def __init__(self, n: int = 3000):
        self.n = n

    def load(self, split: str) -> ParallelText:
        stem, n = {"train": ("train", self.n), "valid": ("val", 50), "test": ("val", 50)}[split]
        return ParallelText(multi30k("en", n, stem), multi30k("de", n, stem), origin=split)


def test_arrow_encoding_is_the_vocabulary_lookup(tmp_path):
    tokens = [["a", "b", "zzz"], [], ["c", "a", "[UNK]", "b"], ["unseen"]] * 700
    vocab = Vocabulary.build([["a", "a", "b", "c"]])
    text = datasets.Dataset.from_dict({"source_tokens": tokens, "target_tokens": tokens[::-1]})
    encoded = encoding_module.encode(text, "k", vocab, vocab, tmp_path, num_proc=2)
    assert encoded["source_ids"] == [vocab.encode(t) for t in tokens]
    assert encoded["target_ids"] == [vocab.encode(t) for t in tokens[::-1]]
    assert encoded["source_ids"][3] == [UNK_ID]


def moses_module(cache: Path, **kwargs) -> TranslationDataModule:
    return TranslationDataModule(
        Captions(),
        MosesTokenizer("en"),
        MosesTokenizer("de"),
        source_vocab_size=2000,
        target_vocab_size=2000,
        cache_dir=str(cache),
        **kwargs,
    )


def ids(dm: TranslationDataModule, split: str) -> list:
    pairs = dm.pairs[split]
    return [(pairs[i][1].tolist(), pairs[i][2].tolist()) for i in range(len(pairs))]


def test_parallel_preparation_gives_what_one_process_gives_and_any_count_reads_it(
    tmp_path, monkeypatch
):
    one = moses_module(tmp_path / "one", num_proc=1)
    one.setup("fit")
    two = moses_module(tmp_path / "two", num_proc=2)
    two.setup("fit")
    assert two.source_vocab == one.source_vocab and two.target_vocab == one.target_vocab
    for split in ("train", "valid", "test"):
        assert ids(two, split) == ids(one, split)
    (manifest,) = [
        p
        for p in (tmp_path / "two" / "tokenized").glob("*.json")
        if json.loads(p.read_text())["rows"] == 3000
    ]
    assert len(json.loads(manifest.read_text())["files"]) == 2  # one file per process

    def untouched(self, texts):
        raise AssertionError("tokenised again")

    monkeypatch.setattr(MosesTokenizer, "tokenize_batch", untouched)
    again = moses_module(tmp_path / "two", num_proc=1)  # another count reads the same entry
    again.setup("fit")
    assert ids(again, "train") == ids(one, "train")


def test_num_proc_defaults_to_every_core_for_large_splits(monkeypatch):
    monkeypatch.setattr(encoding_module, "cpu_count", lambda: 16)
    assert encoding_module.processes(40_800_000, None) == 16
    assert encoding_module.processes(3_003, None) == 1  # a test set: not worth a pool
    assert encoding_module.processes(3_003, 4) == 4
    assert encoding_module.processes(3, 8) == 3


def test_batched_sentencepiece_is_sentence_by_sentence(tmp_path):
    tokenizer = SentencePieceTokenizer("unigram", vocab_size=500)
    tokenizer.fit(multi30k("de", 2000), tmp_path / "sp" / "de.model")
    lines = multi30k("de", 300, "val")
    assert tokenizer.tokenize_batch(lines) == [tokenizer.tokenize(s) for s in lines]


def sentencepiece_module(cache: Path, seed: int) -> TranslationDataModule:
    # 6,000 sentences for a model that trains on 1,000: a sample, drawn with the seed
    tokenizer = SentencePieceTokenizer("bpe", vocab_size=400, input_sentence_size=1000)
    return TranslationDataModule(Captions(), tokenizer, cache_dir=str(cache), seed=seed)


def model_bytes(cache: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted((cache / "sentencepiece").glob("*.model"))]


def test_two_fresh_caches_with_one_seed_give_byte_identical_models(tmp_path):
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        sentencepiece_module(tmp_path / name, seed).setup("fit")
    (a,), (b,), (c,) = (model_bytes(tmp_path / name) for name in "abc")
    assert a == b
    assert a != c  # the seed draws the sample


CONCURRENT = """
import hashlib, json, sys, time
import sentencepiece
from alignmt.data import SentencePieceTokenizer, TranslationDataModule
from tests.unit.test_data_preparation import Captions

trainings = []
train = sentencepiece.SentencePieceTrainer.train
def counted(*args, **kwargs):
    trainings.append(1)
    return train(*args, **kwargs)
sentencepiece.SentencePieceTrainer.train = counted

tokenizer = SentencePieceTokenizer("bpe", vocab_size=400, input_sentence_size=1000)
dm = TranslationDataModule(Captions(), tokenizer, cache_dir=sys.argv[2], seed=5)
time.sleep(max(0.0, float(sys.argv[1]) - time.time()))  # all three start here together
dm.prepare_data()
model = hashlib.sha256(tokenizer.state_dict()["model"]).hexdigest()
print(json.dumps({"trainings": len(trainings), "model": model, "train": len(dm.pairs["train"])}))
"""


def test_concurrent_cold_starts_train_one_model_that_all_use(tmp_path):
    cache = tmp_path / "cache"
    start = str(time.time() + 8)  # after every interpreter has imported what it needs
    root = Path(__file__).resolve().parents[2]
    env = {"PYTHONPATH": f"{root / 'src'}:{root}", "PATH": "/usr/bin:/bin"}
    script = textwrap.dedent(CONCURRENT)
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", script, start, str(cache)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=root,
        )
        for _ in range(3)
    ]
    results = []
    for run in runs:
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sum(r["trainings"] for r in results) == 1
    assert len({r["model"] for r in results}) == 1
    assert len({r["train"] for r in results}) == 1
    (saved,) = model_bytes(cache)
    assert hashlib.sha256(saved).hexdigest() == results[0]["model"]
    # and a fresh cache with the same seed, in this process, gives the very same model
    sentencepiece_module(tmp_path / "fresh", seed=5).setup("fit")
    assert model_bytes(tmp_path / "fresh") == [saved]
