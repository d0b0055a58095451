"""A seeded synthetic language pair with gold alignments: the framework's default corpus.

It trains in minutes on a CPU yet behaves like translation, not copying. The source is a
small English-like grammar (agreement, prepositional phrases, relative clauses, clauses
joined by conjunctions); the target has its own invented words, grammatical gender with
agreement, plural particles (one source word, two target words), adjectives after the noun
and the verb at the end of its clause, which moves it across whole objects and relative
clauses. Sentences run from 3 to `max_length` tokens, so attention's advantage on long
inputs (Bahdanau et al., 2014) shows, and every pair has sure alignment links for AER.

The grammar never gives one source sentence two readings with different translations (a
relative clause always ends the phrase it sits in), so a perfect translator exists.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import shutil
import tempfile
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from alignmt.evaluation.by_length import LENGTH_BUCKETS, bucket_index

# Bump whenever the corpus produced for given parameters changes: it keys the cache.
GENERATOR_VERSION = 1

SPLITS = ("train", "valid", "test")
MIN_LENGTH = 3  # "the dog sleeps"


@dataclass(frozen=True, slots=True)
class ToyPair:
    """One sentence pair with its gold word alignment."""

    source: str  # space-separated tokens
    target: str
    alignment: str  # Pharaoh "i-j" sure links, source-target, 0-based, sorted


# --- Source lexicon (fixed). No word starts with a vowel ("a owl") or has two classes. -----

_SINGULAR_DETERMINERS = ("a", "this", "every", "each")
_PLURAL_DETERMINERS = ("these", "those", "some", "many")
_ANY_NUMBER_DETERMINERS = ("the", "no", "my", "our", "your")
_NOUNS = (
    "dog", "cat", "bird", "horse", "cow", "fox", "rabbit", "frog", "goat", "lion",
    "tiger", "bear", "duck", "pig", "monkey", "snake", "spider", "donkey", "parrot", "turtle",
    "farmer", "teacher", "doctor", "king", "queen", "baker", "sailor", "soldier", "painter",
    "student", "girl", "boy", "friend", "neighbor", "stranger", "singer", "pilot", "nurse",
    "judge", "guard", "house", "garden", "table", "chair", "river", "bridge", "tree", "forest",
    "mountain", "village", "city", "road", "boat", "window", "door", "book", "letter", "box",
    "basket", "lamp",
)  # fmt: skip
_ADJECTIVES = (
    "big", "small", "red", "blue", "green", "happy", "sad", "tall", "short", "young",
    "quiet", "loud", "brave", "lazy", "clever", "hungry", "tired", "funny", "strange", "heavy",
    "little", "dark", "bright", "warm", "cold", "gentle", "famous", "curious", "busy", "white",
)  # fmt: skip
_INTRANSITIVE_VERBS = (
    "sleep", "run", "sing", "dance", "laugh", "cry", "wait", "smile", "jump", "swim",
    "fall", "arrive", "rest", "work", "talk", "walk", "shout", "hide", "listen", "wander",
)  # fmt: skip
_TRANSITIVE_VERBS = (
    "see", "chase", "like", "find", "follow", "watch", "help", "call", "visit", "paint",
    "carry", "push", "pull", "catch", "love", "feed", "build", "wash", "kick", "greet",
)  # fmt: skip
_PREPOSITIONS = (
    "in", "on", "near", "with", "behind", "under", "above", "beside", "without", "around",
)  # fmt: skip
_CONJUNCTIONS = ("and", "but", "while", "because", "although", "when")
_RELATIVE = "that"


def _add_s(word: str) -> str:
    """English plural / third person singular: dog -> dogs, box -> boxes, carry -> carries."""
    if word.endswith(("s", "x", "z", "ch", "sh")):
        return word + "es"
    if word.endswith("y") and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def source_word_classes() -> dict[str, str]:
    """Class of every source word, for analyses such as alignment error per word class.

    Classes: det, adj, noun, plural_noun (the one-to-two alignments), verb, prep, conj, rel.
    """
    classes = {}
    for det in _SINGULAR_DETERMINERS + _PLURAL_DETERMINERS + _ANY_NUMBER_DETERMINERS:
        classes[det] = "det"
    for adj in _ADJECTIVES:
        classes[adj] = "adj"
    for noun in _NOUNS:
        classes[noun], classes[_add_s(noun)] = "noun", "plural_noun"
    for verb in _INTRANSITIVE_VERBS + _TRANSITIVE_VERBS:
        classes[verb] = classes[_add_s(verb)] = "verb"
    for prep in _PREPOSITIONS:
        classes[prep] = "prep"
    for conj in _CONJUNCTIONS:
        classes[conj] = "conj"
    classes[_RELATIVE] = "rel"
    return classes


# --- Target lexicon (invented per seed) -----------------------------------------------------

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_GENDER_ENDINGS = ("o", "a")  # masculine, feminine
_AGREEMENT_ENDINGS = ("o", "a", "os", "as")  # singular m/f, plural m/f
_VERB_ENDINGS = ("r", "n")  # singular, plural subject


class _Lexicon:
    """Source words paired with their invented target forms, indexed for fast sampling.

    Every target form belongs to exactly one source word and is never a source word, so
    the two vocabularies are disjoint. Each noun gets a random gender that its determiner,
    adjectives and plural particle agree with; nothing in the noun itself shows it.
    """

    def __init__(self, seed: int):
        rng = random.Random(f"alignmt-toy/{seed}/lexicon")
        taken = set(source_word_classes())

        def syllables(count: int) -> str:
            return "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(count))

        def invent(make_stem, endings=("",)) -> list[str]:
            """A new stem with one form per ending, none of them a word already in use."""
            while True:
                stem = make_stem()
                forms = [stem + ending for ending in endings]
                if not taken.intersection(forms):
                    taken.update(forms)
                    return forms

        def agreeing(make_stem) -> tuple[tuple[str, str], tuple[str, str]]:
            """Forms indexed [plural][gender], for determiners and adjectives."""
            forms = invent(make_stem, _AGREEMENT_ENDINGS)
            return (forms[0], forms[1]), (forms[2], forms[3])

        def consonant() -> str:
            return rng.choice(_CONSONANTS)

        determiners = {  # lo, la, los, las; keno, kena, ...
            det: agreeing(lambda: (syllables(1) if rng.random() < 0.5 else "") + consonant())
            for det in _SINGULAR_DETERMINERS + _PLURAL_DETERMINERS + _ANY_NUMBER_DETERMINERS
        }
        self.determiners = (  # [plural] -> [(word, (masculine, feminine))]
            [(d, determiners[d][0]) for d in _SINGULAR_DETERMINERS + _ANY_NUMBER_DETERMINERS],
            [(d, determiners[d][1]) for d in _PLURAL_DETERMINERS + _ANY_NUMBER_DETERMINERS],
        )
        self.particles = tuple(invent(consonant, _GENDER_ENDINGS))  # po, pa
        self.nouns = [  # (singular, plural, target stem, gender)
            (noun, _add_s(noun), invent(lambda: syllables(rng.choice((2, 2, 3))))[0], gender)
            for noun in _NOUNS
            for gender in [int(rng.random() < 0.5)]
        ]
        self.adjectives = [  # (word, [plural][gender] target)
            (adj, agreeing(lambda: syllables(rng.choice((1, 2))) + consonant()))
            for adj in _ADJECTIVES
        ]

        def verbs(words) -> list[tuple[str, str, str, str]]:
            """(singular, plural, singular target, plural target): sees, see, temar, teman."""
            return [(_add_s(v), v, *invent(lambda: syllables(2), _VERB_ENDINGS)) for v in words]

        self.intransitive_verbs = verbs(_INTRANSITIVE_VERBS)
        self.transitive_verbs = verbs(_TRANSITIVE_VERBS)
        self.prepositions = [(p, invent(lambda: syllables(1))[0]) for p in _PREPOSITIONS]
        self.conjunctions = [(c, invent(lambda: syllables(2))[0]) for c in _CONJUNCTIONS]
        self.relative = (_RELATIVE, invent(lambda: syllables(1))[0])


# --- Grammar --------------------------------------------------------------------------------

# A target phrase is a list of (target token, index of the source word it translates).
_Target = list[tuple[str, int]]

_PLURAL_RATE = 0.35
_RELATIVE_RATE = 0.3  # of noun phrases that may take one and have room
_TRANSITIVE_RATE = 0.65
_ADJECTIVE_COUNTS = (0, 0, 0, 0, 0, 1, 1, 1, 2, 3)  # drawn uniformly


class _Grammar:
    """Generates a sentence of an exact source length with its translation and alignment.

    Each phrase method receives its exact source length, writes its source words left to
    right into `self.source` and returns its target phrase. Lengths are split among the
    parts only in ways every part can realise: a verb phrase cannot have 2 words and a
    prepositional phrase needs at least 3.

    `final` marks a phrase that nothing of an enclosing phrase follows (what comes next is
    the verb of the clause, a conjunction or the end). Only there may a noun take a relative
    clause, so whatever follows a relative clause can only belong to it: this keeps the
    translation a function of the source, since a PP after a relative clause would
    otherwise land before either of two verbs.
    """

    def __init__(self, lexicon: _Lexicon, rng: random.Random):
        self.lex = lexicon
        self.random = rng.random
        self.source: list[str] = []

    def pair(self, length: int) -> ToyPair:
        self.source = []
        target = self._sentence(length)
        links: list[list[int]] = [[] for _ in self.source]
        for j, (_, i) in enumerate(target):
            links[i].append(j)
        return ToyPair(
            source=" ".join(self.source),
            target=" ".join([token for token, _ in target]),
            alignment=" ".join([f"{i}-{j}" for i, js in enumerate(links) for j in js]),
        )

    def _pick(self, items):
        return items[int(self.random() * len(items))]

    def _emit(self, word: str) -> int:
        self.source.append(word)
        return len(self.source) - 1

    def _split(self, total: int, minimums: list[int]) -> list[int]:
        """Random sizes summing to `total`, each at least its minimum."""
        if not minimums:
            return []
        spare = total - sum(minimums)
        cuts = sorted(int(self.random() * (spare + 1)) for _ in range(len(minimums) - 1))
        bounds = pairwise([0, *cuts, spare])
        return [m + hi - lo for m, (lo, hi) in zip(minimums, bounds, strict=True)]

    def _sentence(self, length: int) -> _Target:
        """Clauses joined by conjunctions; longer sentences get more clauses."""
        most = (length + 1) // (MIN_LENGTH + 1)
        clauses = max(1, min(most, round(length / (8 + 32 * self.random()))))
        target: _Target = []
        for k, size in enumerate(self._split(length - clauses + 1, [MIN_LENGTH] * clauses)):
            if k:
                word, translation = self._pick(self.lex.conjunctions)
                target.append((translation, self._emit(word)))
            target += self._clause(size)
        return target

    def _clause(self, length: int) -> _Target:
        """Subject + verb phrase; the target puts the verb last, after objects and PPs."""
        r = self.random
        subject = 2 + int((length - 3) * r() * r())  # subjects are mostly short
        predicate = length - subject
        if predicate == 2:
            subject, predicate = (subject - 1, 3) if subject > 2 else (subject + 1, 1)
        target, plural = self._noun_phrase(subject, final=True)
        return target + self._verb_phrase(predicate, plural, final=True)

    def _noun_phrase(self, length: int, final: bool) -> tuple[_Target, bool]:
        """det adj* noun [PP] [relative clause] -> det [particle] noun adj* (mirrored) ...

        Returns the target phrase and whether the noun is plural (for verb agreement).
        """
        lex, r = self.lex, self.random
        spare = length - 2
        relative = 0
        if final and spare >= 2 and r() < _RELATIVE_RATE:
            relative = 2 + int(r() * (spare - 1))
            if relative == 3:  # "that" + a 2-word verb phrase cannot exist
                relative = 4 if spare >= 4 else 2
        spare -= relative  # left for adjectives (up to 3) and a PP (3 or more)
        if spare > 3 or (spare == 3 and r() < 0.75):
            adjectives = min(self._pick(_ADJECTIVE_COUNTS), spare - 3)
        else:
            adjectives = spare
        pp = spare - adjectives

        plural = r() < _PLURAL_RATE
        singular_word, plural_word, stem, gender = self._pick(lex.nouns)
        det, det_forms = self._pick(lex.determiners[plural])
        target = [(det_forms[gender], self._emit(det))]
        modifiers = [
            (forms[plural][gender], self._emit(adj))
            for adj, forms in self._distinct(lex.adjectives, adjectives)
        ]
        noun = self._emit(plural_word if plural else singular_word)
        if plural:
            target.append((lex.particles[gender], noun))
        target.append((stem, noun))
        target += reversed(modifiers)
        if pp:
            target += self._prepositional_phrase(pp, final and not relative)
        if relative:
            word, translation = lex.relative
            target.append((translation, self._emit(word)))
            target += self._verb_phrase(relative - 1, plural, final=True)
        return target, plural

    def _distinct(self, items, count: int) -> list:
        """`count` different items (count is at most 3, so retrying is cheap)."""
        chosen: list = []
        while len(chosen) < count:
            item = self._pick(items)
            if item not in chosen:
                chosen.append(item)
        return chosen

    def _verb_phrase(self, length: int, plural: bool, final: bool) -> _Target:
        """verb [object] PP* -> [object] PP* verb."""
        lex, r = self.lex, self.random
        transitive = length == 3 or (length > 1 and r() < _TRANSITIVE_RATE)
        if transitive:  # an object of 2+ words, then 0-2 PPs of 3+
            minimums = [2] + [3] * min((length - 3) // 3, int(r() * 3))
        elif length > 1:  # 1-3 PPs
            minimums = [3] * min((length - 1) // 3, 1 + int(r() * 3))
        else:
            minimums = []
        verbs = lex.transitive_verbs if transitive else lex.intransitive_verbs
        singular_word, plural_word, singular_target, plural_target = self._pick(verbs)
        verb = self._emit(plural_word if plural else singular_word)
        sizes = self._split(length - 1, minimums)
        target: _Target = []
        for k, size in enumerate(sizes):
            last = final and k == len(sizes) - 1
            if transitive and k == 0:
                target += self._noun_phrase(size, last)[0]
            else:
                target += self._prepositional_phrase(size, last)
        target.append((plural_target if plural else singular_target, verb))
        return target

    def _prepositional_phrase(self, length: int, final: bool) -> _Target:
        word, translation = self._pick(self.lex.prepositions)
        target = [(translation, self._emit(word))]
        return target + self._noun_phrase(length - 1, final)[0]


# --- Corpus ---------------------------------------------------------------------------------


def _length_ranges(max_length: int) -> list[tuple[int, int]]:
    """Source-length range of each evaluation bucket, clipped to [MIN_LENGTH, max_length]."""
    ranges = []
    for lo, hi in LENGTH_BUCKETS:
        lo, hi = max(lo, MIN_LENGTH), max_length if hi is None else min(hi, max_length)
        if lo <= hi:
            ranges.append((lo, hi))
    return ranges


def _draw(
    grammar: _Grammar, rng: random.Random, lo: int, hi: int, count: int, avoid: set[str]
) -> list[ToyPair]:
    """`count` pairs with uniform source length in [lo, hi] whose source is not in `avoid`."""
    pairs = []
    for _ in range(100 * count + 1000):
        if len(pairs) == count:
            return pairs
        pair = grammar.pair(rng.randint(lo, hi))
        if pair.source not in avoid:
            pairs.append(pair)
    raise ValueError(f"cannot find {count} new sentences of length {lo}-{hi}")


def generate_toy_corpus(
    seed: int = 1,
    train_size: int = 100_000,
    valid_per_bucket: int = 50,
    test_per_bucket: int = 300,
    max_length: int = 80,
) -> dict[str, list[ToyPair]]:
    """Keys 'train', 'valid', 'test'; no source sentence is in two splits.

    Test and validation hold exactly `*_per_bucket` distinct sentences per `LENGTH_BUCKETS`
    bucket (buckets above `max_length` stay empty), lengths uniform within each bucket.
    Training lengths are uniform over MIN_LENGTH..max_length, so long sentences are as common
    as short ones. Each split has its own random stream: the test set does not change with
    `train_size`.
    """
    if max_length < MIN_LENGTH:
        raise ValueError(f"max_length must be at least {MIN_LENGTH}, got {max_length}")
    lexicon = _Lexicon(seed)
    seen: set[str] = set()  # held-out sources, kept out of every later split

    def split_stream(split: str) -> tuple[_Grammar, random.Random]:
        rng = random.Random(f"alignmt-toy/{seed}/{split}")
        return _Grammar(lexicon, rng), rng

    corpus: dict[str, list[ToyPair]] = {}
    for split, per_bucket in (("test", test_per_bucket), ("valid", valid_per_bucket)):
        grammar, rng = split_stream(split)
        corpus[split] = []
        for lo, hi in _length_ranges(max_length):
            for pair in _draw(grammar, rng, lo, hi, per_bucket, seen):
                seen.add(pair.source)
                corpus[split].append(pair)
    grammar, rng = split_stream("train")
    corpus["train"] = _draw(grammar, rng, MIN_LENGTH, max_length, train_size, seen)
    return {split: corpus[split] for split in SPLITS}


def _cache_key(params: dict) -> str:
    text = json.dumps({"generator_version": GENERATOR_VERSION, **params}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _write_corpus(directory: Path, corpus: dict[str, list[ToyPair]], params: dict) -> None:
    """{split}.{src,tgt,align}, one sentence per line, plus manifest.json."""
    for split, pairs in corpus.items():
        for suffix, field in (("src", "source"), ("tgt", "target"), ("align", "alignment")):
            lines = "".join(getattr(pair, field) + "\n" for pair in pairs)
            (directory / f"{split}.{suffix}").write_text(lines, encoding="utf-8", newline="\n")
    manifest = {
        "corpus": "toy",
        "generator_version": GENERATOR_VERSION,
        "params": params,
        "sizes": {split: len(pairs) for split, pairs in corpus.items()},
    }
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


def prepare_toy_corpus(
    cache_dir: str | Path,
    seed: int = 1,
    train_size: int = 100_000,
    valid_per_bucket: int = 50,
    test_per_bucket: int = 300,
    max_length: int = 80,
) -> Path:
    """Generate once into `cache_dir/toy-<hash>` and return that directory.

    The name hashes the parameters and GENERATOR_VERSION, so a second call returns at once
    and different corpora never collide. The corpus is written to a temporary directory, its
    manifest last, and renamed into place, so an interrupted run or a concurrent one never
    leaves a partial corpus behind; if another process finishes first, its identical copy is
    kept. A directory without a manifest is incomplete (not renamed into place by this
    function) and is replaced.
    """
    params = {
        "seed": seed,
        "train_size": train_size,
        "valid_per_bucket": valid_per_bucket,
        "test_per_bucket": test_per_bucket,
        "max_length": max_length,
    }
    cache_dir = Path(cache_dir).expanduser()
    final = cache_dir / f"toy-{_cache_key(params)}"
    if (final / "manifest.json").is_file():
        return final
    cache_dir.mkdir(parents=True, exist_ok=True)
    corpus = generate_toy_corpus(**params)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=cache_dir))
    try:
        staging.chmod(0o755)  # mkdtemp makes it private; the cache may be shared
        _write_corpus(staging, corpus, params)
        _move_into_place(staging, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def _move_into_place(staging: Path, final: Path) -> None:
    """Rename the complete corpus in `staging` to `final`, replacing an incomplete one there."""
    for _ in range(3):
        try:
            os.rename(staging, final)
            return
        except OSError:
            if (final / "manifest.json").is_file():
                return  # another process finished first
        aside = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        with contextlib.suppress(FileNotFoundError):  # or another process set it aside first
            os.rename(final, aside / "incomplete")
        shutil.rmtree(aside, ignore_errors=True)
    os.rename(staging, final)


def _summary(corpus: dict[str, list[ToyPair]]) -> str:
    lines = []
    for split, pairs in corpus.items():
        lengths = [len(p.source.split()) for p in pairs]
        per_bucket = [0] * len(LENGTH_BUCKETS)
        for length in lengths:
            per_bucket[bucket_index(length)] += 1
        span = f"lengths {min(lengths)}-{max(lengths)}" if lengths else "empty"
        lines.append(f"{split:5s} {len(pairs):7d} pairs, {span}, per bucket {per_bucket}")
    for side in ("source", "target"):
        vocab = {t for pairs in corpus.values() for p in pairs for t in getattr(p, side).split()}
        lines.append(f"{side} vocabulary: {len(vocab)} types")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the synthetic toy corpus to OUT_DIR.")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--train-size", type=int, default=100_000)
    parser.add_argument("--valid-per-bucket", type=int, default=50)
    parser.add_argument("--test-per-bucket", type=int, default=300)
    parser.add_argument("--max-length", type=int, default=80)
    args = vars(parser.parse_args(argv))
    out_dir = args.pop("out_dir")
    corpus = generate_toy_corpus(**args)
    out_dir.mkdir(parents=True, exist_ok=True)
    _write_corpus(out_dir, corpus, args)
    print(f"wrote {out_dir}\n{_summary(corpus)}")


if __name__ == "__main__":
    main()
