"""Scheduled sampling: the schedules' formulas, and what the decoder is fed."""

import math

import pytest
import torch

from alignmt.models import Luong, RNNSearch
from alignmt.models.attention import GeneralAttention
from alignmt.sampling import (
    ExponentialDecay,
    InverseSigmoidDecay,
    LinearDecay,
    MixedFeed,
    TeacherForcing,
)
from alignmt.special_tokens import BOS_ID, PAD_ID


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


def test_ratio_one_is_plain_teacher_forcing():
    assert LinearDecay(k=1.0, c=1e-3).feed(0) is None  # eps_0 = 1: the fast path runs
    assert isinstance(LinearDecay(k=1.0, c=1e-3).feed(1), MixedFeed)


def peaked_logits(rows: int, best: int, vocab: int = 10) -> torch.Tensor:
    logits = torch.zeros(rows, vocab)
    logits[:, best] = 5.0
    return logits


def test_one_coin_per_token_not_per_sentence():
    torch.manual_seed(0)
    feed = MixedFeed(0.5)
    reference = torch.full((64,), 7)  # the model always predicts 4: the choice is visible
    chosen = torch.stack([feed(t, reference, peaked_logits(64, 4)) for t in range(11)], 1)
    used_reference = chosen == 7
    assert torch.all((chosen == 7) | (chosen == 4))
    assert abs(used_reference.float().mean().item() - 0.5) < 0.1  # 704 coins: sd 0.019
    # A coin per sentence would make every row constant; per token, 2 * 0.5^11 of them are.
    constant_rows = (used_reference.all(1) | (~used_reference).all(1)).float().mean().item()
    assert constant_rows < 0.05


def test_the_models_own_token_is_never_pad_or_bos():
    logits = torch.zeros(8, 10)
    logits[:, PAD_ID], logits[:, BOS_ID], logits[:, 6] = 9.0, 8.0, 1.0
    own = MixedFeed(0.0)(0, torch.full((8,), 5), logits)
    assert torch.all(own == 6)
    sampled = MixedFeed(0.0, mode="sample")(0, torch.full((8,), 5), logits)
    assert not torch.any((sampled == PAD_ID) | (sampled == BOS_ID))


def test_sample_mode_draws_from_the_softmax():
    torch.manual_seed(0)
    logits = torch.full((4000, 10), -math.inf)
    logits[:, 5] = logits[:, 8] = 0.0  # two equally likely words; argmax would always say 5
    drawn = MixedFeed(0.0, mode="sample")(0, torch.zeros(4000, dtype=torch.long), logits)
    assert set(drawn.tolist()) == {5, 8}
    assert abs((drawn == 8).float().mean().item() - 0.5) < 0.04  # sd 0.008


class Recording:
    """A feed that records what it chose."""

    def __init__(self, feed):
        self.feed, self.chosen = feed, []

    def __call__(self, t, reference, logits):
        self.chosen.append(self.feed(t, reference, logits))
        return self.chosen[-1]


def models():
    torch.manual_seed(0)
    yield RNNSearch(30, 25, 8, 6, 10, 4).eval()
    yield Luong(30, 25, 8, 10, 1, attention=GeneralAttention, input_feeding=True).eval()


@pytest.mark.parametrize("model", list(models()), ids=["rnnsearch", "luong"])
@pytest.mark.parametrize("ratio", [0.0, 0.5])
def test_the_decoder_conditions_on_what_it_was_fed(model, ratio):
    """Scheduled sampling's logits are teacher forcing's on the sequence actually fed."""
    torch.manual_seed(1)
    src = torch.tensor([[5, 6, 7, 3], [8, 3, 0, 0]])
    lengths = torch.tensor([4, 2])
    tgt_in = torch.tensor([[2, 5, 6, 7, 8], [2, 9, 10, 11, 12]])
    feed = Recording(MixedFeed(ratio))
    sampled = model(src, lengths, tgt_in, feed)
    fed = torch.cat([tgt_in[:, :1], torch.stack(feed.chosen, 1)], 1)
    forced = model(src, lengths, fed)
    torch.testing.assert_close(sampled.logits, forced.logits, atol=1e-5, rtol=1e-5)
    if ratio == 0.0:  # every input after [BOS] is the argmax of the previous step
        torch.testing.assert_close(fed[:, 1:], sampled.logits[:, :-1].argmax(-1))
