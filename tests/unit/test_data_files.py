"""Plain-text and Multi30k corpora; bad input gets an error naming the file, or a count."""

import gzip
import logging
from pathlib import Path

import datasets
import pytest

from alignmt.config import ConfigError, instantiate
from alignmt.data import (
    DataUnavailableError,
    Multi30kCorpus,
    ParallelText,
    TextFilesCorpus,
    TranslationDataModule,
    WhitespaceTokenizer,
)
from alignmt.data.corpus import SPLITS, read_lines, read_parallel_files
from tests.conftest import compose_config

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
needs_multi30k = pytest.mark.skipif(
    not (SHARED_DATA / "multi30k").is_dir(),
    reason=f"Multi30k not found at {SHARED_DATA / 'multi30k'} (the repository's ../shared/data)",
)


def write(path: Path, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def files_corpus(tmp_path: Path, train, valid, test) -> TextFilesCorpus:
    splits = {}
    for split, (sources, targets) in (("train", train), ("valid", valid), ("test", test)):
        splits[split] = {
            "source": write(tmp_path / f"{split}.src", sources),
            "target": write(tmp_path / f"{split}.tgt", targets),
        }
    return TextFilesCorpus(**splits, source_lang="de", target_lang="en")


def test_text_files_load_per_split(tmp_path):
    corpus = files_corpus(tmp_path, (["a b", "c"], ["x", "y z"]), (["d"], ["w"]), (["e"], ["v"]))
    train = corpus.load("train")
    assert train.sources == ["a b", "c"] and train.targets == ["x", "y z"]
    assert corpus.load("test").sources == ["e"]


def test_text_files_config_must_name_source_and_target(tmp_path):
    with pytest.raises(ValueError, match=r"data.corpus.valid must name files.*\['source'\]"):
        TextFilesCorpus({"source": "a", "target": "b"}, {"source": "a"}, {"source": "a"})


def test_mismatched_line_counts_name_both_files_and_counts(tmp_path):
    source, target = write(tmp_path / "a.de", ["1", "2", "3"]), write(tmp_path / "a.en", ["1"])
    with pytest.raises(ValueError) as error:
        read_parallel_files(source, target)
    assert f"{source} has 3 lines, {target} has 1" in str(error.value)


def test_an_alignment_file_out_of_line_is_an_error(tmp_path):
    source, target = write(tmp_path / "a.de", ["1", "2"]), write(tmp_path / "a.en", ["1", "2"])
    alignment = write(tmp_path / "a.align", ["0-0"])
    with pytest.raises(ValueError, match=f"alignment file {alignment} has 1 lines"):
        read_parallel_files(source, target, alignment)


@pytest.mark.parametrize("compressed", [False, True])
def test_invalid_utf8_names_file_and_line(tmp_path, compressed):
    path = tmp_path / ("bad.de.gz" if compressed else "bad.de")
    data = "gut\nschön\n".encode() + b"kaputt \xff\n"
    path.write_bytes(gzip.compress(data) if compressed else data)
    with pytest.raises(ValueError, match=rf"{path}:3: invalid UTF-8"):
        read_lines(path)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "nope.en")):
        read_lines(tmp_path / "nope.en")


def test_empty_lines_leave_training_with_a_count_and_stay_in_test(tmp_path, caplog):
    corpus = files_corpus(
        tmp_path,
        (["a b", "", "c d", "e"], ["x y", "z", "", "w"]),
        (["a", ""], ["x", ""]),
        (["a b", "", "c"], ["x", "", "y"]),
    )
    dm = TranslationDataModule(corpus, WhitespaceTokenizer(), cache_dir=str(tmp_path / "cache"))
    with caplog.at_level(logging.INFO):
        dm.setup("fit")
    assert "dropped 2 pairs with an empty side and 0 longer than" in caplog.text
    kept = [dm.text["train"].sources[i] for i in dm.pairs["train"].index]
    assert kept == ["a b", "e"] and len(dm.pairs["train"]) == 2
    assert dm.text["test"].sources == ["a b", "", "c"] and len(dm.pairs["test"]) == 3
    batch = next(iter(dm.test_dataloader()))
    assert sorted(batch.indices.tolist()) == [0, 1, 2]


@pytest.mark.parametrize("split", ["train", "valid", "test"])
def test_an_empty_file_is_named_and_said_to_have_no_pairs(tmp_path, split):
    pairs = (["a b", "c"], ["x", "y z"])
    corpus = files_corpus(tmp_path, *([([], []) if s == split else pairs for s in SPLITS]))
    dm = TranslationDataModule(corpus, WhitespaceTokenizer(), cache_dir=str(tmp_path / "cache"))
    files = corpus.files[split]
    with pytest.raises(ValueError) as error:
        dm.setup("fit")
    assert str(error.value) == (
        f"the {split} data {files['source']} / {files['target']} has no sentence pairs"
    )


def no_rows():
    yield from ()


def test_an_empty_training_stream_is_an_error(tmp_path):
    class EmptyStream:
        path = "hub/nothing"

        def load(self, split):
            return ParallelText(["a"], ["b"], origin=split)

        def stream(self, split):
            return datasets.IterableDataset.from_generator(no_rows)

    dm = TranslationDataModule(EmptyStream(), cache_dir=str(tmp_path / "cache"))
    with pytest.raises(ValueError, match="training stream of hub/nothing has no sentence pairs"):
        dm.setup("fit")


def test_training_pairs_longer_than_max_length_are_dropped_and_test_is_untouched(tmp_path):
    long = " ".join(["w"] * 6)
    corpus = files_corpus(
        tmp_path, (["a", long, "b"], ["x", "y", long]), (["a"], ["x"]), ([long], [long])
    )
    dm = TranslationDataModule(corpus, max_length=5, cache_dir=str(tmp_path / "cache"))
    dm.setup("fit")
    assert len(dm.pairs["train"]) == 1 and len(dm.pairs["test"]) == 1
    assert len(dm.pairs["test"][0][1]) == 7  # six words and [EOS], not cut


@needs_multi30k
def test_multi30k_reads_the_raw_release_in_any_direction():
    corpus = Multi30kCorpus(str(SHARED_DATA / "multi30k"), source_lang="en", target_lang="fr")
    corpus.prepare()
    sizes = {split: len(corpus.load(split)) for split in ("train", "valid", "test")}
    assert sizes == {"train": 29000, "valid": 1014, "test": 1000}
    test = corpus.load("test")
    assert test.sources[0] == read_lines(SHARED_DATA / "multi30k" / "test_2016_flickr.en.gz")[0]
    assert test.targets[0] == read_lines(SHARED_DATA / "multi30k" / "test_2016_flickr.fr.gz")[0]


@needs_multi30k
def test_multi30k_names_the_languages_it_has():
    corpus = Multi30kCorpus(str(SHARED_DATA / "multi30k"), source_lang="cs", target_lang="en")
    with pytest.raises(
        ValueError, match=r"no language 'cs' \(data.corpus.source_lang\); available: de, en, fr"
    ):
        corpus.load("train")


def test_multi30k_without_its_folder_says_where_it_looked(tmp_path):
    corpus = Multi30kCorpus(str(tmp_path / "multi30k"))
    with pytest.raises(
        DataUnavailableError, match=rf"no folder {tmp_path / 'multi30k'}.*path=null"
    ):
        corpus.load("valid")


def text_files_overrides(corpus: TextFilesCorpus) -> list[str]:
    return [
        f"data.corpus.{split}.{side}={path}"
        for split, files in corpus.files.items()
        for side, path in files.items()
    ]


def test_the_text_files_config_composes_with_word_or_whitespace_tokens(tmp_path):
    corpus = files_corpus(
        tmp_path, (["Hallo, Welt!"], ["Hello, world!"]), (["a"], ["b"]), (["c"], ["d"])
    )
    base = [
        "data=text_files",
        f"data.cache_dir={tmp_path / 'cache'}",
        *text_files_overrides(corpus),
    ]
    with pytest.raises(ConfigError, match=r"data\.corpus\.source_lang"):
        instantiate(compose_config("train", base).data)
    word = instantiate(
        compose_config(
            "train", [*base, "data.corpus.source_lang=de", "data.corpus.target_lang=en"]
        ).data
    )
    word.setup("fit")
    assert word.source_vocab.itos[4:] == ["Hallo", ",", "Welt", "!"]
    spaces = instantiate(compose_config("train", [*base, "data/tokenizer=whitespace"]).data)
    spaces.setup("fit")
    assert spaces.source_vocab.itos[4:] == ["Hallo,", "Welt!"]


def test_gold_alignments_of_a_filtered_training_split_are_each_pairs_own(tmp_path):
    """Pairs dropped by the length filter shift the positions of those after them: each
    batch row must still carry the links of its own pair."""
    train = {
        "a b": ("x y", "0-1 1-0"),
        "c d e": ("", "0-0"),  # dropped: empty target
        "f g h i j k": ("u", "0-0"),  # dropped: longer than max_length=4
        "l m n": ("v w t", "0-0 1-2 2-1"),
        "o": ("q r", "0-1"),
    }
    splits = {"valid": (["a"], ["x"]), "test": (["a"], ["x"])}
    files = {}
    for split, rows in (("train", train), *splits.items()):
        sources = list(rows) if split == "train" else rows[0]
        targets = [train[s][0] for s in sources] if split == "train" else rows[1]
        files[split] = {
            "source": write(tmp_path / f"{split}.src", sources),
            "target": write(tmp_path / f"{split}.tgt", targets),
        }
    files["train"]["alignment"] = write(tmp_path / "train.align", [g for _, g in train.values()])
    corpus = TextFilesCorpus(**files, source_lang="de", target_lang="en")
    dm = TranslationDataModule(
        corpus, WhitespaceTokenizer(), max_length=4, batch_size=8, cache_dir=str(tmp_path / "c")
    )
    dm.setup("fit")
    dm.carry_gold_alignments()
    batch = next(iter(dm.train_dataloader()))
    assert len(batch) == 3
    for row in range(3):
        words = dm.source_vocab.decode(batch.src[row, : int(batch.src_lengths[row]) - 1].tolist())
        sentence = " ".join(words)
        expected = {tuple(map(int, link.split("-"))) for link in train[sentence][1].split()}
        links = {(s, t) for t, s in batch.alignment[row].nonzero().tolist()}
        assert links == expected, sentence
