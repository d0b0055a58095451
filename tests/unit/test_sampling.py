import math

import pytest
import torch

from alignmt.models import Luong, RNNSearch
from alignmt.models.attention import GeneralAttention
from alignmt.sampling import (
    ExponentialDecay,
    InverseSigmoidDecay,
    LinearDecay,
    TeacherForcing,
    scheduled_forward,
)


def test_schedules_follow_their_formulas():
    linear = LinearDecay(k=1.0, c=1e-3, eps_min=0.2)
    for i, expected in [(0, 1.0), (100, 0.9), (500, 0.5), (799, 0.201), (800, 0.2), (5000, 0.2)]:
        assert linear.ratio(i) == pytest.approx(expected)
    exponential = ExponentialDecay(k=0.99)
    for i in (0, 1, 50, 1000):
        assert exponential.ratio(i) == pytest.approx(0.99**i)
    inverse = InverseSigmoidDecay(k=100)
    for i in (0, 100, 460, 2000):
        assert inverse.ratio(i) == pytest.approx(100 / (100 + math.exp(i / 100)))
    assert TeacherForcing().ratio(10**6) == 1.0
    assert 0.0 < InverseSigmoidDecay(k=10).ratio(10**6) < 1e-9  # no overflow


def test_unknown_mode_is_an_error():
    with pytest.raises(ValueError, match=r"sampling\.mode"):
        LinearDecay(mode="beam")


def models():
    torch.manual_seed(0)
    yield RNNSearch(30, 25, 8, 6, 10, 4, attention=None).eval()
    yield Luong(30, 25, 8, 10, 1, attention=GeneralAttention, input_feeding=False).eval()


def batch():
    src = torch.tensor([[5, 6, 7, 3], [8, 3, 0, 0]])
    tgt_in = torch.tensor([[2, 5, 6, 7, 8], [2, 9, 10, 0, 0]])
    return src, torch.tensor([4, 2]), tgt_in


@pytest.mark.parametrize("model", list(models()), ids=["rnnsearch", "luong"])
def test_ratio_one_is_teacher_forcing(model):
    src, lengths, tgt_in = batch()
    expected = model(src, lengths, tgt_in).logits
    got = scheduled_forward(model, src, lengths, tgt_in, ratio=1.0).logits
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


class Spy:
    """Records the tokens a model is fed and the logits it returns."""

    def __init__(self, model):
        self.model, self.fed, self.logits = model, [], []

    def start(self, *args):
        return self.model.start(*args)

    def step(self, prev, memory, state):
        self.fed.append(prev.clone())
        logits, state, alpha = self.model.step(prev, memory, state)
        self.logits.append(logits)
        return logits, state, alpha


@pytest.mark.parametrize("model", list(models()), ids=["rnnsearch", "luong"])
def test_ratio_zero_feeds_the_models_own_predictions(model):
    src, lengths, tgt_in = batch()
    spy = Spy(model)
    scheduled_forward(spy, src, lengths, tgt_in, ratio=0.0)
    assert torch.equal(spy.fed[0], tgt_in[:, 0])
    for t in range(1, tgt_in.size(1)):
        assert torch.equal(spy.fed[t], spy.logits[t - 1].argmax(-1))


def test_sampled_mode_draws_from_the_softmax():
    torch.manual_seed(0)
    model = RNNSearch(30, 25, 8, 6, 10, 4).eval()
    src, lengths, tgt_in = batch()
    spy = Spy(model)
    scheduled_forward(spy, src, lengths, tgt_in, ratio=0.0, mode="sample")
    fed = torch.stack(spy.fed[1:])
    argmax = torch.stack([logits.argmax(-1) for logits in spy.logits[:-1]])
    assert not torch.equal(fed, argmax)  # an untrained model's softmax is nearly flat


def test_mixed_ratio_feeds_references_and_predictions():
    torch.manual_seed(3)
    model = RNNSearch(30, 25, 8, 6, 10, 4).eval()
    src = torch.randint(4, 30, (64, 6))
    tgt_in = torch.randint(4, 25, (64, 12))
    spy = Spy(model)
    scheduled_forward(spy, src, torch.full((64,), 6), tgt_in, ratio=0.5)
    fed = torch.stack(spy.fed[1:], 1)
    share = (fed == tgt_in[:, 1:]).float().mean().item()
    assert 0.4 < share < 0.7  # half references, plus predictions that happen to match
