"""Translation datasets on the Hugging Face hub (WMT'14, ...), read with `datasets.load_dataset`.

The same call reads a local folder in the hub's layout (Parquet files and a README.md whose
YAML `configs:` maps each pair to its files), which is how the tests exercise this code
offline.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import datasets
import numpy as np

from alignmt.data.corpus import SPLITS, DataUnavailableError, ParallelText
from alignmt.data.mapped import RECORD_BATCH_ROWS
from alignmt.data.selection import read_selection
from alignmt.data.sources import PAIR_FEATURES, HubSplit, LocalFiles, describe, parse_sources

# The hub's split names for ours.
HUB_SPLITS = {"train": "train", "valid": "validation", "test": "test"}
SAMPLES = ("first", "random")
STREAM_SHUFFLE_BUFFER = 10_000


def _unavailable(path: str, name: str | None, split: str, cache_dir: str | None, error: Exception):
    """The one error shown when a dataset cannot be read: where we looked, and what to do."""
    cache = cache_dir or datasets.config.HF_DATASETS_CACHE
    if os.path.isdir(os.path.expanduser(path)) or path.startswith((".", "/", "~")):
        where = f"the local folder {path}"
        fix = "point data.corpus.path at a folder in the hub layout (<pair>/<split>-*.parquet)"
    else:
        offline = " (offline: HF_HUB_OFFLINE=1)" if datasets.config.HF_HUB_OFFLINE else ""
        where = f"the Hugging Face hub{offline} and the datasets cache {cache}"
        fix = (
            "run once with network access to fill the cache (data.corpus.cache_dir=DIR "
            "chooses where), then set HF_HUB_OFFLINE=1 to read it offline; or set "
            "data.corpus.path to a local copy in the hub layout"
        )
    config = f", config {name!r}" if name else ""
    return DataUnavailableError(
        f"cannot load dataset {path!r}{config}, split {split!r}: {error}. "
        f"Looked in {where}. To fix: {fix}."
    )


def load_hub_split(
    path: str,
    name: str | None,
    split: str,
    cache_dir: str | None = None,
    streaming: bool = False,
    revision: str | None = None,
):
    """`datasets.load_dataset` with errors that name the dataset, where it looked, and the fix."""
    try:
        return datasets.load_dataset(
            path,
            name,
            split=split,
            cache_dir=cache_dir,
            streaming=streaming,
            revision=revision,
            **({} if streaming else {"writer_batch_size": RECORD_BATCH_ROWS}),
        )
    except OSError as e:  # unreachable hub, offline without a cached copy, missing folder
        raise _unavailable(path, name, split, cache_dir, e) from None
    except ValueError as e:  # unknown config (pair) or split: the message lists the choices
        raise ValueError(
            f"dataset {path!r}: {e} (set data.corpus.name to one of the configs)"
        ) from None


def _languages(feature) -> list[str]:
    """The languages of a `translation` column: a `datasets.Translation` feature (as the hub's
    card and Parquet metadata declare it) or a plain struct of strings."""
    if isinstance(feature, datasets.Translation):
        return list(feature.languages)
    return list(feature)


def _layout(features: datasets.Features, source_lang: str, target_lang: str, where: str) -> bool:
    """Whether the languages sit in a `translation` struct (WMT) or in columns of their own.

    A language the dataset lacks is an error listing those it has.
    """
    nested = "translation" in features
    if nested:
        available = sorted(_languages(features["translation"]))
    else:
        available = sorted(
            column
            for column, feature in features.items()
            if isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string")
        )
    for key, lang in (("source_lang", source_lang), ("target_lang", target_lang)):
        if lang not in available:
            raise ValueError(
                f"{where} has no language {lang!r} (data.corpus.{key}); "
                f"available: {', '.join(available)}"
            )
    return nested


def _pick_pair(row: dict, source_lang: str, target_lang: str, nested: bool) -> dict:
    languages = row["translation"] if nested else row
    return {"source": languages[source_lang], "target": languages[target_lang]}


def _stream_rows(
    path: str,
    name: str | None,
    split: str,
    revision: str | None,
    source_lang: str,
    target_lang: str,
    size: int | None,
    sample: str,
    seed: int,
):
    """Rows of a streamed split: all, its first `size`, or `size` after a seeded shuffle."""
    stream = load_hub_split(path, name, split, streaming=True, revision=revision)
    nested = _layout(stream.features, source_lang, target_lang, f"dataset {path!r} ({name})")
    if size is not None:
        if sample == "random":
            stream = stream.shuffle(seed=seed, buffer_size=STREAM_SHUFFLE_BUFFER)
        stream = stream.take(size)
    for row in stream:
        yield _pick_pair(row, source_lang, target_lang, nested)


class HubCorpus:
    """One language pair of a hub translation dataset, in either direction.

    Rows are `{"translation": {"fr": ..., "en": ...}}` (WMT) or one column per language.
    `path` is a hub id or a local folder in the hub layout, `name` the config ("fr-en").
    Each split is one source or the concatenation of several (`splits`: hub splits and local
    text files, see `alignmt.data.sources`). The training split can be cut to the line ids of
    a published `selection` file, then to `train_size` pairs: the first ones or a seeded
    random sample. With `streaming`, nothing is downloaded in full: validation, test and a
    `train_size` subset are read from the stream once and cached; without `train_size`,
    training reads the stream as it goes (`stream`), the only way through WMT'14 fr-en's
    40.8M pairs without converting them first.
    """

    def __init__(
        self,
        path: str = "wmt/wmt14",
        name: str | None = "fr-en",
        source_lang: str = "en",
        target_lang: str = "fr",
        train_size: int | None = None,
        sample: str = "first",
        seed: int = 0,
        streaming: bool = False,
        cache_dir: str | None = None,
        revision: str | None = None,
        splits: Mapping[str, Any] | None = None,
        selection: str | None = None,
    ):
        if sample not in SAMPLES:
            raise ValueError(f"data.corpus.sample must be one of {SAMPLES}, got {sample!r}")
        if train_size is not None and train_size < 1:
            raise ValueError(f"data.corpus.train_size must be positive, got {train_size}")
        if source_lang == target_lang:
            raise ValueError(f"source and target language are both {source_lang!r}")
        self.path = path
        self.name = name
        self.source_lang = source_lang
        self.target_lang = target_lang
        self.train_size = train_size
        self.sample = sample
        self.seed = seed
        self.streaming = streaming
        self.cache_dir = str(Path(cache_dir).expanduser()) if cache_dir else None
        self.revision = revision
        self.selection = selection
        self.sources = _split_sources({**HUB_SPLITS, **(splits or {})})
        if streaming:
            self._check_streamed_training()

    def _check_streamed_training(self) -> None:
        train = self.sources["train"]
        if self.selection is not None:
            raise ValueError(
                "data.corpus.selection picks lines of the downloaded training split: "
                "set data.corpus.streaming=false"
            )
        if len(train) != 1 or not isinstance(train[0], HubSplit):
            raise ValueError(
                "data.corpus.splits.train: streamed training (data.corpus.streaming=true) reads "
                "one hub split; local files or several sources need streaming=false"
            )

    def _origin(self, split: str) -> str:
        config = f" {self.name}" if self.name else ""
        parts = describe(self.sources[split], self.source_lang, self.target_lang)
        return f"{self.path}{config} {parts} ({self.source_lang}->{self.target_lang})"

    def _load(self, split: str, streaming: bool = False):
        return load_hub_split(self.path, self.name, split, self.cache_dir, streaming, self.revision)

    def _layout(self, features: datasets.Features) -> bool:
        where = f"dataset {self.path!r}" + (f" ({self.name})" if self.name else "")
        return _layout(features, self.source_lang, self.target_lang, where)

    def _pairs(self, dataset: datasets.Dataset) -> datasets.Dataset:
        """Columns `source` and `target` (zero-copy: Arrow column selection and renaming)."""
        if self._layout(dataset.features):
            dataset = dataset.flatten()
            prefix = "translation."
        else:
            prefix = ""
        columns = {f"{prefix}{self.source_lang}": "source", f"{prefix}{self.target_lang}": "target"}
        return dataset.select_columns(list(columns)).rename_columns(columns)

    def _subset(self, dataset: datasets.Dataset) -> datasets.Dataset:
        n, total = self.train_size, len(dataset)
        if n > total:
            raise ValueError(
                f"data.corpus.train_size={n}, but {self._origin('train')} has {total} pairs"
            )
        if self.sample == "first":
            return dataset.select(range(n))
        chosen = np.random.default_rng(self.seed).choice(total, size=n, replace=False)
        return dataset.select(np.sort(chosen))

    def _streamed(self, hub_split: str, size: int | None) -> datasets.Dataset:
        """A hub split read from the stream once, then cached as Arrow by `datasets`: all of
        it, or its first `size` pairs, or as many after a seeded buffer shuffle."""
        try:
            dataset = datasets.Dataset.from_generator(
                _stream_rows,
                features=PAIR_FEATURES,
                cache_dir=self.cache_dir,
                split=hub_split,
                writer_batch_size=RECORD_BATCH_ROWS,
                gen_kwargs=dict(
                    path=self.path,
                    name=self.name,
                    split=hub_split,
                    revision=self.revision,
                    source_lang=self.source_lang,
                    target_lang=self.target_lang,
                    size=size,
                    sample=self.sample,
                    seed=self.seed,
                ),
            )
        except datasets.exceptions.DatasetGenerationError as e:
            if isinstance(e.__cause__, DataUnavailableError | ValueError):
                raise e.__cause__ from None
            raise
        if size is not None and len(dataset) < size:
            raise ValueError(
                f"data.corpus.train_size={size}, but {self._origin('train')} has "
                f"{len(dataset)} pairs"
            )
        return dataset

    def _part(self, source: HubSplit | LocalFiles, split: str) -> datasets.Dataset:
        if isinstance(source, LocalFiles):
            return source.load(self.source_lang, self.target_lang, self.cache_dir)
        if self.streaming:
            return self._streamed(source.name, self.train_size if split == "train" else None)
        return self._pairs(self._load(source.name))

    def _train_subset(self, dataset: datasets.Dataset) -> datasets.Dataset:
        if self.selection is not None:
            dataset = dataset.select(read_selection(self.selection, len(dataset)))
        if self.train_size is not None and not self.streaming:  # a stream took its own
            dataset = self._subset(dataset)
        return dataset

    def _streams(self, split: str) -> bool:
        return self.streaming and split == "train" and self.train_size is None

    def prepare(self) -> None:
        """Download (or find in the cache) every split that is not streamed; check languages."""
        for split in SPLITS:
            if not self._streams(split):
                self.load(split)

    def load(self, split: str) -> ParallelText:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
        if self._streams(split):
            raise ValueError(
                f"{self._origin(split)} is streamed in full (data.corpus.streaming=true, "
                "no train_size): read it with stream()"
            )
        parts = [self._part(source, split) for source in self.sources[split]]
        dataset = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
        if split == "train":
            dataset = self._train_subset(dataset)
        return ParallelText.from_dataset(dataset, self._origin(split))

    def stream(self, split: str) -> datasets.IterableDataset | None:
        """The training split as a stream of {source, target} rows when it is too big to load."""
        if not self._streams(split):
            return None
        stream = self._load(self.sources[split][0].name, streaming=True)
        nested = self._layout(stream.features)
        return stream.map(
            _pick_pair,
            fn_kwargs=dict(
                source_lang=self.source_lang, target_lang=self.target_lang, nested=nested
            ),
            remove_columns=list(stream.features),
        )


def _split_sources(specs: Mapping[str, Any]) -> dict[str, list[HubSplit | LocalFiles]]:
    unknown = sorted(set(specs) - set(SPLITS))
    if unknown:
        raise ValueError(f"data.corpus.splits: unknown split(s) {unknown}; expected {SPLITS}")
    return {split: parse_sources(f"data.corpus.splits.{split}", specs[split]) for split in SPLITS}
