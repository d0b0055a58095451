"""Beam search: hand-computed penalties, greedy search, batching, lengths and options. Exhaustive
search and the search's own definition are the references of test_exhaustive_search.py."""

import math

import pytest
import torch

from alignmt.config import CONF_DIR, instantiate
from alignmt.decoding import BeamSearch, GreedySearch
from alignmt.decoding.hypothesis import max_output_lengths
from alignmt.models import RNNSearch
from alignmt.models.seq2seq import Memory
from alignmt.special_tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from tests.conftest import compose_config

A, B, C = 4, 5, 6  # the words of the hand-written models


class PrefixModel:
    """A `Seq2Seq` stand-in whose next-word probabilities (and attention) are looked up by the
    source's first word and the prefix being extended; a prefix not listed ends with [EOS].

    Its state holds the prefix itself and the source's first word, and memory holds the
    latter too: a search that reorders them wrongly looks up the wrong probabilities, and
    every step checks that memory and state rows agree.
    """

    has_attention = True
    beams_share_memory = False

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
    # Live prefixes: "a", "b", then "b c", "a c", then "b c c"; their [EOS] extensions are the
    # finished candidates (others have P < 1e-8): |Y| counts the [EOS].
    candidates = {
        (A,): (0.55 * 0.5, 2),
        (B,): (0.45 * 0.1, 2),
        (B, C): (0.45 * 0.9 * 0.6, 3),
        (A, C): (0.55 * 0.3 * 1.0, 3),
        (B, C, C): (0.45 * 0.9 * 0.4 * 1.0, 4),
    }
    scores = {y: math.log(p) / ((5 + n) / 6) ** alpha for y, (p, n) in candidates.items()}
    expected = sorted(scores, key=lambda y: -scores[y])[:2]
    assert [h.tokens for h in beam] == [list(y) for y in expected]
    assert [h.score for h in beam] == pytest.approx([scores[y] for y in expected], abs=1e-6)
    # The penalty changes the ranking: "a" first, then "b c" first, then "b c c" second.
    assert expected == {0.0: [(A,), (B, C)], 1.0: [(B, C), (A,)], 2.0: [(B, C), (B, C, C)]}[alpha]


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


def test_beam_size_one_with_early_stopping_is_greedy_search():
    model = random_model(seed=1)
    src, lengths = random_sources([7, 2, 12, 5, 1, 9])
    greedy = GreedySearch()(model, src, lengths)
    beam = BeamSearch(beam_size=1, stopping="early")(model, src, lengths)
    limits = max_output_lengths(lengths, 2.0, 10).tolist()
    assert len({len(g[0].tokens) for g in greedy}) > 2  # varied lengths, some before the limit
    assert any(len(g[0].tokens) < limit for g, limit in zip(greedy, limits, strict=True))
    for g, b in zip(greedy, beam, strict=True):
        assert b[0].tokens == g[0].tokens
        assert b[0].score == pytest.approx(g[0].score)
        torch.testing.assert_close(b[0].attention, g[0].attention)


@torch.inference_mode()
def best_ending_of_the_greedy_path(model, words, limit):
    """The most probable [EOS] extension of the prefixes that always take the most probable
    word other than [EOS], up to the limit."""
    src, lengths = sources(words)
    memory, state = model.start(src, lengths)
    prev, log_p, path, best = torch.tensor([BOS_ID]), torch.tensor(0.0), [], None
    for _ in range(limit + 1):
        logits, state, _ = model.step(prev, memory, state)
        log_probs = log_p + torch.log_softmax(logits.float(), dim=-1)[0]
        if best is None or log_probs[EOS_ID] > best[1]:
            best = (list(path), float(log_probs[EOS_ID]))
        log_probs[[PAD_ID, BOS_ID, EOS_ID]] = -math.inf
        prev = log_probs.argmax().view(1)
        log_p = log_probs[prev[0]]
        path.append(int(prev))
    return best


def test_beam_size_one_keeps_the_best_ending_of_the_greedy_path():
    """With exact stopping one beam is not greedy search: every [EOS] extension of its prefix
    counts, so it returns the most probable ending along the path, which greedy search can
    step past (it stops at the first step where [EOS] is the most probable word)."""
    model = random_model(seed=1)
    src, lengths = random_sources([7, 2, 12, 5, 1, 9])
    greedy = GreedySearch()(model, src, lengths)
    beam = BeamSearch(beam_size=1)(model, src, lengths)
    limits = max_output_lengths(lengths, 2.0, 10).tolist()
    for b in range(len(src)):
        words = src[b, : lengths[b] - 1].tolist()
        tokens, score = best_ending_of_the_greedy_path(model, words, limits[b])
        assert beam[b][0].tokens == tokens and beam[b][0].score == pytest.approx(score)
    assert all(b[0].score >= g[0].score - 1e-6 for b, g in zip(beam, greedy, strict=True))
    assert any(b[0].score > g[0].score + 1e-3 for b, g in zip(beam, greedy, strict=True))


@pytest.mark.parametrize("stopping", ["exact", "early"])
def test_a_batch_decodes_each_sentence_as_if_alone(stopping):
    """Sentences stop at different steps; those still running must not change the others."""
    model = random_model(seed=0, eos_bias=1.0).double()
    src, lengths = random_sources([6, 1, 9, 3, 11], seed=4)
    search = BeamSearch(
        beam_size=4, nbest=3, length_penalty=0.6, coverage_penalty=0.4, stopping=stopping
    )
    batched = search(model, src, lengths)
    assert len({len(h.tokens) for nbest in batched for h in nbest}) > 3
    for b, nbest in enumerate(batched):
        alone = search(model, src[b : b + 1, : lengths[b]], lengths[b : b + 1])[0]
        assert [h.tokens for h in nbest] == [h.tokens for h in alone]
        assert [h.score for h in nbest] == pytest.approx([h.score for h in alone], rel=1e-9)
        for h, a in zip(nbest, alone, strict=True):
            torch.testing.assert_close(h.attention, a.attention)


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


@torch.inference_mode()
def test_scores_and_attention_are_the_models_along_each_output():
    """Teacher forcing each returned output through the model gives back its attention and,
    through GNMT's definition, its score."""
    alpha, beta = 0.6, 0.4
    model = random_model(seed=5, eos_bias=1.0)
    src, lengths = random_sources([4, 8, 3, 12])
    search = BeamSearch(beam_size=6, nbest=4, length_penalty=alpha, coverage_penalty=beta)
    decoded = search(model, src, lengths)
    assert len({len(h.tokens) for nbest in decoded for h in nbest}) > 3
    for b, nbest in enumerate(decoded):
        source, n = src[b : b + 1, : lengths[b]], int(lengths[b])
        for h in nbest:
            tgt_in = torch.tensor([[BOS_ID, *h.tokens]])
            out = model(source, lengths[b : b + 1], tgt_in)
            log_probs = torch.log_softmax(out.logits[0].float(), dim=-1)
            log_p = log_probs.gather(1, torch.tensor([[*h.tokens, EOS_ID]]).T).sum()
            attention = out.attention[0, :, :n]
            cp = attention.sum(0).clamp(max=1).log().sum()
            score = log_p / ((5 + len(h.tokens) + 1) / 6) ** alpha + beta * cp
            torch.testing.assert_close(h.attention, attention, rtol=1e-4, atol=1e-5)
            assert h.score == pytest.approx(float(score), abs=1e-3)


@pytest.mark.parametrize("search", [GreedySearch, BeamSearch])
def test_forbid_unk_never_outputs_unk(search):
    model = random_model(seed=2, unk_bias=6.0)
    src, lengths = random_sources([5, 9])
    allowed = [h.tokens for nbest in search()(model, src, lengths) for h in nbest]
    forbidden = [h.tokens for nbest in search(forbid_unk=True)(model, src, lengths) for h in nbest]
    assert any(UNK_ID in tokens for tokens in allowed)
    assert not any(UNK_ID in tokens for tokens in forbidden)


@pytest.mark.parametrize(
    "search, unk_bias",  # biases at which some outputs change when [UNK] is forbidden
    [
        (GreedySearch(), 1.0),
        (BeamSearch(beam_size=3, nbest=2), 0.0),
        (BeamSearch(beam_size=3, stopping="early"), 0.0),
    ],
)
def test_outputs_that_say_they_are_the_same_without_unk_are(search, unk_bias):
    """The "No UNK" evaluation searches again only where an output does not say that
    forbidding [UNK] would give it: where one says so, the search with [UNK] forbidden must
    return exactly it; and a search that chose [UNK] somewhere must not say so."""
    model = random_model(seed=2, unk_bias=unk_bias)
    src, lengths = random_sources([5, 9, 3, 7, 1, 11, 4, 8], seed=3)
    allowed = search(model, src, lengths)
    forbidden = search(model, src, lengths, forbid_unk=True)
    flags = [nbest[0].same_without_unk for nbest in allowed]
    assert any(flags) and not all(flags)
    for ours, without in zip(allowed, forbidden, strict=True):
        assert len({h.same_without_unk for h in ours}) == 1  # a property of the search
        if any(UNK_ID in h.tokens for h in ours):
            assert not ours[0].same_without_unk
        if ours[0].same_without_unk:
            assert [h.tokens for h in ours] == [h.tokens for h in without]
            assert [h.score for h in ours] == [h.score for h in without]
    changed = [a[0].tokens != f[0].tokens for a, f in zip(allowed, forbidden, strict=True)]
    assert any(changed)
    assert all(nbest[0].same_without_unk for nbest in forbidden)


@pytest.mark.parametrize("search", [GreedySearch, BeamSearch])
def test_forbid_unk_can_be_asked_for_by_one_call(search):
    model = random_model(seed=2, unk_bias=6.0)
    src, lengths = random_sources([5, 9])
    shared = search()
    for forbid in (True, False):
        once = shared(model, src, lengths, forbid_unk=forbid)
        always = search(forbid_unk=forbid)(model, src, lengths)
        assert [[h.tokens for h in n] for n in once] == [[h.tokens for h in n] for n in always]
    assert shared.forbid_unk is False  # the search object is left as it was
    allowed = shared(model, src, lengths)
    assert any(UNK_ID in h.tokens for nbest in allowed for h in nbest)


@pytest.mark.parametrize("search", [GreedySearch, BeamSearch])
def test_outputs_never_run_past_the_length_limit(search):
    """A minimum length beyond every cap forbids [EOS] until the cap, which still stops."""
    model = random_model(seed=2)
    src, lengths = random_sources([3, 9, 6])
    decoded = search(max_length_ratio=0.5, max_length_offset=2, min_length=100)(model, src, lengths)
    limits = [math.ceil(0.5 * (n - 1) + 2) for n in lengths.tolist()]
    assert [len(nbest[0].tokens) for nbest in decoded] == limits


@pytest.mark.parametrize("search", [GreedySearch, BeamSearch])
def test_min_length_equal_to_max_length_fixes_every_output_length(search):
    """The fixed cap replaces the relative one: these sources alone would allow 16, 28 and 12."""
    model = random_model(seed=2, eos_bias=3.0)  # [EOS] is likely at every step
    src, lengths = random_sources([3, 9, 1])
    decoded = search(min_length=30, max_length=30)(model, src, lengths)
    assert [len(nbest[0].tokens) for nbest in decoded] == [30, 30, 30]


@pytest.mark.parametrize("search", [GreedySearch, BeamSearch])
def test_min_length_forbids_eos_before_that_many_words(search):
    """From the table: "a" would end (P = .5); with 2 words at least, "a c" ends instead."""
    table = {A: {(): {A: 0.9, B: 0.1}, (A,): {EOS_ID: 0.5, C: 0.3, B: 0.2}}}
    src, lengths = sources([A])
    kwargs = {} if search is GreedySearch else {"beam_size": 2}
    best = search(min_length=2, **kwargs)(PrefixModel(table), src, lengths)[0][0]
    assert best.tokens == [A, C]
    assert best.score == pytest.approx(math.log(0.9 * 0.3 * 1.0), abs=1e-6)
    assert search(**kwargs)(PrefixModel(table), src, lengths)[0][0].tokens == [A]


def test_nbest_larger_than_the_beam_is_refused():
    with pytest.raises(ValueError, match="nbest"):
        BeamSearch(beam_size=2, nbest=3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"length_penalty": -0.5}, "penalties"),
        ({"coverage_penalty": -0.1}, "penalties"),
        ({"stopping": "never"}, "stopping"),
        ({"min_length": -1}, "min_length"),
        ({"max_length": 0}, "max_length"),
    ],
)
def test_invalid_options_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BeamSearch(**kwargs)


ATTENTIONS = sorted(p.stem for p in (CONF_DIR / "model" / "attention").glob("*.yaml"))


def composed_model(family, attention, coverage=None):
    overrides = [f"model={family}", f"model/attention={attention}"]
    overrides += [f"model/coverage={coverage}"] if coverage else []
    cfg = compose_config("train", overrides)
    sizes = {"embedding_dim": 8}
    if family == "luong":
        sizes["hidden_size"] = 12
    else:
        sizes.update(encoder_hidden_size=8, decoder_hidden_size=16, maxout_size=8)
    torch.manual_seed(3)
    model = instantiate(cfg.model, src_vocab_size=20, tgt_vocab_size=20, **sizes).eval()
    output = model.decoder.output if family == "luong" else model.decoder.maxout.output
    with torch.no_grad():
        output.weight.mul_(6)  # peaked outputs of different lengths
        output.bias[EOS_ID] -= 3
    return model.double()


@pytest.mark.parametrize("family", ["rnnsearch", "luong"])
@pytest.mark.parametrize("attention", ATTENTIONS)
def test_beams_that_share_memory_decode_as_with_memory_per_beam(family, attention, monkeypatch):
    """A stateless attention lets the K beams of a sentence read one row of memory; outputs,
    scores and attention must be those of the search that expands the memory to K rows."""
    model = composed_model(family, attention)
    stateless = attention not in ("hard", "hard_gumbel", "local_m")
    assert model.beams_share_memory == stateless
    if not stateless:
        return
    src, lengths = random_sources([6, 1, 9, 3, 11], seed=4)
    search = BeamSearch(
        beam_size=4, nbest=3, length_penalty=1.0, coverage_penalty=0.2, min_length=2
    )
    shared = search(model, src, lengths)
    monkeypatch.setattr(type(model), "beams_share_memory", property(lambda self: False))
    expanded = search(model, src, lengths)
    assert max(len(h.tokens) for nbest in shared for h in nbest) > 2
    for ours, theirs in zip(shared, expanded, strict=True):
        assert [h.tokens for h in ours] == [h.tokens for h in theirs]
        assert [h.score for h in ours] == pytest.approx([h.score for h in theirs], rel=1e-12)
        for h, t in zip(ours, theirs, strict=True):
            torch.testing.assert_close(h.attention, t.attention)


@pytest.mark.parametrize("family", ["rnnsearch", "luong"])
def test_queries_share_memory_only_where_the_attention_can(family):
    model = composed_model(family, "additive" if family == "rnnsearch" else "general", "neural")
    assert not model.beams_share_memory
    query = torch.randn(4, model.decoder.attention.query_size, dtype=torch.double)
    values = torch.randn(2, 3, model.decoder.attention.key_size, dtype=torch.double)
    mask = torch.ones(2, 3, dtype=torch.bool)
    attention = model.decoder.attention
    with pytest.raises(ValueError, match="keeps state per row"):
        attention(query, attention.precompute(values), values, mask)
    plain = composed_model(family, "additive" if family == "rnnsearch" else "general")
    attention = plain.decoder.attention
    values, mask = torch.randn(3, 3, attention.key_size, dtype=torch.double), mask[:1].expand(3, 3)
    with pytest.raises(ValueError, match="needs as many per row: 4 queries cannot share 3"):
        attention(query, attention.precompute(values), values, mask)
