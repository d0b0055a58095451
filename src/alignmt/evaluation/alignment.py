"""Alignment error rate of attention against gold word alignments (Och and Ney, 2003).

Links are `(source_index, target_index)` pairs, 0-based, as in the Pharaoh `i-j` format
used by fast_align, GIZA++ and most gold alignment sets. Gold sets with possible links mark
them `i?j` on the same line (`i-j` are sure), or list them in a second file.

What the indices count is the gold's choice: usually the whitespace-separated words of the
raw sentences. A model attends over its own tokens (SentencePiece pieces, Moses tokens), so
against word-level gold its attention is first brought to words (`word_attention`, with the
tokenisers' `word_ids`); against gold that indexes the model's tokens it is used as it is.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

Alignment = set[tuple[int, int]]

HARD_ALIGNMENT_METHODS = ("argmax", "threshold")

_LINK = re.compile(r"(\d+)([-?])(\d+)", re.ASCII)


def _links(line: str, marks: str) -> tuple[Alignment, Alignment]:
    """Links of a line by mark (`-`, `?`), allowing only the marks in `marks`."""
    found: dict[str, Alignment] = {"-": set(), "?": set()}
    for token in line.split():
        match = _LINK.fullmatch(token)
        if match is None or match[2] not in marks:
            expected = " or ".join(f"i{mark}j" for mark in marks)
            raise ValueError(f"malformed alignment link {token!r}; expected {expected}")
        found[match[2]].add((int(match[1]), int(match[3])))
    return found["-"], found["?"]


def parse_pharaoh(line: str) -> Alignment:
    """`"0-0 1-2"` -> `{(0, 0), (1, 2)}`; a blank line is a sentence with no links.

    Only sure `i-j` links: a gold line with possible links is read by `parse_gold`.
    """
    return _links(line, "-")[0]


def parse_gold(line: str, possible_line: str | None = None) -> tuple[Alignment, Alignment]:
    """The sure and possible links (S, P) of one sentence, with P ⊇ S.

    `line` holds sure links `i-j` and possible links `i?j`; `possible_line`, a line of a
    separate file of possible links (`i-j` notation), adds its links to P. A link marked both
    sure and possible is sure.
    """
    sure, possible = _links(line, "-?")
    if possible_line is not None:
        possible |= parse_pharaoh(possible_line)
    return sure, possible | sure


def format_pharaoh(alignment: Alignment) -> str:
    """Inverse of `parse_pharaoh`, links sorted so equal alignments give equal lines."""
    return " ".join(f"{i}-{j}" for i, j in sorted(alignment))


def hard_alignment(weights, method: str = "argmax", threshold: float = 0.5) -> Alignment:
    """Turn soft attention `[target_len, source_len]` (rows = output words) into links.

    `argmax` aligns every target word to its most attended source word, so each target
    word gets exactly one link (none if it attends to nothing, as a word without tokens
    does in `word_attention`). `threshold` keeps every link with weight >= `threshold`
    and nothing else, as in the usual AER evaluation of attention: a target word whose
    attention is spread out stays unaligned rather than getting a forced guess.
    """
    weights = np.asarray(weights, dtype=float)
    if weights.ndim != 2:
        raise ValueError(f"attention must be [target_len, source_len], got shape {weights.shape}")
    if method == "argmax":
        if weights.shape[1] == 0:
            return set()
        attends = weights.max(axis=1) > 0
        return {(int(i), j) for j, i in enumerate(weights.argmax(axis=1)) if attends[j]}
    if method == "threshold":
        targets, sources = np.nonzero(weights >= threshold)
        return {(int(i), int(j)) for j, i in zip(targets, sources, strict=True)}
    raise ValueError(f"unknown method {method!r}; choose one of {HARD_ALIGNMENT_METHODS}")


def word_attention(
    weights, target_word_ids: Sequence[int], source_word_ids: Sequence[int]
) -> np.ndarray:
    """Token attention `[target_tokens, source_tokens]` as word attention `[target_words,
    source_words]`, for gold links that index words while the model attends over tokens.

    `*_word_ids[k]` is the word token k comes from (a tokeniser's `word_ids`). Columns are
    summed over a source word's tokens (the attention mass on the word) and rows averaged over
    a target word's tokens (so a row stays a distribution). Word w is row or column w; a word
    without tokens gets zeros, and so no link.
    """
    weights = np.asarray(weights, dtype=float)
    target, source = np.asarray(target_word_ids, int), np.asarray(source_word_ids, int)
    if weights.shape != (len(target), len(source)):
        raise ValueError(
            f"attention of shape {weights.shape} for {len(target)} target and {len(source)} "
            "source tokens; the word ids must come from the tokens the model attended over"
        )
    if (target < 0).any() or (source < 0).any():
        raise ValueError("word ids must be non-negative")
    sums = np.eye(source.max() + 1 if len(source) else 0)[source]  # [tokens, words]
    member = np.eye(target.max() + 1 if len(target) else 0)[target]
    means = member / np.maximum(member.sum(axis=0), 1)
    return means.T @ weights @ sums


def alignment_error_rate(
    predicted: Sequence[Alignment],
    sure: Sequence[Alignment],
    possible: Sequence[Alignment] | None = None,
) -> float:
    """Corpus AER = 1 - (|A∩S| + |A∩P|) / (|A| + |S|), counts summed over sentences.

    Sure links are always also possible (P is taken as P ∪ S), so the result lies in
    [0, 1]; without `possible`, P = S and AER is 1 - F1 of the links against S.
    """
    if possible is None:
        possible = sure
    if not len(predicted) == len(sure) == len(possible):
        raise ValueError(
            f"{len(predicted)} predicted, {len(sure)} sure and {len(possible)} possible "
            "alignments; need one of each per sentence"
        )
    hit_sure = hit_possible = n_predicted = n_sure = 0
    for a, s, p in zip(predicted, sure, possible, strict=True):
        a, s, p = set(a), set(s), set(p) | set(s)
        hit_sure += len(a & s)
        hit_possible += len(a & p)
        n_predicted += len(a)
        n_sure += len(s)
    if n_predicted + n_sure == 0:
        raise ValueError("AER is undefined with no predicted and no sure links")
    return 1.0 - (hit_sure + hit_possible) / (n_predicted + n_sure)
