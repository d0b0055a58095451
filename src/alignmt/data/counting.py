"""The counting language: a corpus whose right next word is known after any prefix.

Ten words "0".."9"; the only legal sentence counts upward modulo 10 from a start word and is
`length` words long ("7 8 9 0 1 ..."). The task translates a sentence into itself (the
word-for-word mapping is the identity), so a word's image is the word. After any target
prefix, however wrong, the one right next token is known: the source's first word for the
empty prefix, then the previous word + 1 modulo 10, and [EOS] once `length` words are out.
That oracle is what the exposure-bias probe needs to measure accuracy on the model's own
prefixes (`alignmt.evaluation.exposure`), which real corpora cannot give.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from alignmt.data.corpus import SPLITS, ParallelText
from alignmt.special_tokens import EOS_ID

WORDS = tuple(str(d) for d in range(10))
LENGTH = 60


def counting_sentence(start: str, length: int = LENGTH) -> str:
    """The legal sentence of `length` words from `start`: "8 9 0 1 ..."."""
    first = WORDS.index(start)
    return " ".join(WORDS[(first + k) % len(WORDS)] for k in range(length))


class CountingCorpus:
    """Pairs (sentence, same sentence) of the counting language, generated in memory.

    Each split cycles through the ten start words (so each is equally frequent) in an order
    shuffled by `seed`; there are only ten legal sentences, so every split holds the same ones.
    """

    def __init__(
        self,
        seed: int = 1,
        train_size: int = 2000,
        valid_size: int = 100,
        test_size: int = 100,
        length: int = LENGTH,
    ):
        if length < 1:
            raise ValueError(f"counting sentences need at least one word, got length={length}")
        self.seed = seed
        self.sizes = {"train": train_size, "valid": valid_size, "test": test_size}
        self.length = length

    def load(self, split: str) -> ParallelText:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
        starts = [WORDS[k % len(WORDS)] for k in range(self.sizes[split])]
        random.Random(f"{self.seed}:{split}").shuffle(starts)
        sentences = [counting_sentence(start, self.length) for start in starts]
        origin = f"counting language ({split}, seed={self.seed}, length={self.length})"
        return ParallelText(sentences, list(sentences), origin=origin)

    def oracle(self, sources: Sequence[str], stoi: Mapping[str, int]):
        """The exposure probe's oracle for these sentences of the corpus (`counting_oracle`)."""
        return counting_oracle(sources, stoi, self.length)


def counting_oracle(sources: Sequence[str], stoi: Mapping[str, int], length: int = LENGTH):
    """The probe's oracle on target ids: `oracle(i, prefix)` is the set of ids that rightly
    follow `prefix` in sentence i (`sources[i]`), following the rule in the module docstring;
    after a token that is not a counting word, nothing is right. `stoi`: the target
    vocabulary's token-to-id map, which must hold the ten words."""
    missing = [w for w in WORDS if w not in stoi]
    if missing:
        raise ValueError(f"the target vocabulary lacks the counting words {missing}")
    following = WORDS[1:] + WORDS[:1]
    successor = {stoi[w]: frozenset({stoi[v]}) for w, v in zip(WORDS, following, strict=True)}
    first = [frozenset({stoi[source.split()[0]]}) for source in sources]
    end, nothing = frozenset({EOS_ID}), frozenset()

    def oracle(i: int, prefix: Sequence[int]) -> frozenset[int]:
        if len(prefix) >= length:
            return end
        if not prefix:
            return first[i]
        return successor.get(prefix[-1], nothing)

    return oracle
