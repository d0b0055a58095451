"""Several reference files for a test set: from the config, through the data module, to the
text the test metrics read; files out of line are errors naming them."""

import pytest

from alignmt.config import instantiate
from alignmt.data import TextFilesCorpus
from tests.conftest import compose_config


def write(path, lines) -> str:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def text_files_config(tmp_path, cache_dir, test_targets: str):
    train = write(tmp_path / "train.src", ["a b", "b c", "c a"])
    train_tgt = write(tmp_path / "train.tgt", ["x y", "y z", "z x"])
    test = write(tmp_path / "test.src", ["a c", "b"])
    return compose_config(
        "train",
        [
            "data=text_files",
            "data/tokenizer=whitespace",
            f"data.cache_dir={cache_dir}",
            f"data.corpus.train.source={train}",
            f"data.corpus.train.target={train_tgt}",
            f"data.corpus.valid.source={test}",
            f"data.corpus.valid.target={write(tmp_path / 'valid.tgt', ['x z', 'y'])}",
            f"data.corpus.test.source={test}",
            f"data.corpus.test.target={test_targets}",
        ],
    )


def test_every_reference_file_reaches_the_test_text(tmp_path, cache_dir):
    first = write(tmp_path / "test.ref1", ["x z", "y"])
    second = write(tmp_path / "test.ref2", ["z x", "y y"])
    cfg = text_files_config(tmp_path, cache_dir, f"[{first},{second}]")
    datamodule = instantiate(cfg.data, seed=1)
    datamodule.prepare_data()
    datamodule.setup("fit")
    text = datamodule.text["test"]
    assert list(text.targets) == ["x z", "y"]  # what perplexity and alignments read
    assert [list(r) for r in text.extra_references] == [["z x", "y y"]]
    assert text.select([1]).extra_references == [["y y"]]
    assert datamodule.text["valid"].extra_references == []


def test_a_reference_file_out_of_line_is_named(tmp_path, cache_dir):
    first = write(tmp_path / "test.ref1", ["x z", "y"])
    short = write(tmp_path / "test.ref2", ["z x"])
    corpus = instantiate(text_files_config(tmp_path, cache_dir, f"[{first},{short}]").data.corpus)
    with pytest.raises(ValueError, match=f"test.src has 2 lines, {short} has 1"):
        corpus.load("test")


def test_training_reads_one_target_file(tmp_path):
    files = {"source": "a", "target": "b"}
    with pytest.raises(ValueError, match=r"data\.corpus\.train\.target names 2 files"):
        TextFilesCorpus({"source": "a", "target": ["b", "c"]}, files, files)
