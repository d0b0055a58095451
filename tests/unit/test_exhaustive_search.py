"""Beam search against exhaustive search and against its own definition.

Over three words and [EOS], every output up to a small length cap can be enumerated and scored
from Wu et al. (2016)'s definition, s(Y, X) = log P(Y|X) / lp(Y) + cp(X; Y), written here
independently of the search. A beam wider than the number of outputs prunes nothing, so it
must return exactly that ranking.
"""

import itertools
import math
import random
from functools import partial

import pytest
import torch

from alignmt.decoding import BeamSearch
from alignmt.models import RNNSearch
from alignmt.models.attention import LocalMonotonicAttention
from alignmt.models.seq2seq import Memory
from alignmt.special_tokens import BOS_ID, EOS_ID, PAD_ID
from tests.unit.test_beam import random_sources, sources

A, B, C = 4, 5, 6
WORDS = (A, B, C)
VOCAB = 7  # [PAD] [UNK] [BOS] [EOS] a b c
FLOOR = 2.0**-149  # the coverage floor: the smallest positive float32


def gnmt_score(log_p, length, rows, alpha, beta):
    """s(Y, X) for log P(Y|X) = log_p, |Y| = length ([EOS] included) and attention rows
    [|Y|][source length]: cp sums log(min(coverage, 1)) over source words, floored."""
    coverage = [sum(column) for column in zip(*rows, strict=True)]
    cp = sum(math.log(max(min(c, 1.0), FLOOR)) for c in coverage)
    return log_p / ((5 + length) / 6) ** alpha + beta * cp


def random_probs(source, prefix):
    """A fixed pseudo-random distribution over [EOS], a, b, c for each source and prefix."""
    rng = random.Random(f"probs {source} {prefix}")
    weights = {word: rng.random() for word in (EOS_ID, *WORDS)}
    total = sum(weights.values())
    return {word: w / total for word, w in weights.items()}


def random_attention(source, prefix, width=None, never=()):
    """Pseudo-random weights over the source positions within `width` of the output position
    (all of them if None), as windowed attention gives; positions in `never` get none."""
    rng = random.Random(f"attention {source} {prefix}")
    t = len(prefix)
    weights = [
        rng.random() + 0.1 if (width is None or abs(j - t) <= width) and j not in never else 0.0
        for j in range(len(source))
    ]
    total = sum(weights)
    return [w / total for w in weights]


class TableModel:
    """A `Seq2Seq` stand-in whose next-word probabilities and attention are functions of the
    whole source and the prefix (`probs(source, prefix) -> {word: p}`, words not listed get
    probability 0; `attention(source, prefix) -> weights`). The state carries the prefix and
    the source, so a search that reorders rows wrongly looks up the wrong values."""

    has_attention = True
    beams_share_memory = False

    def __init__(self, probs, attention):
        self.probs = probs
        self.attention = attention

    def start(self, src, src_lengths):
        mask = torch.arange(src.size(1)) < src_lengths.unsqueeze(1)
        memory = Memory(src.double().unsqueeze(2), None, mask)
        return memory, {"prefix": torch.empty(len(src), 0, dtype=torch.long), "source": src}

    def step(self, prev, memory, state):
        assert torch.equal(memory.values[:, :, 0].long(), state["source"]), "rows disagree"
        prefix = torch.cat([state["prefix"], prev.unsqueeze(1)], dim=1)
        rows, S = prefix.size(0), memory.mask.size(1)
        logits = torch.full((rows, VOCAB), -math.inf, dtype=torch.float64)
        alpha = torch.zeros(rows, S, dtype=torch.float64)
        for r in range(rows):
            length = int(memory.mask[r].sum())
            source = tuple(state["source"][r, :length].tolist())
            key = tuple(prefix[r, 1:].tolist())  # the words so far, after [BOS]
            for word, p in self.probs(source, key).items():
                if p > 0:
                    logits[r, word] = math.log(p)
            alpha[r, :length] = torch.tensor(self.attention(source, key))
        return logits, {"prefix": prefix, "source": state["source"]}, alpha


def exhaustive(model, words, cap, alpha, beta):
    """Every output of at most `cap` words with P > 0 and its s(Y, X), best first."""
    source = (*words, EOS_ID)
    scored = []
    for n in range(cap + 1):
        for output in itertools.product(WORDS, repeat=n):
            log_p, rows = 0.0, []
            for i, word in enumerate((*output, EOS_ID)):
                p = model.probs(source, output[:i]).get(word, 0.0)
                log_p += math.log(p) if p > 0 else -math.inf
                rows.append(model.attention(source, output[:i]))
            if log_p > -math.inf:
                scored.append((list(output), gnmt_score(log_p, n + 1, rows, alpha, beta), rows))
    return sorted(scored, key=lambda c: -c[1])


CAP = 3  # 1 + 3 + 9 + 27 = 40 outputs; at most 27 live prefixes
EVERYTHING = 40
ATTENTION = {
    "global": random_attention,
    "windowed": partial(random_attention, width=1),  # the last source positions come late
    "never attended": partial(random_attention, width=1, never=(1,)),
}


@pytest.mark.parametrize(
    ("alpha", "beta", "attention"),
    [
        (0.0, 0.0, "global"),
        (1.0, 0.0, "global"),
        (0.0, 0.5, "global"),
        (0.6, 0.2, "global"),
        (0.0, 0.2, "windowed"),
        (0.6, 0.2, "never attended"),
    ],
)
def test_a_beam_wider_than_the_search_space_returns_the_exhaustive_ranking(alpha, beta, attention):
    model = TableModel(random_probs, ATTENTION[attention])
    rows = [[A, B, C, A, B], [C, A], [B, B, A]]
    src, lengths = sources(*rows)
    search = BeamSearch(
        beam_size=EVERYTHING,
        nbest=EVERYTHING,
        length_penalty=alpha,
        coverage_penalty=beta,
        max_length=CAP,
    )
    for words, nbest in zip(rows, search(model, src, lengths), strict=True):
        expected = exhaustive(model, words, CAP, alpha, beta)
        assert len(expected) == EVERYTHING and all(math.isfinite(s) for _, s, _ in expected)
        assert [h.tokens for h in nbest] == [tokens for tokens, _, _ in expected]
        assert [h.score for h in nbest] == pytest.approx([s for _, s, _ in expected], rel=1e-5)
        for h, (_, _, attention_rows) in zip(nbest, expected, strict=True):
            torch.testing.assert_close(h.attention, torch.tensor(attention_rows).float())


def test_a_word_no_window_reaches_costs_the_floor_instead_of_minus_infinity():
    """With windows of width 1, the last word and [EOS] of a five-word source are never attended
    by an output of at most two words: GNMT's cp would be -inf for every one of them."""
    model = TableModel(random_probs, ATTENTION["windowed"])
    src, lengths = sources([A, B, C, A, B])
    best = BeamSearch(beam_size=12, nbest=12, coverage_penalty=0.3, max_length=1)(
        model, src, lengths
    )[0]
    expected = exhaustive(model, [A, B, C, A, B], 1, 0.0, 0.3)
    assert [h.tokens for h in best] == [tokens for tokens, _, _ in expected]
    assert [h.score for h in best] == pytest.approx([s for _, s, _ in expected], rel=1e-5)
    # Output position t attends to source positions t - 1 .. t + 1, so the n + 1 rows of an
    # output of n words leave 4 - n positions uncovered, each costing 0.3 * log(2 ** -149).
    for h in best:
        assert h.score < (4 - len(h.tokens)) * 0.3 * math.log(FLOOR) < h.score + 15


def table(entries):
    """Probabilities from a hand-written table; a prefix not listed ends with [EOS]."""
    return lambda source, prefix: entries.get(prefix, {EOS_ID: 1.0})


# Length penalty: the most probable ending comes first, yet a longer output ranks higher once
# normalised. The early heuristic stops when "" and "a" finish (beam 2); "b c c c" is better.
LONGER_LATER = {
    (): {EOS_ID: 0.5, B: 0.35, A: 0.15},
    (B,): {C: 1.0},
    (B, C): {C: 1.0},
    (B, C, C): {C: 1.0},
}
# No penalty, but the best output "" is never among the most probable extensions: greedy
# search (beam 1 with the early heuristic) returns "a b" (P = .33) instead of "" (P = .4).
BEST_ENDING_OUTRANKED = {(): {A: 0.6, EOS_ID: 0.4}, (A,): {B: 0.55, EOS_ID: 0.45}}


@pytest.mark.parametrize(
    ("entries", "alpha", "beam_size", "cap", "exact_best", "early_best"),
    [
        (LONGER_LATER, 1.0, 2, 4, [B, C, C, C], []),
        (BEST_ENDING_OUTRANKED, 0.0, 1, 3, [], [A, B]),
    ],
)
def test_exact_stopping_finds_the_optimum_the_early_heuristic_misses(
    entries, alpha, beam_size, cap, exact_best, early_best
):
    model = TableModel(table(entries), ATTENTION["global"])
    src, lengths = sources([A, B])
    optimum = exhaustive(model, [A, B], cap, alpha, 0.0)[0]

    def best(stopping, k):
        search = BeamSearch(beam_size=k, length_penalty=alpha, max_length=cap, stopping=stopping)
        return search(model, src, lengths)[0][0]

    assert best("exact", 81).tokens == optimum[0] == exact_best  # nothing pruned
    exact, early = best("exact", beam_size), best("early", beam_size)
    assert exact.tokens == exact_best and exact.score == pytest.approx(optimum[1], rel=1e-6)
    assert early.tokens == early_best and early.score < optimum[1] - 0.05


@pytest.mark.parametrize("stopping", ["exact", "early"])
def test_a_stopped_sentence_finishes_nothing_more_while_others_run(stopping):
    """Four sentences run to the cap of 4 words ("c c c c" is their only output) while the
    first one stops: what it returns is what it returns alone."""
    running_on = {(C,) * n: {C: 1.0} for n in range(4)}
    tables = {A: LONGER_LATER, B: running_on}
    probs = {first: table(entries) for first, entries in tables.items()}
    model = TableModel(lambda source, prefix: probs[source[0]](source, prefix), random_attention)
    src, lengths = sources([A], [B], [B, A], [B, C], [B, B])
    search = BeamSearch(beam_size=2, length_penalty=1.0, max_length=4, stopping=stopping)
    batch = [nbest[0].tokens for nbest in search(model, src, lengths)]
    alone = search(model, src[:1, :2], lengths[:1])[0][0].tokens
    assert batch == [alone] + [[C] * 4] * 4
    assert alone == ([B, C, C, C] if stopping == "exact" else [])


@torch.inference_mode()
def definition_beam(model, words, beam_size, nbest, alpha, beta, cap):
    """Beam search as its definition reads, one sentence and one prefix at a time, without any
    stopping rule: the `beam_size` most probable unfinished prefixes of each length up to the
    cap; the [EOS] extension of every one is a candidate; the `nbest` best by s are returned."""
    src, lengths = sources(words)
    memory, state = model.start(src, lengths)
    live = [([], torch.tensor(0.0), [], state)]  # words, log P (float32 as the search), rows
    candidates = []
    for t in range(cap + 1):
        extensions = []
        for output, log_p, rows, state in live:
            prev = torch.tensor([output[-1] if output else BOS_ID])
            logits, next_state, alpha_t = model.step(prev, memory, state)
            log_probs = log_p + torch.log_softmax(logits.float(), dim=-1)[0]
            rows = [*rows, alpha_t[0].float().tolist()]
            candidates.append((output, float(log_probs[EOS_ID]), rows))
            if t < cap:
                extensions += [
                    ([*output, w], log_probs[w], rows, next_state)
                    for w in range(len(log_probs))
                    if w not in (PAD_ID, BOS_ID, EOS_ID)
                ]
        live = sorted(extensions, key=lambda e: -float(e[1]))[:beam_size]
    scored = [
        (out, gnmt_score(lp, len(out) + 1, rows, alpha, beta), rows) for out, lp, rows in candidates
    ]
    return sorted(scored, key=lambda c: -c[1])[:nbest]


@pytest.mark.parametrize(
    ("alpha", "beta", "local"), [(0.0, 0.0, False), (1.0, 0.0, False), (0.6, 0.3, True)]
)
def test_batched_beam_search_equals_its_definition_run_to_the_cap(alpha, beta, local):
    """Small beams on a real model (local-m attention leaves source words unattended): stopping
    early and batching must not change what the definition returns."""
    torch.manual_seed(0)
    attention = partial(LocalMonotonicAttention, window=1) if local else None
    model = RNNSearch(20, 15, 16, 16, 24, 16, attention=attention).eval()
    with torch.no_grad():  # peaked outputs of varied lengths
        model.decoder.maxout.output.weight.mul_(8)
        model.decoder.maxout.output.bias[EOS_ID] += 1.0
    model = model.double()
    src, lengths = random_sources([6, 1, 9, 3, 11], seed=4)
    search = BeamSearch(
        beam_size=3,
        nbest=3,
        length_penalty=alpha,
        coverage_penalty=beta,
        max_length_ratio=1.0,
        max_length_offset=3,
    )
    decoded = search(model, src, lengths)
    assert len({len(h.tokens) for nbest in decoded for h in nbest}) > 2
    for b, nbest in enumerate(decoded):
        words, cap = src[b, : lengths[b] - 1].tolist(), int(lengths[b]) - 1 + 3
        expected = definition_beam(model, words, 3, 3, alpha, beta, cap)
        assert [h.tokens for h in nbest] == [out for out, _, _ in expected]
        assert [h.score for h in nbest] == pytest.approx([s for _, s, _ in expected], rel=1e-6)
        for h, (_, _, rows) in zip(nbest, expected, strict=True):
            torch.testing.assert_close(h.attention, torch.tensor(rows))
