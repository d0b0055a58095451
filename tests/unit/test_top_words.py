"""A search step's best words: the native pass computes their definition (the log-softmax's
largest entries among the allowed words), and the searches decode the same by it and by
PyTorch ops."""

import math

import pytest
import torch

from alignmt.decoding import BeamSearch, GreedySearch
from alignmt.decoding import top_words as module
from alignmt.decoding.top_words import top_words
from alignmt.special_tokens import EOS_ID
from tests.unit.test_beam import random_model, random_sources

needs_library = pytest.mark.skipif(module.library() is None, reason="no C compiler here")


def definition(logits, k, ruled_out, eos_id):
    """In float64: log-softmax over every word, then the k best of the allowed ones."""
    log_probs = torch.log_softmax(logits.double(), dim=-1)
    eos = log_probs[:, eos_id].clone() if eos_id is not None else None
    allowed = log_probs.index_fill(1, ruled_out, -math.inf)
    values, words = allowed.topk(k, dim=1)
    return values, words, eos


@needs_library
@pytest.mark.parametrize("V", [7, 64, 65, 200, 1000])  # below, at and off the block of 64
@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("eos_id", [None, EOS_ID])
def test_the_native_pass_computes_the_definition(V, k, eos_id):
    torch.manual_seed(V + k)
    wide = torch.randn(6, V + 3) * 4
    logits = wide[:, :V]  # rows need only be contiguous within themselves
    logits[1, 40 % V] = 25.0  # one word far ahead
    logits[2] = torch.linspace(-3.0, 3.0, V)  # the best words at the end of the row
    ruled_out = torch.tensor([0, 1] if eos_id is None else [0, 1, eos_id])
    k = min(k, V - len(ruled_out))
    got = top_words(logits, k, ruled_out, eos_id)
    values, words, eos = definition(logits, k, ruled_out, eos_id)
    assert torch.equal(got.words, words)
    torch.testing.assert_close(got.log_probs.double(), values, rtol=1e-6, atol=1e-5)
    if eos_id is None:
        assert got.eos is None
    else:
        torch.testing.assert_close(got.eos.double(), eos, rtol=1e-6, atol=1e-5)


@needs_library
def test_ties_go_to_the_lower_word_and_impossible_words_never_enter():
    logits = torch.full((2, 100), -math.inf)
    logits[0, [70, 9, 40, 3]] = torch.tensor([2.0, 2.0, 1.0, 2.0])
    logits[1, [5, 80]] = torch.tensor([0.0, 0.0])  # two possible words, three asked for
    got = top_words(logits, 3, torch.tensor([3]))
    assert got.words[0].tolist() == [9, 70, 40]  # 3 is ruled out
    normaliser = 3 * math.e**2 + math.e
    expected = [math.log(math.e**2 / normaliser)] * 2 + [math.log(math.e / normaliser)]
    assert got.log_probs[0].tolist() == pytest.approx(expected, abs=1e-6)
    assert got.words[1, :2].tolist() == [5, 80]
    assert got.log_probs[1, :2].tolist() == pytest.approx([math.log(0.5)] * 2, abs=1e-6)
    assert got.log_probs[1, 2] == -math.inf


def test_it_declines_what_it_does_not_compute():
    ruled_out = torch.tensor([0, 1])
    assert top_words(torch.randn(2, 9, dtype=torch.float64), 1, ruled_out) is None
    assert top_words(torch.randn(2, 3), 2, ruled_out) is None  # one allowed word, two asked


OPTIONS = {
    "plain": {},
    "caps within the batch": {"max_length_ratio": 0.5, "max_length_offset": 1},
    "min_length": {"min_length": 4},
    "min_length past some caps": {"min_length": 6, "max_length_ratio": 0.5, "max_length_offset": 1},
    "fixed length": {"min_length": 7, "max_length": 7},
    "forbid_unk": {"forbid_unk": True},
}


# Models whose outputs stop at varied lengths, some at their caps, with [UNK] among them.
SEARCHES = {
    "greedy": (GreedySearch, {}, 1),
    "beam": (BeamSearch, {"beam_size": 4, "nbest": 2, "length_penalty": 1.0}, 2),
}


@pytest.mark.parametrize("options", sorted(OPTIONS))
@pytest.mark.parametrize("search", sorted(SEARCHES))
def test_searches_decode_the_same_by_the_native_pass_and_by_pytorch_ops(
    search, options, monkeypatch
):
    kind, settings, seed = SEARCHES[search]
    model = random_model(seed=seed, unk_bias=1.0)
    src, lengths = random_sources([7, 2, 12, 5, 1, 9])
    decode = kind(**OPTIONS[options], **settings)
    by_native = decode(model, src, lengths)
    monkeypatch.setattr(module, "library", lambda: None)
    by_torch = decode(model, src, lengths)
    for native_nbest, torch_nbest in zip(by_native, by_torch, strict=True):
        assert [h.tokens for h in native_nbest] == [h.tokens for h in torch_nbest]
        assert [h.score for h in native_nbest] == pytest.approx(
            [h.score for h in torch_nbest], abs=1e-5
        )
    lengths_out = {len(h.tokens) for nbest in by_native for h in nbest}
    assert len(lengths_out) > 1 or options == "fixed length"
