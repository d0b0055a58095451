"""Word-level vocabulary: the paper's setting (most frequent K words, the rest [UNK])."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from alignmt.special_tokens import BOS_ID, EOS_ID, PAD_ID, SPECIALS, UNK_ID


class Vocabulary:
    """Maps tokens to ids. Ids 0-3 are the specials; the rest are sorted by frequency.

    Stored in checkpoints as a plain list of strings, so a checkpoint translates on its own.
    """

    def __init__(self, tokens: Sequence[str]):
        if tuple(tokens[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"a vocabulary must start with {SPECIALS}, got {list(tokens[:4])}")
        self.itos: list[str] = list(tokens)
        self.stoi: dict[str, int] = {tok: i for i, tok in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):
            raise ValueError("duplicate tokens in vocabulary")

    @classmethod
    def build(
        cls, sentences: Iterable[Sequence[str]], max_size: int | None = None, min_freq: int = 1
    ) -> Vocabulary:
        """The `max_size` most frequent tokens seen at least `min_freq` times (ties: first seen)."""
        return cls.from_counts(
            Counter(tok for sentence in sentences for tok in sentence), max_size, min_freq
        )

    @classmethod
    def from_counts(
        cls, counts: Mapping[str, int], max_size: int | None = None, min_freq: int = 1
    ) -> Vocabulary:
        """As `build`, from token counts (ties keep the mapping's order)."""
        counts = Counter(counts)
        for special in SPECIALS:
            counts.pop(special, None)
        ranked = [tok for tok, n in counts.most_common() if n >= min_freq]
        if max_size is not None:
            ranked = ranked[:max_size]
        return cls([*SPECIALS, *ranked])

    @property
    def fingerprint(self) -> str:
        """Changes whenever any token's id does: keys the cache of encoded data."""
        return hashlib.sha256("\n".join(self.itos).encode()).hexdigest()[:16]

    def __len__(self) -> int:
        return len(self.itos)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and self.itos == other.itos

    def encode(self, tokens: Sequence[str]) -> list[int]:
        get = self.stoi.get
        return [get(tok, UNK_ID) for tok in tokens]

    def decode(self, ids: Iterable[int], strip_specials: bool = True) -> list[str]:
        """Tokens up to the first [EOS]; specials other than [UNK] dropped when asked."""
        out = []
        for i in ids:
            i = int(i)
            if i == EOS_ID:
                break
            if strip_specials and i in (PAD_ID, BOS_ID):
                continue
            out.append(self.itos[i])
        return out
