"""Where parallel text comes from: each corpus yields raw sentence pairs per split."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SPLITS = ("train", "valid", "test")


@dataclass
class ParallelText:
    """Raw, untokenised sentence pairs of one split; `alignments` are gold links (Pharaoh)."""

    sources: list[str]
    targets: list[str]
    alignments: list[str] | None = None
    origin: str = ""  # where it came from, for error messages

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

    def __len__(self) -> int:
        return len(self.sources)


def read_lines(path: str | Path) -> list[str]:
    """Lines of a UTF-8 file without their newline; invalid UTF-8 is an error naming the line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    lines = []
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                lines.append(raw.decode("utf-8").rstrip("\r\n"))
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}:{number}: invalid UTF-8 ({e.reason})") from None
    return lines


def read_parallel_files(
    source: str | Path, target: str | Path, alignment: str | Path | None = None
) -> ParallelText:
    """Two line-aligned files (and optional gold alignments); mismatched counts are an error."""
    sources, targets = read_lines(source), read_lines(target)
    if len(sources) != len(targets):
        raise ValueError(
            f"parallel files differ in length: {source} has {len(sources)} lines, "
            f"{target} has {len(targets)}"
        )
    alignments = read_lines(alignment) if alignment is not None else None
    return ParallelText(sources, targets, alignments, origin=f"{source} / {target}")


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
