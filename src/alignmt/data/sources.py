"""What one split is made of: hub splits and local text files, concatenated in order.

A split is given as one source or a list of them (`data.corpus.splits.<split>`):

- a string: a split of the hub dataset (`validation`, `test`, `train`);
- `{path: DIR/newstest2012.{lang}}`: one line-aligned text file per language, `{lang}`
  replaced by each language code (the same entry works in both directions);
- `{source: FILE, target: FILE}`: the two files named outright.

Bahdanau et al.'s development set, for instance, is
`[{path: DIR/newstest2012.{lang}}, validation]` (newstest2012 + newstest2013).
Local files are read into an Arrow file once (cached by `datasets`, keyed by the files'
paths, sizes and modification times), so even a training split of local files costs no RAM.
"""

from __future__ import annotations

import gzip
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

import datasets

from alignmt.data.corpus import DataUnavailableError
from alignmt.data.mapped import RECORD_BATCH_ROWS

PAIR_FEATURES = datasets.Features(
    {"source": datasets.Value("string"), "target": datasets.Value("string")}
)


@dataclass(frozen=True)
class HubSplit:
    """A split of the hub dataset itself."""

    name: str

    def describe(self, source_lang: str, target_lang: str) -> str:
        return self.name


@dataclass(frozen=True)
class LocalFiles:
    """Line-aligned files: `pattern` with `{lang}`, or `source` and `target` outright."""

    key: str  # the config key, for error messages
    pattern: str | None = None
    source: str | None = None
    target: str | None = None

    def files(self, source_lang: str, target_lang: str) -> tuple[Path, Path]:
        if self.pattern is not None:
            paths = [self.pattern.format(lang=lang) for lang in (source_lang, target_lang)]
        else:
            paths = [self.source, self.target]
        return tuple(Path(p).expanduser() for p in paths)

    def describe(self, source_lang: str, target_lang: str) -> str:
        return " / ".join(str(p) for p in self.files(source_lang, target_lang))

    def load(self, source_lang: str, target_lang: str, cache_dir: str | None) -> datasets.Dataset:
        """Columns `source` and `target`; a missing file is an error naming it and the key."""
        source, target = self.files(source_lang, target_lang)
        for path in (source, target):
            if not path.is_file():
                raise DataUnavailableError(
                    f"{self.key}: no file {path}. WMT test sets come as plain text from "
                    f"sacrebleu, e.g. `sacrebleu -t wmt12 -l {source_lang}-{target_lang} "
                    f"--echo src > newstest2012.{source_lang}` and `--echo ref > "
                    f"newstest2012.{target_lang}`; or drop this entry (the experiment "
                    "READMEs say which files each config names)"
                )
        # a string: `datasets` would read a list in gen_kwargs as shards
        stamps = " ".join(
            f"{p.resolve()}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in (source, target)
        )
        try:
            return datasets.Dataset.from_generator(
                _line_pairs,
                features=PAIR_FEATURES,
                cache_dir=cache_dir,
                writer_batch_size=RECORD_BATCH_ROWS,
                gen_kwargs={"source": str(source), "target": str(target), "stamps": stamps},
            )
        except datasets.exceptions.DatasetGenerationError as e:
            if isinstance(e.__cause__, ValueError):
                raise e.__cause__ from None
            raise


def _lines(path: str):
    """Lines of a UTF-8 file (gzip if *.gz) split at "\\n" only, as `read_lines` splits them."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                yield raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}:{number}: invalid UTF-8 ({e.reason})") from None


def _line_pairs(source: str, target: str, stamps: str):
    """Pairs of lines, read in step; files of different lengths are an error naming both."""
    del stamps  # only keys the cache
    for number, (s, t) in enumerate(zip_longest(_lines(source), _lines(target)), start=1):
        if s is None or t is None:
            shorter, longer = (source, target) if s is None else (target, source)
            raise ValueError(
                f"parallel files differ in length: {shorter} has {number - 1} lines, "
                f"{longer} has more"
            )
        yield {"source": s, "target": t}


def parse_sources(key: str, spec) -> list[HubSplit | LocalFiles]:
    """The sources of one split from its config entry (see the module docstring)."""
    entries = [spec] if isinstance(spec, str | Mapping) else list(spec)
    if not entries:
        raise ValueError(f"{key} is empty: name at least one hub split or pair of files")
    sources = []
    for number, entry in enumerate(entries):
        where = f"{key}[{number}]" if len(entries) > 1 else key
        sources.append(_parse_entry(where, entry))
    return sources


def _parse_entry(where: str, entry) -> HubSplit | LocalFiles:
    if isinstance(entry, str):
        return HubSplit(entry)
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where}: expected a hub split name or a mapping, got {entry!r}")
    keys = set(entry)
    if keys == {"path"}:
        if "{lang}" not in str(entry["path"]):
            raise ValueError(f"{where}.path must contain {{lang}}, got {entry['path']!r}")
        return LocalFiles(where, pattern=str(entry["path"]))
    if keys == {"source", "target"} and all(entry.values()):
        return LocalFiles(where, source=str(entry["source"]), target=str(entry["target"]))
    raise ValueError(
        f"{where}: a file source is {{path: FILE.{{lang}}}} or {{source: FILE, target: FILE}}; "
        f"got keys {sorted(keys)}"
    )


def describe(sources: Sequence[HubSplit | LocalFiles], source_lang: str, target_lang: str) -> str:
    return " + ".join(s.describe(source_lang, target_lang) for s in sources)
