"""Replacing generated [UNK]s by the source word they attend to most (Luong et al. 2015;
Jean et al. 2015): a word-level vocabulary's usual post-processing step."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from alignmt.data.corpus import read_lines


def read_dictionary(path: str | Path) -> dict[str, str]:
    """`source target` pairs, one per line (whitespace separated); the first entry of a
    source word wins, so a lexical table sorted by probability gives its best translation."""
    dictionary: dict[str, str] = {}
    for number, line in enumerate(read_lines(path), start=1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 2:
            raise ValueError(f"{path}:{number}: expected 'source_word target_word', got {line!r}")
        dictionary.setdefault(fields[0], fields[1])
    return dictionary


class UnkReplacer:
    """Each [UNK] in an output becomes the source word with the highest attention weight at
    that step, translated through `dictionary` when it has the word, copied otherwise."""

    def __init__(self, dictionary: dict[str, str] | None = None):
        self.dictionary = dictionary or {}

    @classmethod
    def from_file(cls, path: str | Path | None) -> UnkReplacer:
        return cls(read_dictionary(path) if path else None)

    def __call__(
        self,
        tokens: Sequence[str],
        is_unk: Sequence[bool],
        source_words: Sequence[str],
        attention: torch.Tensor,
    ) -> list[str]:
        """tokens: the output; attention [>= len(tokens), >= len(source_words)] (rows: outputs,
        columns: source positions; a trailing [EOS] column is never chosen)."""
        out = list(tokens)
        if not any(is_unk) or not source_words:
            return out
        aligned = attention[: len(out), : len(source_words)].argmax(dim=1).tolist()
        for i, unknown in enumerate(is_unk):
            if unknown:
                word = source_words[aligned[i]]
                out[i] = self.dictionary.get(word, word)
        return out
