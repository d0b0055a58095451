"""Tokenisers turn raw lines into the tokens the vocabulary indexes, and back for sacrebleu."""

from __future__ import annotations

from collections.abc import Sequence


class WhitespaceTokenizer:
    """For text that is already tokenised by single spaces (the toy corpus, pre-tokenised files)."""

    def tokenize(self, text: str) -> list[str]:
        return text.split()

    def detokenize(self, tokens: Sequence[str]) -> str:
        return " ".join(tokens)
