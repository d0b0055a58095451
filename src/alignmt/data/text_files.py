"""Any parallel corpus kept as plain text: one file per language and split, one sentence a line."""

from __future__ import annotations

from collections.abc import Mapping

from alignmt.data.corpus import SPLITS, ParallelText, read_parallel_files


class TextFilesCorpus:
    """Line-aligned UTF-8 files (optionally gzip-compressed) per split.

    Each of `train`, `valid` and `test` maps `source` and `target` to a file path, and may
    name an `alignment` file of gold links (Pharaoh "i-j", one line per pair) for AER.
    `source_lang` and `target_lang` are only labels here, read by language-aware
    tokenisers (Moses).
    """

    def __init__(
        self,
        train: Mapping[str, str | None],
        valid: Mapping[str, str | None],
        test: Mapping[str, str | None],
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
        self.source_lang = source_lang
        self.target_lang = target_lang

    def load(self, split: str) -> ParallelText:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
        files = self.files[split]
        return read_parallel_files(files["source"], files["target"], files.get("alignment"))
