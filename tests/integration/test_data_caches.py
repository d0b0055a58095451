"""A process killed (SIGKILL) while it fills a cache leaves nothing the next run takes for
complete: the next run rebuilds the cache and gets what a run never interrupted gets."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from alignmt.data import ToyCorpus, TranslationDataModule
from alignmt.data.toy import prepare_toy_corpus

TOY = {"seed": 3, "train_size": 3000, "valid_per_bucket": 2, "test_per_bucket": 2}

KILL_ON_CALL = """
import os, signal, sys
from {module} import {owner} as owner
original, calls = owner.{method}, [0]

def killed_on_call(*args, **kwargs):
    calls[0] += 1
    if calls[0] == {call}:
        os.kill(os.getpid(), signal.SIGKILL)
    return original(*args, **kwargs)

owner.{method} = killed_on_call
"""


def run_killed(patch: dict, work: str) -> None:
    """Runs `work` in a fresh interpreter that SIGKILLs itself on a given call of a method."""
    script = KILL_ON_CALL.format(**patch) + textwrap.dedent(work)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL, done.stderr


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_a_corpus_killed_while_written_is_written_again_in_full(tmp_path):
    write = {"module": "pathlib", "owner": "Path", "method": "write_text", "call": 5}
    run_killed(
        write,
        f"""
        from alignmt.data.toy import prepare_toy_corpus
        prepare_toy_corpus({str(tmp_path / "killed")!r}, **{TOY!r})
    """,
    )
    left = [p for p in (tmp_path / "killed").iterdir()]
    assert left and not any((p / "manifest.json").exists() for p in left)  # four files written
    rebuilt = prepare_toy_corpus(tmp_path / "killed", **TOY)
    assert files(rebuilt) == files(prepare_toy_corpus(tmp_path / "clean", **TOY))


def test_an_incomplete_corpus_directory_is_replaced(tmp_path):
    clean = prepare_toy_corpus(tmp_path / "clean", **TOY)
    broken = tmp_path / "broken" / clean.name
    broken.mkdir(parents=True)
    (broken / "train.src").write_bytes((clean / "train.src").read_bytes()[:100])
    assert prepare_toy_corpus(tmp_path / "broken", **TOY) == broken
    assert files(broken) == files(clean)
    assert [p.name for p in broken.parent.iterdir()] == [broken.name]


@pytest.fixture(scope="module")
def toy_cache(tmp_path_factory) -> Path:
    cache = tmp_path_factory.mktemp("toy")
    prepare_toy_corpus(cache, **TOY)
    return cache


def setup(toy_cache: Path, cache_dir: Path) -> TranslationDataModule:
    dm = TranslationDataModule(
        ToyCorpus(str(toy_cache), **TOY), max_length=None, cache_dir=str(cache_dir)
    )
    dm.setup("fit")
    return dm


@pytest.mark.parametrize(
    ("step", "patch"),
    [
        # the tokeniser runs twice per pair: killed in the third batch of the training split
        ("tokenized", ("alignmt.data.tokenizers", "WhitespaceTokenizer", "tokenize", 4500)),
        # Arrow encodes a batch of 1,000 pairs, one call per side: killed in the third batch
        ("encoded", ("alignmt.data", "encoding", "_ids", 5)),
    ],
)
def test_a_map_killed_midway_is_rebuilt_and_gives_what_a_clean_run_gives(
    toy_cache, tmp_path, step, patch
):
    module, owner, method, call = patch
    run_killed(
        {"module": module, "owner": owner, "method": method, "call": call},
        f"""
        from alignmt.data import ToyCorpus, TranslationDataModule, encoding
        encoding.RECORD_BATCH_ROWS = 1000  # so that a batch is written before the kill
        corpus = ToyCorpus({str(toy_cache)!r}, **{TOY!r})
        cache = {str(tmp_path / "killed")!r}
        TranslationDataModule(corpus, max_length=None, cache_dir=cache).setup("fit")
        """,
    )
    partial = [p for p in (tmp_path / "killed" / step).iterdir() if p.suffix != ".arrow"]
    assert partial and all(p.stat().st_size for p in partial)  # rows of the killed map
    assert not list((tmp_path / "killed" / step).glob("*.arrow"))
    again, clean = setup(toy_cache, tmp_path / "killed"), setup(toy_cache, tmp_path / "clean")
    assert again.source_vocab == clean.source_vocab and again.target_vocab == clean.target_vocab
    for split in ("train", "valid", "test"):
        a, b = again.pairs[split], clean.pairs[split]
        assert len(a) == len(b) == len(clean.text[split])
        for i in range(len(b)):
            assert a[i][1].tolist() == b[i][1].tolist() and a[i][2].tolist() == b[i][2].tolist()
