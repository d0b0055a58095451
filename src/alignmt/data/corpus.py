"""Where parallel text comes from: each corpus yields raw sentence pairs per split.

A corpus is any object with `load(split) -> ParallelText` for the splits "train", "valid"
and "test", and optionally `prepare()` (download or generate once, on one process) and
`stream(split)` (a split too large to materialise, read as it is consumed).
"""

from __future__ import annotations

import gzip
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import datasets

SPLITS = ("train", "valid", "test")


class DataUnavailableError(RuntimeError):
    """A corpus cannot be found or reached; the message says where it looked and how to fix it."""


@dataclass
class ParallelText:
    """Raw, untokenised sentence pairs of one split; `alignments` are gold links (Pharaoh).

    The sequences are lists, or lazy columns of an Arrow dataset for corpora too large to hold
    as Python strings (`from_dataset`); `to_dataset` gives the Arrow form either way.
    `extra_references` are further references of an evaluation split, one sequence per set
    (the n-th set holds every sentence's n-th reference after `targets`): the metrics score
    against all of them; training and perplexity read `targets` alone.
    """

    sources: Sequence[str]
    targets: Sequence[str]
    alignments: Sequence[str] | None = None
    origin: str = ""  # where it came from, for error messages
    dataset: datasets.Dataset | None = field(default=None, repr=False, compare=False)
    extra_references: Sequence[Sequence[str]] = ()

    def __post_init__(self):
        if len(self.sources) != len(self.targets):
            raise ValueError(
                f"{self.origin}: {len(self.sources)} source but "
                f"{len(self.targets)} target sentences"
            )
        if self.alignments is not None and len(self.alignments) != len(self.sources):
            raise ValueError(
                f"{self.origin}: {len(self.alignments)} alignment lines for "
                f"{len(self.sources)} sentence pairs"
            )
        for k, references in enumerate(self.extra_references, start=2):
            if len(references) != len(self.sources):
                raise ValueError(
                    f"{self.origin}: reference set {k} has {len(references)} sentences for "
                    f"{len(self.sources)} sentence pairs"
                )

    def __len__(self) -> int:
        return len(self.sources)

    @classmethod
    def from_dataset(cls, dataset: datasets.Dataset, origin: str) -> ParallelText:
        """Lazy columns `source`, `target` (and `alignment` if present) of an Arrow dataset."""
        alignments = dataset["alignment"] if "alignment" in dataset.column_names else None
        return cls(dataset["source"], dataset["target"], alignments, origin, dataset)

    def to_dataset(self) -> datasets.Dataset:
        """Columns `source`, `target` and, with gold alignments, `alignment`."""
        if self.dataset is not None:
            return self.dataset
        columns = {"source": list(self.sources), "target": list(self.targets)}
        if self.alignments is not None:
            columns["alignment"] = list(self.alignments)
        return datasets.Dataset.from_dict(columns)

    def select(self, indices: Sequence[int]) -> ParallelText:
        """The pairs at `indices`, in that order (lazily for Arrow-backed text)."""
        if self.dataset is not None:
            return ParallelText.from_dataset(self.dataset.select(indices), self.origin)
        alignments = None if self.alignments is None else [self.alignments[i] for i in indices]
        return ParallelText(
            [self.sources[i] for i in indices],
            [self.targets[i] for i in indices],
            alignments,
            self.origin,
            extra_references=[[refs[i] for i in indices] for refs in self.extra_references],
        )

    def as_lists(self) -> ParallelText:
        """The same text held as plain Python lists (every field kept, no Arrow dataset)."""
        alignments = None if self.alignments is None else list(self.alignments)
        return ParallelText(
            list(self.sources),
            list(self.targets),
            alignments,
            self.origin,
            extra_references=[list(refs) for refs in self.extra_references],
        )


def read_lines(path: str | Path) -> list[str]:
    """Lines of a UTF-8 file (gzip-compressed if named *.gz) without their newline.

    Invalid UTF-8 is an error naming the file and line.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    lines = []
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                lines.append(raw.decode("utf-8").rstrip("\r\n"))
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}:{number}: invalid UTF-8 ({e.reason})") from None
    return lines


def read_parallel_files(
    source: str | Path,
    target: str | Path,
    alignment: str | Path | None = None,
    extra_references: Sequence[str | Path] = (),
) -> ParallelText:
    """Two line-aligned files (and optional gold alignments, and further reference files);
    mismatched counts are an error naming the files."""
    sources = read_lines(source)
    targets, *more = (read_lines(f) for f in (target, *extra_references))
    for name, lines in zip((target, *extra_references), (targets, *more), strict=True):
        if len(lines) != len(sources):
            raise ValueError(
                f"parallel files differ in length: {source} has {len(sources)} lines, "
                f"{name} has {len(lines)}"
            )
    alignments = None
    if alignment is not None:
        alignments = read_lines(alignment)
        if len(alignments) != len(sources):
            raise ValueError(
                f"alignment file {alignment} has {len(alignments)} lines, "
                f"its sentence files {source} and {target} have {len(sources)}"
            )
    return ParallelText(
        sources, targets, alignments, origin=f"{source} / {target}", extra_references=more
    )


class ToyCorpus:
    """The embedded synthetic language pair with gold alignments (see `alignmt.data.toy`)."""

    def __init__(
        self,
        cache_dir: str = "~/.cache/alignmt",
        seed: int = 1,
        train_size: int = 100_000,
        valid_per_bucket: int = 50,
        test_per_bucket: int = 300,
        max_length: int = 80,
    ):
        self.cache_dir = Path(cache_dir).expanduser()
        self.params = dict(
            seed=seed,
            train_size=train_size,
            valid_per_bucket=valid_per_bucket,
            test_per_bucket=test_per_bucket,
            max_length=max_length,
        )
        self._directory: Path | None = None

    def prepare(self) -> Path:
        """Generate (once, cached on disk) and return the corpus directory."""
        from alignmt.data.toy import prepare_toy_corpus

        if self._directory is None:
            self._directory = prepare_toy_corpus(self.cache_dir, **self.params)
        return self._directory

    def load(self, split: str) -> ParallelText:
        directory = self.prepare()
        return read_parallel_files(
            directory / f"{split}.src", directory / f"{split}.tgt", directory / f"{split}.align"
        )
