"""Beam search: against greedy, hand-computed penalties and an unbatched reference."""

import math

import pytest
import torch

from alignmt.decoding import BeamSearch, GreedySearch
from alignmt.decoding.hypothesis import max_output_lengths
from alignmt.models import RNNSearch
from alignmt.models.seq2seq import Memory
from alignmt.special_tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID

A, B, C = 4, 5, 6  # the words of the hand-written models


class PrefixModel:
    """A `Seq2Seq` stand-in whose next-word probabilities (and attention) are looked up by the
    source's first word and the prefix being extended; a prefix not listed ends with [EOS].

    Its state holds the prefix itself and the source's first word, and memory holds the
    latter too: a search that reorders them wrongly looks up the wrong probabilities, and
    every step checks that memory and state rows agree.
    """

    has_attention = True

    def __init__(self, tables, attention=None, vocab_size=7):
        self.tables = tables  # {source word: {prefix tuple: {word: probability}}}
        self.attention = attention or {}  # {source word: {prefix tuple: [weights]}}
        self.vocab_size = vocab_size

    def start(self, src, src_lengths):
        B, S = src.shape
        mask = torch.arange(S) < src_lengths.unsqueeze(1)
        first = src[:, :1].double()
        memory = Memory(first.unsqueeze(2).expand(B, S, 1), None, mask)
        state = {"prefix": torch.empty(B, 0, dtype=torch.long), "source": first.squeeze(1)}
        return memory, state

    def step(self, prev, memory, state):
        assert torch.equal(memory.values[:, 0, 0], state["source"]), "memory and state disagree"
        prefix = torch.cat([state["prefix"], prev.unsqueeze(1)], dim=1)
        rows, S = prefix.size(0), memory.mask.size(1)
        probs = torch.full((rows, self.vocab_size), 1e-9)
        alpha = torch.zeros(rows, S)
        for r in range(rows):
            source = int(state["source"][r])
            key = tuple(prefix[r, 1:].tolist())  # the words so far, after [BOS]
            for word, p in self.tables[source].get(key, {EOS_ID: 1.0}).items():
                probs[r, word] = p
            length = int(memory.mask[r].sum())
            weights = self.attention.get(source, {}).get(key, [1.0 / length] * length)
            alpha[r, :length] = torch.tensor(weights)
        return probs.log(), {"prefix": prefix, "source": state["source"]}, alpha


def sources(*rows):
    """Source id tensors from lists of words (each gets its [EOS])."""
    lengths = torch.tensor([len(r) + 1 for r in rows])
    src = torch.full((len(rows), int(lengths.max())), PAD_ID)
    for b, row in enumerate(rows):
        src[b, : len(row) + 1] = torch.tensor([*row, EOS_ID])
    return src, lengths


def test_beam_finds_the_better_sequence_greedy_misses():
    model = PrefixModel({A: {(): {A: 0.6, B: 0.4}, (A,): {EOS_ID: 0.4, C: 0.3, B: 0.3}}})
    src, lengths = sources([A, A])
    greedy = GreedySearch()(model, src, lengths)[0][0]
    beam = BeamSearch(beam_size=2, nbest=2)(model, src, lengths)[0]
    assert greedy.tokens == [A] and greedy.score == pytest.approx(math.log(0.6 * 0.4))
    assert [h.tokens for h in beam] == [[B], [A]]
    assert beam[0].score == pytest.approx(math.log(0.4 * 1.0), abs=1e-6)


LENGTH_TABLE = {
    A: {
        (): {A: 0.55, B: 0.45},
        (A,): {EOS_ID: 0.5, C: 0.3, B: 0.2},
        (B,): {C: 0.9, EOS_ID: 0.1},
        (B, C): {EOS_ID: 0.6, C: 0.4},
    }
}


@pytest.mark.parametrize("alpha", [0.0, 1.0, 2.0])
def test_length_penalty_ranks_by_log_probability_over_lp(alpha):
    src, lengths = sources([A, B])
    beam = BeamSearch(beam_size=2, nbest=2, length_penalty=alpha)(
        PrefixModel(LENGTH_TABLE), src, lengths
    )[0]
    # Finished: "a" (P = .55 * .5, 2 tokens with [EOS]) and "b c" (P = .45 * .9 * .6, 3 tokens).
    short = math.log(0.55 * 0.5) / ((5 + 2) / 6) ** alpha
    long = math.log(0.45 * 0.9 * 0.6) / ((5 + 3) / 6) ** alpha
    expected = sorted([([A], short), ([B, C], long)], key=lambda h: -h[1])
    assert [h.tokens for h in beam] == [tokens for tokens, _ in expected]
    assert [h.score for h in beam] == pytest.approx([score for _, score in expected], abs=1e-6)
    assert (expected[0][0] == [A]) == (alpha == 0.0)  # the penalty flips the ranking


def test_coverage_penalty_prefers_the_hypothesis_that_covers_the_source():
    uniform = [1 / 3] * 3
    model = PrefixModel(
        {A: {(): {A: 0.6, B: 0.4}}, B: {(): {A: 0.5, B: 0.5}}},
        attention={
            A: {(): uniform, (A,): [0.9, 0.05, 0.05], (B,): [0.1, 0.45, 0.45]},
        },
    )
    # A longer second sentence pads the first: padded positions must not count.
    src, lengths = sources([A, C], [B, C, C, C])
    plain = BeamSearch(beam_size=2, nbest=2)(model, src, lengths)[0]
    covered = BeamSearch(beam_size=2, nbest=2, coverage_penalty=1.0)(model, src, lengths)[0]
    # Coverage sum_i alpha_ij: "a" [1.233, .383, .383], "b" [.433, .783, .783]; capped at 1.
    cp_a = 2 * math.log(1 / 3 + 0.05)
    cp_b = math.log(1 / 3 + 0.1) + 2 * math.log(1 / 3 + 0.45)
    assert [h.tokens for h in plain] == [[A], [B]]
    assert [h.tokens for h in covered] == [[B], [A]]
    assert [h.score for h in covered] == pytest.approx(
        [math.log(0.4) + cp_b, math.log(0.6) + cp_a], abs=1e-5
    )


def test_finished_sentences_leave_and_state_follows_the_beams():
    """Sentences of one batch finish at different steps; every step the model asserts that its
    prefix state and memory rows belong to the hypothesis being extended, and the scores
    returned are the table's probabilities of the returned words."""
    tables = {A: LENGTH_TABLE[A], B: {(): {C: 0.7, A: 0.3}, (C,): {C: 0.8, EOS_ID: 0.2}}}
    tables[B].update({(C,) * n: {C: 0.8, EOS_ID: 0.2} for n in range(2, 6)})
    model = PrefixModel(tables)
    src, lengths = sources([B, A, A], [A], [B])
    nbest = BeamSearch(beam_size=3, nbest=3)(model, src, lengths)

    def log_prob(source, tokens):
        total, table = 0.0, tables[source]
        for i, word in enumerate([*tokens, EOS_ID]):
            total += math.log(table.get(tuple(tokens[:i]), {EOS_ID: 1.0}).get(word, 1e-9))
        return total

    for b, source in enumerate([B, A, B]):
        assert len(nbest[b]) == 3
        for h in nbest[b]:
            assert h.score == pytest.approx(log_prob(source, h.tokens), abs=1e-5)
        assert [h.score for h in nbest[b]] == sorted((h.score for h in nbest[b]), reverse=True)
    assert nbest[0][0].tokens == nbest[2][0].tokens


def random_model(seed=0, eos_bias=0.0, unk_bias=0.0):
    """A tiny random RNNsearch with peaked outputs, so outputs differ in length."""
    torch.manual_seed(seed)
    model = RNNSearch(20, 15, 16, 16, 24, 16).eval()
    with torch.no_grad():
        model.decoder.maxout.output.weight.mul_(8)
        model.decoder.maxout.output.bias[EOS_ID] += eos_bias
        model.decoder.maxout.output.bias[UNK_ID] += unk_bias
    return model


def random_sources(lengths, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return sources(*(torch.randint(4, 20, (n,), generator=generator).tolist() for n in lengths))


def test_beam_size_one_is_greedy_search():
    model = random_model(seed=1)
    src, lengths = random_sources([7, 2, 12, 5, 1, 9])
    greedy = GreedySearch()(model, src, lengths)
    beam = BeamSearch(beam_size=1)(model, src, lengths)
    limits = max_output_lengths(lengths, 2.0, 10).tolist()
    assert len({len(g[0].tokens) for g in greedy}) > 2  # varied lengths, some before the limit
    assert any(len(g[0].tokens) < limit for g, limit in zip(greedy, limits, strict=True))
    for g, b in zip(greedy, beam, strict=True):
        assert b[0].tokens == g[0].tokens
        assert b[0].score == pytest.approx(g[0].score)
        torch.testing.assert_close(b[0].attention, g[0].attention)


@torch.inference_mode()
def reference_beam(model, source, beam_size, nbest, alpha, beta, limit):
    """Beam search as written in papers: one sentence, one hypothesis at a time."""
    src, lengths = sources(source)
    memory, state = model.start(src, lengths)
    live = [([], torch.tensor(0.0), [], state)]
    finished = []
    for t in range(limit + 1):
        candidates = []
        for tokens, log_p, attention, state in live:
            prev = torch.tensor([tokens[-1] if tokens else BOS_ID])
            logits, next_state, alpha_t = model.step(prev, memory, state)
            log_probs = torch.log_softmax(logits.float(), dim=-1)[0]
            log_probs[[PAD_ID, BOS_ID]] = -math.inf
            if t == limit:
                log_probs[torch.arange(len(log_probs)) != EOS_ID] = -math.inf
            for word in range(len(log_probs)):
                candidates.append(
                    ([*tokens, word], log_p + log_probs[word], [*attention, alpha_t[0]], next_state)
                )
        candidates.sort(key=lambda c: -float(c[1]))
        top = candidates[: 2 * beam_size]
        for rank, (tokens, log_p, attention, _) in enumerate(top):
            if tokens[-1] == EOS_ID and rank < beam_size and math.isfinite(log_p):
                coverage = torch.stack(attention).float().sum(0).clamp(max=1).log().sum()
                score = log_p / ((5 + len(tokens)) / 6) ** alpha + beta * coverage
                finished.append((tokens[:-1], float(score)))
        live = [c for c in top if c[0][-1] != EOS_ID][:beam_size]
        if len(finished) >= beam_size:
            break
    return sorted(finished, key=lambda h: -h[1])[:nbest]


def test_batched_beam_search_equals_the_unbatched_reference():
    model = random_model(seed=0, eos_bias=1.0).double()
    words = [6, 1, 9, 3, 11]
    src, lengths = random_sources(words, seed=4)
    search = BeamSearch(beam_size=3, nbest=3, length_penalty=0.6, coverage_penalty=0.4)
    batched = search(model, src, lengths)
    limits = max_output_lengths(lengths, 2.0, 10).tolist()
    assert len({len(h.tokens) for nbest in batched for h in nbest}) > 3
    for b, nbest in enumerate(batched):
        source = src[b, : lengths[b] - 1].tolist()
        expected = reference_beam(model, source, 3, 3, 0.6, 0.4, limits[b])
        assert [h.tokens for h in nbest] == [tokens for tokens, _ in expected]
        assert [h.score for h in nbest] == pytest.approx([s for _, s in expected], abs=1e-4)


def test_nbest_lists_are_sorted_with_one_attention_row_per_output_word():
    model = random_model(seed=5)
    src, lengths = random_sources([4, 8, 3])
    decoded = BeamSearch(beam_size=4, nbest=3)(model, src, lengths)
    for nbest, length in zip(decoded, lengths.tolist(), strict=True):
        assert len(nbest) == 3
        assert [h.score for h in nbest] == sorted((h.score for h in nbest), reverse=True)
        for h in nbest:
            assert h.attention.shape == (len(h.tokens) + 1, length)
            torch.testing.assert_close(h.attention.sum(1), torch.ones(len(h.tokens) + 1))


@pytest.mark.parametrize("search", [GreedySearch, BeamSearch])
def test_forbid_unk_never_outputs_unk(search):
    model = random_model(seed=2, unk_bias=6.0)
    src, lengths = random_sources([5, 9])
    allowed = [h.tokens for nbest in search()(model, src, lengths) for h in nbest]
    forbidden = [h.tokens for nbest in search(forbid_unk=True)(model, src, lengths) for h in nbest]
    assert any(UNK_ID in tokens for tokens in allowed)
    assert not any(UNK_ID in tokens for tokens in forbidden)


@pytest.mark.parametrize("search", [GreedySearch, BeamSearch])
def test_outputs_stop_at_the_length_limit(search):
    model = random_model(seed=2, eos_bias=-50.0)  # never ends by itself
    src, lengths = random_sources([3, 9, 6])
    decoded = search(max_length_ratio=0.5, max_length_offset=2)(model, src, lengths)
    limits = [math.ceil(0.5 * (n - 1) + 2) for n in lengths.tolist()]
    assert [len(nbest[0].tokens) for nbest in decoded] == limits


def test_nbest_larger_than_the_beam_is_refused():
    with pytest.raises(ValueError, match="nbest"):
        BeamSearch(beam_size=2, nbest=3)
