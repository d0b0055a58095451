"""Multi30k (Elliott et al. 2016): 29,000 image captions in English, German and French.

The usual small benchmark of attention RNN tutorials and toolkits (de->en, en->de, en->fr),
read from a local copy of the raw files (`path=`) or from the hub copy when online.
"""

from __future__ import annotations

import re
from pathlib import Path

from alignmt.data.corpus import SPLITS, DataUnavailableError, ParallelText, read_parallel_files
from alignmt.data.hub import HubCorpus

# File stems of the raw release (multi30k/dataset, data/task1/raw), per split.
FILE_STEMS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
HUB_COPY = "bentrevett/multi30k"  # English and German only


class Multi30kCorpus:
    """Multi30k task 1 in any direction among its languages.

    With `path`, reads `{train,val,test_2016_flickr}.<lang>[.gz]` from that folder (the raw
    release; `test_set` may name another, e.g. `test_2017_flickr`); without, reads
    `hub_path` through `datasets` (that copy has English and German only).
    """

    def __init__(
        self,
        path: str | None = None,
        source_lang: str = "de",
        target_lang: str = "en",
        test_set: str = FILE_STEMS["test"],
        hub_path: str = HUB_COPY,
        cache_dir: str | None = None,
    ):
        if source_lang == target_lang:
            raise ValueError(f"source and target language are both {source_lang!r}")
        self.path = Path(path).expanduser() if path else None
        self.source_lang = source_lang
        self.target_lang = target_lang
        self.stems = {**FILE_STEMS, "test": test_set}
        self.hub = (
            None
            if self.path
            else HubCorpus(hub_path, None, source_lang, target_lang, cache_dir=cache_dir)
        )

    def _file(self, split: str, lang: str) -> Path:
        stem = self.path / f"{self.stems[split]}.{lang}"
        compressed = stem.with_name(stem.name + ".gz")
        return compressed if compressed.is_file() or not stem.is_file() else stem

    def _check_local(self) -> None:
        if not self.path.is_dir():
            raise DataUnavailableError(
                f"Multi30k: no folder {self.path} (data.corpus.path). It should hold the raw "
                "release: train.<lang>.gz, val.<lang>.gz, test_2016_flickr.<lang>.gz; or set "
                "data.corpus.path=null to read the hub copy (en, de) when online"
            )
        names = (p.name for p in self.path.iterdir())
        available = sorted({m[1] for n in names if (m := re.fullmatch(r"train\.(\w+)(\.gz)?", n))})
        for key, lang in (("source_lang", self.source_lang), ("target_lang", self.target_lang)):
            if lang not in available:
                raise ValueError(
                    f"Multi30k in {self.path} has no language {lang!r} (data.corpus.{key}); "
                    f"available: {', '.join(available) or 'none (no train.<lang>[.gz] files)'}"
                )

    def prepare(self) -> None:
        if self.hub is not None:
            self.hub.prepare()
        else:
            self._check_local()

    def load(self, split: str) -> ParallelText:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
        if self.hub is not None:
            return self.hub.load(split)
        self._check_local()
        return read_parallel_files(
            self._file(split, self.source_lang), self._file(split, self.target_lang)
        )
