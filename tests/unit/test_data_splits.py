"""Splits made of several sources (hub splits and local files) and published selections."""

import gzip

import datasets
import pytest

from alignmt.data import DataUnavailableError, HubCorpus
from alignmt.data.replica import write_hub_replica

LANGS = ("fr", "en")


def sentences(split: str, n: int) -> dict[str, list[str]]:
    return {lang: [f"{lang} {split} sentence {i}" for i in range(n)] for lang in LANGS}


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hub") / "wmt14"
    splits = {"train": sentences("train", 30), "validation": sentences("nt13", 5)}
    splits["test"] = sentences("nt14", 4)
    write_hub_replica(folder, {"fr-en": splits}, train_shards=3)
    return folder, splits


@pytest.fixture(scope="module")
def newstest2012(tmp_path_factory):
    """newstest2012 as sacrebleu echoes it: one plain file per language (here gzipped)."""
    folder = tmp_path_factory.mktemp("testsets")
    for lang, lines in sentences("nt12", 6).items():
        with gzip.open(folder / f"newstest2012.{lang}.gz", "wt", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
    return folder


def corpus(hub, tmp_path, **kwargs) -> HubCorpus:
    options = dict(path=str(hub[0]), name="fr-en", cache_dir=str(tmp_path / "hf"))
    return HubCorpus(**{**options, **kwargs})


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize(("source", "target"), [("en", "fr"), ("fr", "en")])
def test_a_development_set_of_local_files_and_a_hub_split(
    hub, newstest2012, tmp_path, source, target, streaming
):
    valid = [{"path": str(newstest2012 / "newstest2012.{lang}.gz")}, "validation"]
    text = corpus(
        hub,
        tmp_path,
        source_lang=source,
        target_lang=target,
        streaming=streaming,
        splits={"valid": valid},
    ).load("valid")
    nt12, nt13 = sentences("nt12", 6), hub[1]["validation"]
    assert list(text.sources) == nt12[source] + nt13[source]
    assert list(text.targets) == nt12[target] + nt13[target]
    assert "newstest2012" in text.origin and "validation" in text.origin


def test_files_named_outright_and_several_hub_splits(hub, newstest2012, tmp_path):
    files = {
        "source": str(newstest2012 / "newstest2012.en.gz"),
        "target": str(newstest2012 / "newstest2012.fr.gz"),
    }
    test = corpus(hub, tmp_path, splits={"test": ["test", files, "validation"]}).load("test")
    expected = hub[1]["test"]["fr"] + sentences("nt12", 6)["fr"] + hub[1]["validation"]["fr"]
    assert list(test.targets) == expected


def test_a_missing_file_is_named_with_its_key_and_where_to_get_it(hub, tmp_path):
    valid = ["validation", {"path": str(tmp_path / "newstest2012.{lang}")}]
    with pytest.raises(DataUnavailableError) as error:
        corpus(hub, tmp_path, splits={"valid": valid}).load("valid")
    message = str(error.value)
    for part in ("data.corpus.splits.valid[1]", str(tmp_path / "newstest2012.en"), "sacrebleu"):
        assert part in message, part


def test_files_of_different_lengths_are_an_error(hub, tmp_path):
    (tmp_path / "a.en").write_text("one\ntwo\nthree\n")
    (tmp_path / "a.fr").write_text("un\ndeux\n")
    spec = {"path": str(tmp_path / "a.{lang}")}
    with pytest.raises(ValueError, match=r"a.fr has 2 lines, .*a.en has more"):
        corpus(hub, tmp_path, splits={"test": spec}).load("test")


def test_a_changed_file_is_read_again(hub, tmp_path):
    spec = {"path": str(tmp_path / "b.{lang}")}
    for lang in LANGS:
        (tmp_path / f"b.{lang}").write_text(f"{lang} first\n")
    assert list(corpus(hub, tmp_path, splits={"test": spec}).load("test").sources) == ["en first"]
    for lang in LANGS:
        (tmp_path / f"b.{lang}").write_text(f"{lang} second, longer\n")
    assert list(corpus(hub, tmp_path, splits={"test": spec}).load("test").sources) == [
        "en second, longer"
    ]


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ({"path": "no-placeholder.txt"}, r"splits.valid.path must contain \{lang\}"),
        ({"source": "a"}, r"splits.valid: a file source is"),
        ([], r"splits.valid is empty"),
    ],
)
def test_malformed_sources_name_their_key(hub, tmp_path, spec, match):
    with pytest.raises(ValueError, match=match):
        corpus(hub, tmp_path, splits={"valid": spec})


def test_a_training_split_of_files_the_published_selection_as_files(hub, tmp_path):
    for name, n in (("ep7", 3), ("nc9", 2)):
        for lang in LANGS:
            (tmp_path / f"{name}.{lang}").write_text(
                "".join(f"{name} {lang} {i}\n" for i in range(n))
            )
    train = [{"path": str(tmp_path / f"{name}.{{lang}}")} for name in ("ep7", "nc9")]
    text = corpus(hub, tmp_path, splits={"train": train}).load("train")
    assert list(text.targets) == ["ep7 fr 0", "ep7 fr 1", "ep7 fr 2", "nc9 fr 0", "nc9 fr 1"]
    with pytest.raises(ValueError, match=r"streamed training .* reads one hub split"):
        corpus(hub, tmp_path, splits={"train": train}, streaming=True)


def test_a_selection_of_line_ids_keeps_those_pairs_in_its_order(hub, tmp_path):
    ids = [29, 0, 7, 7, 15]
    (tmp_path / "selected.txt").write_text("\n".join(map(str, ids)) + "\n\n")
    english = hub[1]["train"]["en"]
    text = corpus(hub, tmp_path, selection=str(tmp_path / "selected.txt")).load("train")
    assert list(text.sources) == [english[i] for i in ids]
    cut = corpus(hub, tmp_path, selection=str(tmp_path / "selected.txt"), train_size=2)
    assert list(cut.load("train").sources) == [english[29], english[0]]
    assert len(corpus(hub, tmp_path, selection=str(tmp_path / "selected.txt")).load("test")) == 4


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("1\n2\nthree\n", r"selected.txt:3: expected a line id"),
        ("1\n30\n", r"selected.txt:2: line id 30 is outside the training split \(30 pairs"),
        ("\n\n", r"selects no lines"),
    ],
)
def test_a_bad_selection_names_the_file_and_line(hub, tmp_path, content, match):
    (tmp_path / "selected.txt").write_text(content)
    with pytest.raises(ValueError, match=match):
        corpus(hub, tmp_path, selection=str(tmp_path / "selected.txt")).load("train")


def test_a_selection_needs_the_downloaded_split(hub, tmp_path):
    with pytest.raises(ValueError, match=r"selection.*streaming=false"):
        corpus(hub, tmp_path, selection="ids.txt", streaming=True)


def test_concatenated_text_stays_memory_mapped(hub, newstest2012, tmp_path):
    valid = [{"path": str(newstest2012 / "newstest2012.{lang}.gz")}, "validation"]
    text = corpus(hub, tmp_path, splits={"valid": valid}).load("valid")
    assert isinstance(text.dataset, datasets.Dataset)
    assert all(f["filename"].endswith(".arrow") for f in text.dataset.cache_files)
    assert len(text.dataset.cache_files) == 2  # nothing copied into memory
