"""The toy language pair: deterministic, translation-like, correctly aligned and split."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

import alignmt
from alignmt.data import toy
from alignmt.data.toy import (
    GENERATOR_VERSION,
    ToyPair,
    generate_toy_corpus,
    prepare_toy_corpus,
    source_word_classes,
)
from alignmt.evaluation.by_length import LENGTH_BUCKETS, bucket_index

SMALL = {"train_size": 2000, "valid_per_bucket": 20, "test_per_bucket": 20}
CLASSES = source_word_classes()


@pytest.fixture(scope="module")
def corpus() -> dict[str, list[ToyPair]]:
    return generate_toy_corpus(seed=1, **SMALL)


def all_pairs(corpus) -> list[ToyPair]:
    return [pair for split in ("train", "valid", "test") for pair in corpus[split]]


def links(pair: ToyPair) -> list[tuple[int, int]]:
    return [tuple(map(int, link.split("-"))) for link in pair.alignment.split()]


def source_of_each_target(pair: ToyPair) -> list[int]:
    """The source index each target token is linked to (exactly one per token)."""
    sources = defaultdict(list)
    for i, j in links(pair):
        sources[j].append(i)
    assert all(len(found) == 1 for found in sources.values()), pair
    return [sources[j][0] for j in range(len(pair.target.split()))]


def reference_order(words: list[str]) -> list[int]:
    """Source index of each target token, from a greedy parse of the source alone.

    Parses det adj* noun PP* [that VP], VP = verb [NP] PP*, clauses joined by conjunctions,
    attaching PPs and relative clauses to the nearest noun, then applies the target rules:
    plural particle, adjectives after the noun (mirrored), verb at the end of its clause.
    Agreement with the generator on every pair shows the target is a function of the source.
    """
    classes = [CLASSES[word] for word in words]
    position = 0

    def next_class() -> str | None:
        return classes[position] if position < len(words) else None

    def take() -> int:
        nonlocal position
        position += 1
        return position - 1

    def noun_phrase() -> list[int]:
        det = take()
        adjectives = []
        while next_class() == "adj":
            adjectives.append(take())
        assert next_class() in ("noun", "plural_noun"), words
        noun = take()
        order = [det] + [noun] * (1 + (classes[noun] == "plural_noun")) + adjectives[::-1]
        while next_class() == "prep":
            order += [take(), *noun_phrase()]
        if next_class() == "rel":
            order += [take(), *verb_phrase()]
        return order

    def verb_phrase() -> list[int]:
        assert next_class() == "verb", words
        verb = take()
        order = noun_phrase() if next_class() == "det" else []
        while next_class() == "prep":
            order += [take(), *noun_phrase()]
        return [*order, verb]

    order = noun_phrase() + verb_phrase()
    while next_class() == "conj":
        order += [take(), *noun_phrase(), *verb_phrase()]
    assert position == len(words), words
    return order


def corpus_digest(corpus) -> str:
    return hashlib.sha256(repr(corpus).encode()).hexdigest()


# --- Determinism ---------------------------------------------------------------------------


def test_same_seed_gives_the_same_corpus(corpus):
    assert generate_toy_corpus(seed=1, **SMALL) == corpus


def test_different_seed_gives_a_different_corpus(corpus):
    other = generate_toy_corpus(seed=2, **SMALL)
    assert other["train"] != corpus["train"]
    assert other["test"] != corpus["test"]


def test_corpus_does_not_depend_on_the_hash_seed():
    # Loads toy.py by path: the `alignmt.data` package would import Lightning, slowly.
    code = (
        "import hashlib, importlib.util, sys\n"
        "spec = importlib.util.spec_from_file_location('toy', sys.argv[1])\n"
        "toy = sys.modules['toy'] = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(toy)\n"
        "c = toy.generate_toy_corpus(seed=3, train_size=300, test_per_bucket=3)\n"
        "print(hashlib.sha256(repr(c).encode()).hexdigest())\n"
    )
    src = str(Path(alignmt.__file__).resolve().parents[1])
    digests = set()
    for hash_seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
        result = subprocess.run(
            [sys.executable, "-c", code, toy.__file__],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        digests.add(result.stdout.strip())
    assert len(digests) == 1 and len(digests.pop()) == 64


def test_test_set_does_not_depend_on_train_size(corpus):
    assert generate_toy_corpus(seed=1, **{**SMALL, "train_size": 10})["test"] == corpus["test"]


# --- Alignments ----------------------------------------------------------------------------


def test_alignments_are_sorted_in_range_and_cover_every_token(corpus):
    for pair in all_pairs(corpus):
        n_source, n_target = len(pair.source.split()), len(pair.target.split())
        found = links(pair)
        assert found == sorted(set(found))
        assert {i for i, _ in found} == set(range(n_source))
        assert {j for _, j in found} == set(range(n_target))


def test_plural_nouns_align_to_particle_and_stem(corpus):
    plurals = 0
    for pair in corpus["train"]:
        fanout = Counter(i for i, _ in links(pair))
        for i, word in enumerate(pair.source.split()):
            expected = 2 if CLASSES[word] == "plural_noun" else 1
            assert fanout[i] == expected, (pair, word)
            plurals += expected == 2
    assert plurals > 1000


# --- The target is a language of its own ---------------------------------------------------


def test_source_and_target_vocabularies_are_disjoint(corpus):
    source = {word for pair in all_pairs(corpus) for word in pair.source.split()}
    target = {word for pair in all_pairs(corpus) for word in pair.target.split()}
    assert not source & target
    assert 200 < len(source) <= len(CLASSES) < 400
    assert 200 < len(target) < 400


def test_every_source_word_has_one_class():
    lexicon = (
        toy._SINGULAR_DETERMINERS
        + toy._PLURAL_DETERMINERS
        + toy._ANY_NUMBER_DETERMINERS
        + toy._ADJECTIVES
        + 2 * toy._NOUNS
        + 2 * toy._INTRANSITIVE_VERBS
        + 2 * toy._TRANSITIVE_VERBS
        + toy._PREPOSITIONS
        + toy._CONJUNCTIONS
        + (toy._RELATIVE,)
    )
    assert len(CLASSES) == len(lexicon)


def test_target_word_order_follows_from_the_source(corpus):
    for pair in all_pairs(corpus):
        assert source_of_each_target(pair) == reference_order(pair.source.split()), pair


def test_verb_moves_to_the_end_of_its_clause(corpus):
    # "det noun verb det noun" (no plurals): target "det noun det noun verb".
    simple = [
        pair
        for pair in corpus["train"]
        if [CLASSES[w] for w in pair.source.split()] == ["det", "noun", "verb", "det", "noun"]
    ]
    assert simple
    for pair in simple:
        assert source_of_each_target(pair) == [0, 1, 3, 4, 2]
    # In every sentence the last target token translates a verb.
    for pair in all_pairs(corpus):
        last_source = source_of_each_target(pair)[-1]
        assert CLASSES[pair.source.split()[last_source]] == "verb"


def test_adjectives_follow_their_noun(corpus):
    for pair in all_pairs(corpus):
        words, order = pair.source.split(), source_of_each_target(pair)
        position = {i: j for j, i in enumerate(order)}  # last target token of each word
        for i, word in enumerate(words):
            if CLASSES[word] == "adj":
                noun = next(k for k in range(i, len(words)) if "noun" in CLASSES[words[k]])
                assert position[i] > position[noun], pair


def test_determiners_and_adjectives_agree_with_their_noun(corpus):
    forms = defaultdict(set)  # (modifier, noun) -> its target forms
    for pair in all_pairs(corpus):
        words, target = pair.source.split(), pair.target.split()
        translation = {i: target[j] for i, j in links(pair)}
        for i, word in enumerate(words):
            if CLASSES[word] in ("det", "adj"):
                noun = next(k for k in range(i, len(words)) if "noun" in CLASSES[words[k]])
                forms[word, words[noun]].add(translation[i])
    assert all(len(found) == 1 for found in forms.values())  # a function of the noun...
    for modifier in ("the", "a", "big"):
        found = {form for (m, _), (form,) in forms.items() if m == modifier}
        assert len(found) >= 2, modifier  # ...that differs between nouns (gender)
    the_dog = {form for (m, noun), (form,) in forms.items() if m == "the" and noun == "dog"}
    the_dogs = {form for (m, noun), (form,) in forms.items() if m == "the" and noun == "dogs"}
    assert the_dog and the_dogs and the_dog != the_dogs  # and number


# --- Splits --------------------------------------------------------------------------------


def test_splits_share_no_source_sentence(corpus):
    sources = {split: [pair.source for pair in corpus[split]] for split in corpus}
    for split in ("valid", "test"):
        assert len(set(sources[split])) == len(sources[split])
    assert not set(sources["train"]) & set(sources["valid"])
    assert not set(sources["train"]) & set(sources["test"])
    assert not set(sources["valid"]) & set(sources["test"])


def test_held_out_splits_are_stratified_by_length(corpus):
    for split, per_bucket in (("valid", 20), ("test", 20)):
        counts = Counter(bucket_index(len(pair.source.split())) for pair in corpus[split])
        assert [counts[b] for b in range(len(LENGTH_BUCKETS))] == [per_bucket] * 6


def test_buckets_beyond_max_length_stay_empty():
    short = generate_toy_corpus(train_size=50, valid_per_bucket=5, test_per_bucket=4, max_length=25)
    for split, per_bucket in (("valid", 5), ("test", 4)):
        counts = Counter(bucket_index(len(pair.source.split())) for pair in short[split])
        assert sorted(counts.items()) == [(0, per_bucket), (1, per_bucket), (2, per_bucket)]
    assert max(len(pair.source.split()) for pair in short["train"]) <= 25
    with pytest.raises(ValueError):
        generate_toy_corpus(max_length=2)


def test_train_lengths_span_the_whole_range():
    train = generate_toy_corpus(train_size=5000, valid_per_bucket=1, test_per_bucket=1)["train"]
    lengths = Counter(len(pair.source.split()) for pair in train)
    assert min(lengths) == 3 and max(lengths) == 80
    assert set(range(3, 81)) <= set(lengths)
    per_ten = Counter((length - 1) // 10 for length in lengths.elements())
    assert min(per_ten.values()) > 0.7 * len(train) / 8  # short ones do not dominate


# --- Cache ---------------------------------------------------------------------------------


def test_prepare_writes_a_complete_corpus_once(tmp_path):
    params = {"seed": 4, "train_size": 100, "valid_per_bucket": 2, "test_per_bucket": 3}
    directory = prepare_toy_corpus(tmp_path, **params)
    assert directory.parent == tmp_path and directory.name.startswith("toy-")
    assert [p.name for p in tmp_path.iterdir()] == [directory.name]  # no staging left over

    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["generator_version"] == GENERATOR_VERSION
    assert manifest["params"] == {**params, "max_length": 80}
    expected = generate_toy_corpus(**params)
    for split, size in (("train", 100), ("valid", 12), ("test", 18)):
        files = [directory / f"{split}.{suffix}" for suffix in ("src", "tgt", "align")]
        columns = [file.read_text(encoding="utf-8").split("\n") for file in files]
        assert all(len(column) == size + 1 and column[-1] == "" for column in columns)
        assert [ToyPair(*row) for row in zip(*columns, strict=True)][:-1] == expected[split]

    stamp = (directory / "train.src").stat().st_mtime_ns
    assert prepare_toy_corpus(tmp_path, **params) == directory
    assert (directory / "train.src").stat().st_mtime_ns == stamp
    assert prepare_toy_corpus(tmp_path, **{**params, "seed": 5}) != directory


def test_command_line_writes_the_corpus(tmp_path, capsys):
    toy.main([str(tmp_path / "out"), "--train-size", "30", "--valid-per-bucket", "1"])
    names = {p.name for p in (tmp_path / "out").iterdir()}
    assert names == {f"{s}.{x}" for s in toy.SPLITS for x in ("src", "tgt", "align")} | {
        "manifest.json"
    }
    assert "train" in capsys.readouterr().out
