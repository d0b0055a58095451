"""Any parallel corpus kept as plain text: one file per language and split, one sentence a line."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from alignmt.data.corpus import SPLITS, ParallelText, read_parallel_files


class TextFilesCorpus:
    """Line-aligned UTF-8 files (optionally gzip-compressed) per split.

    Each of `train`, `valid` and `test` maps `source` and `target` to a file path, and may
    name an `alignment` file of gold links (Pharaoh "i-j", one line per pair) for AER.
    `valid` and `test` may list several `target` files, one reference each (multi-reference
    BLEU, chrF, TER, ROUGE); the first is the one perplexity and alignments read.
    `source_lang` and `target_lang` are only labels here, read by language-aware
    tokenisers (Moses).
    """

    def __init__(
        self,
        train: Mapping[str, str | None],
        valid: Mapping[str, str | Sequence[str] | None],
        test: Mapping[str, str | Sequence[str] | None],
        source_lang: str | None = None,
        target_lang: str | None = None,
    ):
        self.files = {"train": dict(train), "valid": dict(valid), "test": dict(test)}
        for split, files in self.files.items():
            unknown = set(files) - {"source", "target", "alignment"}
            missing = {"source", "target"} - {k for k, v in files.items() if v}
            if unknown or missing:
                raise ValueError(
                    f"data.corpus.{split} must name files under 'source', 'target' and "
                    f"optionally 'alignment'; got keys {sorted(files)}"
                )
        # every split's target files: one, or one per reference (valid, test)
        self.targets = {
            split: _reference_files(split, f["target"]) for split, f in self.files.items()
        }
        self.source_lang = source_lang
        self.target_lang = target_lang

    def load(self, split: str) -> ParallelText:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
        files = self.files[split]
        first, *more = self.targets[split]
        return read_parallel_files(files["source"], first, files.get("alignment"), more)


def _reference_files(split: str, target: str | Sequence[str]) -> list[str]:
    """`target` as a list of files: one, or for an evaluation split one per reference."""
    files = [target] if isinstance(target, str) else list(target)
    if not files or not all(isinstance(f, str) and f for f in files):
        raise ValueError(f"data.corpus.{split}.target must name a file or a list of files")
    if len(files) > 1 and split == "train":
        raise ValueError(
            f"data.corpus.train.target names {len(files)} files; training reads one "
            "(several references are for valid and test)"
        )
    return files
