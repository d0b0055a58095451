"""Every paper config runs its data stage on a faithful replica of wmt/wmt14, downloaded and
streamed, in both directions, with the papers' development and test sets."""

from pathlib import Path

import datasets
import pytest

from alignmt.config import CONF_DIR, instantiate
from alignmt.data.batching import Batch
from alignmt.data.corpus import read_lines
from alignmt.data.replica import write_hub_replica
from tests.conftest import compose_config

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
pytestmark = pytest.mark.skipif(
    not (SHARED_DATA / "multi30k").is_dir(),
    reason=f"Multi30k not found at {SHARED_DATA / 'multi30k'} (the repository's ../shared/data)",
)
EXPERIMENTS = CONF_DIR / "experiment"
PAPER_CONFIGS = [
    f"{paper}/{path.stem}"
    for paper in ("bahdanau2015", "luong2015")
    for path in sorted((EXPERIMENTS / paper).glob("*.yaml"))
]
PAIRS = {"bahdanau2015": ("en", "fr"), "luong2015": ("en", "de")}


def lines(split: str, lang: str, start: int, n: int) -> list[str]:
    return read_lines(SHARED_DATA / "multi30k" / f"{split}.{lang}.gz")[start : start + n]


def side(lang: str, start: int, n: int, split: str = "train") -> dict[str, list[str]]:
    return {lang: lines(split, lang, start, n), "en": lines(split, "en", start, n)}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The replica (fr-en, de-en), and the test sets the hub lacks as sacrebleu writes them."""
    root = tmp_path_factory.mktemp("papers")
    pairs = {
        f"{lang}-en": {
            "train": side(lang, 0, 120),
            "validation": side(lang, 0, 20, "val"),  # newstest2013
            "test": side(lang, 0, 15, "test_2016_flickr"),  # newstest2014, in full
        }
        for lang in ("fr", "de")
    }
    write_hub_replica(root / "wmt14", pairs, train_shards=3)
    testsets = root / "testsets"
    testsets.mkdir()
    files = {
        "newstest2012": side("fr", 20, 12, "val"),
        "newstest2014-filtered": side("de", 15, 9, "test_2016_flickr"),
    }
    for name, by_lang in files.items():
        for lang, text in by_lang.items():
            (testsets / f"{name}.{lang}").write_text("".join(f"{line}\n" for line in text))
    return root, pairs, files


def expected_splits(paper: str, pairs: dict, files: dict, source: str, target: str) -> dict:
    """The papers' choices: Bahdanau et al. validate on newstest2012 + 2013 and test on the
    full newstest2014; Luong et al. validate on newstest2013 and test on the filtered 2014."""
    pair = f"{PAIRS[paper][1]}-en"
    hub = pairs[pair]
    if paper == "bahdanau2015":
        valid = {
            lang: files["newstest2012"][lang] + hub["validation"][lang] for lang in ("en", "fr")
        }
        test = hub["test"]
    else:
        valid, test = hub["validation"], files["newstest2014-filtered"]
    return {
        split: ([*by_lang[source]], [*by_lang[target]])
        for split, by_lang in (("valid", valid), ("test", test))
    }


@pytest.mark.parametrize("streaming", [False, True], ids=["download", "streaming"])
@pytest.mark.parametrize("reverse", [False, True], ids=["paper-direction", "reversed"])
@pytest.mark.parametrize("experiment", PAPER_CONFIGS)
def test_the_data_stage_of_every_paper_config(
    data, tmp_path, monkeypatch, experiment, reverse, streaming
):
    monkeypatch.setattr(datasets.config, "SLEEP_TIME_ON_THREADS_SHUTDOWN", 0.1)
    root, pairs, files = data
    paper = experiment.split("/")[0]
    source, target = PAIRS[paper][::-1] if reverse else PAIRS[paper]
    cfg = compose_config(
        "train",
        [
            f"experiment={experiment}",
            f"data.corpus.path={root / 'wmt14'}",
            f"data.corpus.cache_dir={root / 'hf'}",
            f"data.cache_dir={root / 'cache'}",
            f"testsets_dir={root / 'testsets'}",
            f"data.corpus.source_lang={source}",
            f"data.corpus.target_lang={target}",
            f"data.corpus.streaming={streaming}",
            "data.source_vocab_size=300",
            "data.target_vocab_size=300",
            "data.stream_sample_size=60",
        ],
    )
    dm = instantiate(cfg.data, seed=cfg.seed)
    dm.prepare_data()
    dm.setup("fit")
    for split, (sources, targets) in expected_splits(paper, pairs, files, source, target).items():
        assert dm.text[split].sources == sources, split
        assert dm.text[split].targets == targets, split
        assert len(dm.pairs[split]) == len(sources)
    assert (dm.train_stream is not None) == streaming
    batch = next(iter(dm.train_dataloader()))
    assert isinstance(batch, Batch) and 0 < len(batch) <= cfg.data.batch_size
    assert batch.src.size(1) <= cfg.data.max_length + 1


def test_a_missing_paper_test_set_says_which_file_and_how_to_get_it(data, tmp_path):
    root, _, _ = data
    cfg = compose_config(
        "train",
        [
            "experiment=bahdanau2015/rnnsearch50",
            f"data.corpus.path={root / 'wmt14'}",
            f"data.corpus.cache_dir={root / 'hf'}",
            f"data.cache_dir={tmp_path / 'cache'}",
            f"testsets_dir={tmp_path / 'nothing'}",
        ],
    )
    dm = instantiate(cfg.data, seed=cfg.seed)
    with pytest.raises(
        Exception,
        match=r"splits.valid\[0\]: no file .*newstest2012.en.*sacrebleu -t wmt12 -l en-fr",
    ):
        dm.prepare_data()
