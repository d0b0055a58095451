"""Every teacher-forcing fast path a decoder declares computes what its step function does:
the same logits, attention and gradients (double precision, through the coverage loss too);
so does every scheduled-sampling fast path, with the same coins and the same own predictions."""

from functools import partial
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from alignmt.data.batching import Batch
from alignmt.models import Luong, RNNEncDec, RNNSearch
from alignmt.models.attention import (
    AdditiveAttention,
    ConcatAttention,
    GeneralAttention,
    LocalMonotonicAttention,
)
from alignmt.models.coverage import LinguisticCoverage, NeuralCoverage, coverage_loss
from alignmt.objectives import MaximumLikelihood
from alignmt.sampling import MixedFeed
from alignmt.special_tokens import PAD_ID

SIZES = dict(embedding_dim=12, encoder_hidden_size=10, decoder_hidden_size=14, maxout_size=8)
FAST = {
    "rnnsearch additive (fused recurrence)": lambda: RNNSearch(
        30, 25, **SIZES, attention=partial(AdditiveAttention, attention_size=9)
    ),
    "rnnsearch concat (fused recurrence)": lambda: RNNSearch(
        30, 25, **SIZES, attention=ConcatAttention
    ),
    "luong general, one call": lambda: Luong(
        30, 25, 12, 14, 2, attention=GeneralAttention, input_feeding=False, dropout=0.0
    ),
    "luong local-m, one call": lambda: Luong(
        30, 25, 12, 14, 1, attention=partial(LocalMonotonicAttention, window=1), input_feeding=False
    ),
    "luong coverage, one-call RNN": lambda: Luong(
        30, 25, 12, 14, 1, attention=GeneralAttention, coverage=LinguisticCoverage,
        input_feeding=False,
    ),
    "luong without attention, one call": lambda: Luong(
        30, 25, 12, 14, 1, attention=None, input_feeding=False
    ),
    "luong input feeding gru additive (fused recurrence)": lambda: Luong(
        30, 25, 12, 14, 1, rnn_type="gru", bidirectional_encoder=True,
        attention=partial(AdditiveAttention, attention_size=9),
    ),
    "luong input feeding, neural coverage (fused recurrence)": lambda: Luong(
        30, 25, 12, 14, 1, rnn_type="gru", attention=partial(AdditiveAttention, attention_size=9),
        coverage=partial(NeuralCoverage, size=3),
    ),
    "rnnsearch linguistic coverage with fertility (fused recurrence)": lambda: RNNSearch(
        30, 25, **SIZES, coverage=LinguisticCoverage
    ),
    "rnnsearch linguistic coverage, no fertility (fused recurrence)": lambda: RNNSearch(
        30, 25, **SIZES, coverage=partial(LinguisticCoverage, fertility=False)
    ),
    "rnnsearch neural coverage (fused recurrence)": lambda: RNNSearch(
        30, 25, **SIZES, attention=partial(AdditiveAttention, attention_size=9),
        coverage=partial(NeuralCoverage, size=4),
    ),
}  # fmt: skip
STEP_ONLY = {
    "rnnsearch general attention, coverage": lambda: RNNSearch(
        30, 25, **SIZES, attention=GeneralAttention, coverage=LinguisticCoverage
    ),
    "luong input feeding": lambda: Luong(30, 25, 12, 14, 1, attention=GeneralAttention),
    "luong input feeding, two gru layers": lambda: Luong(
        30, 25, 12, 14, 2, rnn_type="gru", attention=AdditiveAttention
    ),
    "rnnencdec": lambda: RNNEncDec(30, 25, **SIZES),
}


def batch():
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0], [11, 3, 0, 0, 0]])
    tgt_in = torch.tensor([[2, 5, 6, 7, 8], [2, 8, 9, 0, 0], [2, 10, 11, 12, 0]])
    tgt_out = torch.tensor([[5, 6, 7, 8, 3], [8, 9, 3, 0, 0], [10, 11, 12, 3, 0]])
    return src, torch.tensor([5, 3, 2]), tgt_in, tgt_out


def loss_and_grads(model, step_path: bool, feed=None, seed=0):
    model.zero_grad()
    src, lengths, tgt_in, tgt_out = batch()
    memory, state = model.start(src, lengths)
    run = model.decoder.unroll if step_path else model.decoder
    torch.manual_seed(seed)  # the feed's coins (and draws)
    out = run(tgt_in, memory, state, feed)
    loss = F.cross_entropy(out.logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD_ID)
    if out.attention is not None:  # gradients through the attention weights too
        loss = loss + coverage_loss(out.attention, tgt_out != PAD_ID)
    loss.backward()
    return out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", sorted(FAST))
def test_fast_path_equals_the_step_path(name):
    torch.manual_seed(0)
    model = FAST[name]().double()
    src, lengths, tgt_in, _ = batch()
    memory, state = model.start(src, lengths)
    assert model.decoder.teacher_forced(tgt_in, memory, state) is not None  # it is declared
    fast, fast_grads = loss_and_grads(model, step_path=False)
    step, step_grads = loss_and_grads(model, step_path=True)
    torch.testing.assert_close(fast.logits, step.logits, atol=1e-10, rtol=1e-8)
    if step.attention is not None:
        torch.testing.assert_close(fast.attention, step.attention, atol=1e-10, rtol=1e-8)
    assert fast_grads.keys() == step_grads.keys()
    for param, grad in step_grads.items():
        torch.testing.assert_close(fast_grads[param], grad, atol=1e-10, rtol=1e-7, msg=param)


@pytest.mark.parametrize("name", sorted(STEP_ONLY))
def test_decoders_without_a_fast_path_run_their_step_function(name):
    torch.manual_seed(0)
    model = STEP_ONLY[name]()
    src, lengths, tgt_in, _ = batch()
    memory, state = model.start(src, lengths)
    assert model.decoder.teacher_forced(tgt_in, memory, state) is None
    forward = model(src, lengths, tgt_in).logits
    stepped = []
    for t in range(tgt_in.size(1)):  # what greedy and beam search call, one token at a time
        logits, state, _ = model.step(tgt_in[:, t], memory, state)
        stepped.append(logits)
    torch.testing.assert_close(forward, torch.stack(stepped, 1), atol=1e-6, rtol=1e-5)


SCHEDULED = [name for name in sorted(FAST) if "fused recurrence" in name]


@pytest.mark.parametrize("mode", ["greedy", "sample"])
@pytest.mark.parametrize("name", SCHEDULED)
def test_scheduled_sampling_fast_path_equals_the_step_path(name, mode):
    torch.manual_seed(0)
    model = FAST[name]().double()
    feed = MixedFeed(0.5, mode)
    src, lengths, tgt_in, _ = batch()
    memory, state = model.start(src, lengths)
    assert model.decoder.scheduled(tgt_in, memory, state, feed) is not None  # it is declared
    forced, _ = loss_and_grads(model, step_path=False)
    for seed in range(3):  # different coins
        fast, fast_grads = loss_and_grads(model, step_path=False, feed=feed, seed=seed)
        step, step_grads = loss_and_grads(model, step_path=True, feed=feed, seed=seed)
        # the model's own tokens were fed: the outputs are not teacher forcing's
        assert not torch.allclose(fast.logits, forced.logits)
        torch.testing.assert_close(fast.logits, step.logits, atol=1e-10, rtol=1e-8)
        torch.testing.assert_close(fast.attention, step.attention, atol=1e-10, rtol=1e-8)
        assert fast_grads.keys() == step_grads.keys()
        for param, grad in step_grads.items():
            torch.testing.assert_close(fast_grads[param], grad, atol=1e-10, rtol=1e-7, msg=param)


def test_scheduled_sampling_keeps_the_step_path_under_readout_dropout():
    """The logits that choose would need the dropout masks the readout draws afterwards."""
    model = RNNSearch(30, 25, **SIZES, dropout=0.3).train()
    src, lengths, tgt_in, _ = batch()
    memory, state = model.start(src, lengths)
    assert model.decoder.scheduled(tgt_in, memory, state, MixedFeed(0.5)) is None
    model.eval()
    assert model.decoder.scheduled(tgt_in, memory, state, MixedFeed(0.5)) is not None


@pytest.mark.parametrize("feed", [None, MixedFeed(0.5, "greedy")], ids=["forced", "scheduled"])
@pytest.mark.parametrize("name", sorted(FAST) + sorted(STEP_ONLY))
def test_the_output_layer_fused_into_the_loss_changes_neither_loss_nor_gradients(name, feed):
    """MaximumLikelihood runs the readout's last layer inside the loss (alignmt.loss): the same
    value and gradients as the cross-entropy of the model's logits."""
    torch.manual_seed(0)
    model = (FAST | STEP_ONLY)[name]().double()
    src, lengths, tgt_in, tgt_out = batch()
    task = SimpleNamespace(model=model, sampling=Schedule(feed), global_step=0)
    pairs = Batch(src, lengths, tgt_in, tgt_out, torch.arange(3))
    results = []
    for fused in (True, False):
        model.zero_grad()
        torch.manual_seed(1)  # the feed's coins
        if fused:
            loss, out, _ = MaximumLikelihood()(task, pairs)
            if feed is None:  # fused wherever the readout ends in a linear layer
                assert (out.logits is None) == (model.decoder.split_readout() is not None)
        else:
            logits = model(src, lengths, tgt_in, feed).logits
            loss = F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD_ID)
        loss.backward()
        results.append((loss, {n: p.grad for n, p in model.named_parameters()}))
    (fused_loss, fused_grads), (loss, grads) = results
    # where the objective scores logits it does so in float32 (the step path of sampling)
    tol = 1e-12 if fused_loss.dtype == torch.float64 else 1e-6
    torch.testing.assert_close(fused_loss.double(), loss, atol=tol, rtol=tol)
    for param, grad in grads.items():
        torch.testing.assert_close(fused_grads[param], grad, atol=tol, rtol=tol, msg=param)


class Schedule:
    """A sampling schedule that always gives `feed`."""

    def __init__(self, feed):
        self._feed = feed

    def feed(self, step):
        return self._feed
