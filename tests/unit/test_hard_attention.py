"""Hard attention: REINFORCE against its definition on a case small enough to compute by
hand, straight-through Gumbel-softmax, argmax decoding, the temperature schedule."""

import math
from functools import partial

import pytest
import torch

from alignmt.decoding import BeamSearch, GreedySearch
from alignmt.models import RNNSearch
from alignmt.models.attention import Attention, HardAttention, masked_softmax
from alignmt.models.attention.hard import (
    gumbel_straight_through,
    reinforce_estimators,
    reinforce_loss,
    sentence_log_likelihood,
)


class FreeEnergies(Attention):
    """Energies theta_j per source position, whatever the query: pi = softmax(theta)."""

    def __init__(self, query_size: int, key_size: int, positions: int = 2):
        super().__init__(query_size, key_size)
        self.theta = torch.nn.Parameter(torch.zeros(positions))

    def score(self, query, keys, state):
        return self.theta.expand(*query.shape[:2], -1)


def two_positions(rows: int, estimator: str = "reinforce", **options):
    """`rows` sentences of two source positions with one-hot annotations v_0, v_1."""
    attention = HardAttention(2, 2, score=FreeEnergies, estimator=estimator, **options).train()
    values = torch.eye(2).expand(rows, 2, 2)
    mask = torch.ones(rows, 2, dtype=torch.bool)
    return attention, values, mask


REWARD = torch.log(torch.tensor([0.2, 0.8]))  # log p(y | a): position 1 explains y better


def attend_once(attention, values, mask):
    """One decoder step; the reward is read off the context (which annotation was chosen)."""
    state = attention.init_state(values, mask)
    context, weights, _ = attention(torch.zeros(len(values), 2), values, values, mask, state)
    chosen = context.argmax(-1)
    return chosen, weights


def test_reinforce_moves_probability_to_the_position_with_the_higher_likelihood():
    seen = set()
    for seed in range(8):
        torch.manual_seed(seed)
        attention, values, mask = two_positions(rows=1)
        baseline = REWARD.mean()
        attention.choices.baseline.fill_(baseline)
        attention.choices.baseline_started.fill_(True)
        chosen, weights = attend_once(attention, values, mask)
        a = int(chosen)
        seen.add(a)
        assert weights.tolist() == [[1.0 if j == a else 0.0 for j in range(2)]]
        loss, _ = reinforce_loss([attention.choices], REWARD[chosen], mask[:, :1])
        loss.backward()
        # By hand: pi = (1/2, 1/2); d/d theta of -(R_a - b) log pi_a = -(R_a - b)(e_a - pi).
        expected = -(REWARD[a] - baseline) * (torch.eye(2)[a] - torch.tensor([0.5, 0.5]))
        torch.testing.assert_close(attention.scorer.theta.grad, expected)
        with torch.no_grad():
            attention.scorer.theta -= 0.5 * attention.scorer.theta.grad
        assert torch.softmax(attention.scorer.theta, 0)[1] > 0.5  # whichever was sampled
    assert seen == {0, 1}


def test_reinforce_gradient_is_unbiased_for_the_expected_reward():
    torch.manual_seed(0)
    attention, values, mask = two_positions(rows=20_000)
    with torch.no_grad():
        attention.scorer.theta.copy_(torch.tensor([0.3, -0.2]))
    chosen, _ = attend_once(attention, values, mask)
    loss, logs = reinforce_loss([attention.choices], REWARD[chosen], mask[:, :1])
    loss.backward()
    pi = torch.softmax(torch.tensor([0.3, -0.2]), 0)
    # d E[R] / d theta_k = pi_k (R_k - E[R]); the loss is its negative (one token a sentence).
    exact = -(pi * (REWARD - (pi * REWARD).sum()))
    torch.testing.assert_close(attention.scorer.theta.grad, exact, atol=0.01, rtol=0.0)
    # The first batch starts the baseline at its mean reward, then it moves 10% toward it.
    assert logs["reinforce/baseline"] == pytest.approx(float(REWARD[chosen].mean()), abs=1e-6)


def test_the_entropy_bonus_pushes_toward_uniform_attention():
    attention, values, mask = two_positions(rows=4, entropy_weight=1.0)
    with torch.no_grad():
        attention.scorer.theta.copy_(torch.tensor([1.0, -1.0]))
    attend_once(attention, values, mask)
    loss, logs = reinforce_loss([attention.choices], torch.zeros(4), mask[:, :1])
    loss.backward()  # equal rewards: only the entropy term is left
    pi = torch.softmax(torch.tensor([1.0, -1.0]), 0)
    entropy = -(pi * pi.log()).sum()
    assert float(logs["attention_entropy"]) == pytest.approx(float(entropy), rel=1e-5)
    grad = attention.scorer.theta.grad
    assert grad[0] > 0 > grad[1]  # gradient descent lowers theta_0, raises theta_1


def attend_twice(attention, values, mask):
    """Two decoder steps of one batch: weights [B, 2, S]."""
    state = attention.init_state(values, mask)
    query = torch.zeros(len(values), 2)
    steps = [attention(query, values, values, mask, state)[1] for _ in range(2)]
    return torch.stack(steps, 1)


def test_soft_sentences_attend_with_the_distribution_and_add_no_reinforce_term():
    torch.manual_seed(0)
    attention, values, mask = two_positions(rows=4_000, soft_probability=0.5)
    with torch.no_grad():
        attention.scorer.theta.copy_(torch.tensor([0.3, -0.2]))
    pi = torch.softmax(torch.tensor([0.3, -0.2]), 0)
    weights = attend_twice(attention, values, mask)
    soft = torch.isclose(weights, pi).all(-1)  # [B, 2 steps]
    hard = (weights.max(-1).values == 1.0) & (weights.sum(-1) == 1.0)
    assert torch.all(soft ^ hard)
    assert torch.equal(soft[:, 0], soft[:, 1])  # a sentence is soft or sampled at every step
    assert abs(soft[:, 0].float().mean() - 0.5) < 0.03
    # REINFORCE over the sampled sentences only: rewarding the soft ones changes nothing.
    reward = torch.where(soft[:, 0], 100.0, REWARD[weights[:, 0].argmax(-1)])
    attention.choices.baseline.fill_(0.0)
    attention.choices.baseline_started.fill_(True)
    loss, _ = reinforce_loss([attention.choices], reward, torch.ones(4_000, 2, dtype=torch.bool))
    sampled = ~soft[:, 0]
    chosen = weights[sampled].argmax(-1)  # [n, 2]
    # By hand: -(1/N) sum over the sampled sentences b and their steps t of R_b (e_a_bt - pi),
    # N = all 8,000 steps.
    rewards = reward[sampled].view(-1, 1, 1)
    by_hand = -(rewards * (torch.eye(2)[chosen] - pi)).sum((0, 1)) / 8_000
    torch.testing.assert_close(torch.autograd.grad(loss, attention.scorer.theta)[0], by_hand)


@pytest.mark.parametrize("estimator", ["reinforce", "gumbel"])
def test_soft_probability_one_is_soft_attention_in_training(estimator):
    attention, values, mask = two_positions(rows=3, estimator=estimator, soft_probability=1.0)
    with torch.no_grad():
        attention.scorer.theta.copy_(torch.tensor([1.0, -1.0]))
    weights = attend_twice(attention, values, mask)
    torch.testing.assert_close(weights, torch.softmax(attention.scorer.theta, 0).expand(3, 2, 2))


def test_a_per_token_reward_divides_each_sentence_log_likelihood_by_its_length():
    torch.manual_seed(0)
    attention, values, mask = two_positions(rows=2, reward="per_token")
    attention.choices.baseline.fill_(0.0)
    attention.choices.baseline_started.fill_(True)
    weights = attend_twice(attention, values, mask)
    targets = torch.tensor([[True, True], [True, False]])  # 2 and 1 target words
    loss, logs = reinforce_loss([attention.choices], torch.tensor([-4.0, -1.0]), targets)
    chosen, pi = weights.argmax(-1), torch.tensor([0.5, 0.5])
    per_token = torch.tensor([-2.0, -1.0]).view(2, 1, 1)  # -4 / 2 and -1 / 1
    terms = per_token * (torch.eye(2)[chosen] - pi) * targets.unsqueeze(-1)
    torch.testing.assert_close(
        torch.autograd.grad(loss, attention.scorer.theta)[0], -terms.sum((0, 1)) / 3
    )
    assert logs["reinforce/baseline"] == pytest.approx(0.9 * 0.0 + 0.1 * -1.5)


def test_soft_probability_outside_zero_one_is_refused():
    with pytest.raises(ValueError, match=r"model\.attention\.soft_probability"):
        HardAttention(2, 2, soft_probability=1.5)
    with pytest.raises(ValueError, match=r"model\.attention\.reward"):
        HardAttention(2, 2, reward="bleu")


def test_sentence_log_likelihood_sums_over_real_tokens():
    logits = torch.log(torch.tensor([[[0.2, 0.8], [0.5, 0.5], [0.9, 0.1]]]))
    targets = torch.tensor([[1, 1, 0]])  # the last token is padding (id 0)
    log_likelihood = sentence_log_likelihood(logits, targets)  # log 0.8 + log 0.5
    torch.testing.assert_close(log_likelihood, torch.log(torch.tensor([0.4])))


def test_gumbel_straight_through_is_one_hot_forward_and_relaxed_backward():
    probs = torch.tensor([[0.2, 0.5, 0.3, 0.0]], requires_grad=True)
    noise = torch.tensor([[1.5, -0.3, 0.4, 2.0]])
    out = gumbel_straight_through(probs, 0.5, noise)
    # argmax of log p + g: log 0.2 + 1.5 = -0.11, log 0.5 - 0.3 = -0.99, log 0.3 + 0.4 = -0.80.
    assert out.tolist() == [[1.0, 0.0, 0.0, 0.0]]
    upstream = torch.tensor([[1.0, -2.0, 0.5, 3.0]])
    (out * upstream).sum().backward()
    reference = probs.detach().clone().requires_grad_(True)
    logits = torch.log(reference[:, :3]) + noise[:, :3]
    relaxed = torch.softmax(logits / 0.5, -1)
    (relaxed * upstream[:, :3]).sum().backward()
    torch.testing.assert_close(probs.grad[:, :3], reference.grad[:, :3])
    assert probs.grad[0, 3] == 0  # a position that cannot be attended gets no gradient


def test_gumbel_hard_attention_trains_through_the_soft_weights():
    torch.manual_seed(0)
    attention, values, mask = two_positions(rows=3, estimator="gumbel")
    _, weights = attend_once(attention, values, mask)
    assert set(weights.flatten().tolist()) <= {0.0, 1.0} and torch.all(weights.sum(-1) == 1)
    (weights * torch.tensor([1.0, -1.0])).sum().backward()
    assert attention.scorer.theta.grad.abs().sum() > 0
    assert reinforce_estimators(attention) == []  # nothing for the task to add


def test_gumbel_temperature_follows_its_schedule_over_training_batches():
    attention, values, mask = two_positions(
        rows=1, estimator="gumbel", temperature=2.0, min_temperature=0.5, anneal_rate=0.1
    )
    for _ in range(5):
        attention.init_state(values, mask)
    assert attention.temperature == pytest.approx(2.0 * math.exp(-0.5))
    attention.eval()
    attention.init_state(values, mask)  # evaluation does not advance the schedule
    assert int(attention.batches) == 5
    for _ in range(30):
        attention.train().init_state(values, mask)
    assert attention.temperature == 0.5


@pytest.mark.parametrize("estimator", ["reinforce", "gumbel"])
def test_decoding_attends_to_the_most_probable_position(estimator):
    torch.manual_seed(0)
    attention = HardAttention(6, 5, estimator=estimator).eval()
    values = torch.randn(4, 7, 5)
    mask = torch.arange(7) < torch.tensor([7, 5, 3, 1]).unsqueeze(1)
    keys = attention.precompute(values)
    query = torch.randn(4, 6)
    state = attention.init_state(values, mask)
    _, weights, _ = attention(query, keys, values, mask, state)
    soft = masked_softmax(attention.scorer.score(query.unsqueeze(1), keys, {}), mask.unsqueeze(1))
    expected = torch.nn.functional.one_hot(soft.squeeze(1).argmax(-1), 7).float()
    assert torch.equal(weights, expected)
    assert torch.all(weights[~mask] == 0)


def test_searches_decode_with_one_position_per_step_and_repeat_themselves():
    torch.manual_seed(0)
    model = RNNSearch(20, 20, 8, 4, 8, 4, attention=partial(HardAttention)).eval()
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0]])
    lengths = torch.tensor([5, 3])
    for search in (GreedySearch(max_length_offset=4), BeamSearch(3, max_length_offset=4)):
        first, second = search(model, src, lengths), search(model, src, lengths)
        for a, b in zip(first, second, strict=True):
            assert a[0].tokens == b[0].tokens
            rows = a[0].attention
            assert torch.all(rows.sum(-1) == 1) and torch.all((rows == 0) | (rows == 1))
