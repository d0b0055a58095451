"""MIXER's and minimum risk training's losses against their definitions, and REINFORCE moving
a drawn output's probability with the sign of its reward minus the baseline."""

import math

import pytest
import torch

from alignmt import objectives
from alignmt.build import build
from alignmt.objectives import (
    MaximumLikelihood,
    expected_risk,
    mixer_loss,
    padded_sequences,
    sequence_log_probs,
    words_of,
)
from alignmt.rollout import Rollout
from alignmt.special_tokens import BOS_ID, EOS_ID, PAD_ID


def test_mixer_loss_is_cross_entropy_then_reinforce_per_token():
    # One sentence of three tokens: the first fed from the reference, two drawn; reward 0.8.
    log_probs = torch.tensor([[-0.5, -1.0, -2.0]], requires_grad=True)
    baselines = torch.tensor([[0.0, 0.3, 0.6]], requires_grad=True)
    forced = torch.tensor([[True, False, False]])
    run = Rollout(torch.zeros(1, 3), log_probs, torch.zeros(1, 3, 1), forced, torch.ones(1, 3) > 0)
    loss, logs = mixer_loss(run, torch.tensor([0.8]), baselines)
    # (0.5 - (0.8 - 0.3)(-1.0) - (0.8 - 0.6)(-2.0)) / 3 + ((0.3 - 0.8)^2 + (0.6 - 0.8)^2) / 2
    assert float(loss.detach()) == pytest.approx((0.5 + 0.5 + 0.4) / 3 + (0.25 + 0.04) / 2)
    loss.backward()
    # d/d log p: -1/3 on the fed token, -(r - b_t)/3 on the drawn ones (the REINFORCE weight).
    torch.testing.assert_close(log_probs.grad, torch.tensor([[-1 / 3, -0.5 / 3, -0.2 / 3]]))
    # The baseline learns only from its squared error: 2 (b_t - r) / 2 on the drawn tokens.
    torch.testing.assert_close(baselines.grad, torch.tensor([[0.0, -0.5, -0.2]]))
    assert logs["reward"] == pytest.approx(0.8) and logs["cross_entropy"] == pytest.approx(0.5)


def test_expected_risk_and_its_derivative_by_hand():
    # Candidates with P = 0.5, 0.3, 0.2 (and a padded slot), risks 0, 0.5, 1.
    p = torch.tensor([[0.5, 0.3, 0.2, 1.0]])
    log_probs = p.log().requires_grad_()
    risks = torch.tensor([[0.0, 0.5, 1.0, 7.0]])
    mask = torch.tensor([[True, True, True, False]])
    risk = expected_risk(log_probs, risks, mask, sharpness=1.0)
    assert float(risk) == pytest.approx(0.5 * 0 + 0.3 * 0.5 + 0.2 * 1.0)  # 0.35
    risk.backward()
    # dR/d log P_k = alpha Q_k (risk_k - R): 0.5(-0.35), 0.3(0.15), 0.2(0.65); 0 off the set.
    torch.testing.assert_close(log_probs.grad, torch.tensor([[-0.175, 0.045, 0.13, 0.0]]))

    # Sharpness 1/2: Q proportional to sqrt(P).
    log_probs = p.log().requires_grad_()
    risk = expected_risk(log_probs, risks, mask, sharpness=0.5)
    q = torch.tensor([math.sqrt(0.5), math.sqrt(0.3), math.sqrt(0.2)])
    q = q / q.sum()  # 0.41545, 0.32180, 0.26275
    expected = float(q @ torch.tensor([0.0, 0.5, 1.0]))  # 0.42365
    assert float(risk) == pytest.approx(expected)
    risk.backward()
    grad = 0.5 * q * (torch.tensor([0.0, 0.5, 1.0]) - expected)
    torch.testing.assert_close(log_probs.grad[0, :3], grad)
    assert expected == pytest.approx(0.42365, abs=1e-5)


@pytest.fixture
def built(compose_train):
    def make(*overrides):
        done = build(compose_train(*overrides))
        batch = next(iter(done.datamodule.val_dataloader()))
        return done, batch

    return make


@pytest.mark.parametrize("reward", [1.0, 0.0])
def test_reinforce_moves_a_drawn_output_with_its_reward_against_the_baseline(
    built, monkeypatch, reward
):
    done, batch = built("objective=mixer", "objective.delta_start=1000")  # all drawn
    task, batch = done.task, batch.select([0])
    mixer = task.objective
    mixer.reward = lambda hypotheses, references: [reward] * len(hypotheses)
    with torch.no_grad():  # the baseline says 0.5 whatever the state
        mixer.baseline.weight.zero_()
        mixer.baseline.bias.fill_(0.5)
    runs = []
    draw = objectives.rollout
    monkeypatch.setattr(objectives, "rollout", lambda *a: runs.append(draw(*a)) or runs[-1])
    optimizer = torch.optim.SGD(task.model.parameters(), lr=0.01)
    loss, _, logs = mixer(task, batch)
    loss.backward()

    run = runs[0]
    assert not run.forced.any() and logs["reward"] == reward
    output = words_of(run.tokens[0].tolist())

    def log_p() -> float:
        with torch.no_grad():
            tgt = padded_sequences([output], batch.src.device)
            first = torch.tensor([0])
            return float(
                sequence_log_probs(task.model, batch.src, batch.src_lengths, first, *tgt)[0]
            )

    before = log_p()
    assert before == pytest.approx(float(run.log_probs[0][run.mask[0]].sum()), abs=1e-4)
    optimizer.step()
    after = log_p()
    assert after > before if reward > 0.5 else after < before


def test_mixer_with_delta_zero_is_maximum_likelihood(built):
    done, batch = built("objective=mixer", "objective.delta_start=0", "objective.delta_increment=0")
    loss, _, logs = done.task.objective(done.task, batch)
    mle, _, _ = MaximumLikelihood()(done.task, batch)
    assert float(loss) == pytest.approx(float(mle), rel=1e-4)
    assert logs["sampled_share"] == 0.0


def test_mixer_feeds_all_but_the_last_delta_reference_tokens(built, monkeypatch):
    done, batch = built("objective=mixer", "objective.delta_start=3", "objective.increment_every=5")
    mixer = done.task.objective
    assert [mixer.delta(step) for step in (0, 4, 5, 12)] == [3, 3, 5, 7]
    runs = []
    draw = objectives.rollout
    monkeypatch.setattr(objectives, "rollout", lambda *a: runs.append(draw(*a)) or runs[-1])
    mixer(done.task, batch)
    run, reference = runs[0], batch.tgt_out
    keep = ((reference != PAD_ID).sum(1) - 3).clamp(min=0)
    assert torch.equal(run.forced.sum(1), keep)
    for b, k in enumerate(keep.tolist()):
        assert torch.equal(run.tokens[b, :k], reference[b, :k])
        drawn = run.tokens[b][run.sampled[b]].tolist()
        assert drawn[-1] == EOS_ID and not {PAD_ID, BOS_ID} & set(drawn)
    # Rows leave the batch as they finish: each row's log-probabilities are still its own.
    outputs = [words_of(row) for row in run.tokens.tolist()]
    with torch.no_grad():
        tgt = padded_sequences(outputs, batch.src.device)
        rows = torch.arange(len(outputs))
        forced = sequence_log_probs(done.task.model, batch.src, batch.src_lengths, rows, *tgt)
    drawn_sums = (run.log_probs * run.mask).sum(1).detach()
    torch.testing.assert_close(drawn_sums, forced, atol=1e-3, rtol=1e-4)


def test_several_outputs_of_one_source_score_as_if_each_had_its_own_copy(built):
    done, batch = built("objective=mrt")
    model = done.task.model
    owner = torch.tensor([0, 0, 1, 2, 2, 2])
    outputs = [(5, 6), (7,), (8, 9, 10), (6,), (), (9, 9)]
    tgt_in, tgt_out = padded_sequences(outputs, batch.src.device)
    shared = sequence_log_probs(model, batch.src, batch.src_lengths, owner, tgt_in, tgt_out)
    shared_grads = torch.autograd.grad(shared.sum(), list(model.parameters()), allow_unused=True)
    # the definition: each output scored with the whole model on its own copy of the source
    logits = model(batch.src[owner], batch.src_lengths[owner], tgt_in).logits.float()
    tokens = torch.log_softmax(logits, -1).gather(2, tgt_out.unsqueeze(2)).squeeze(2)
    own = tokens.masked_fill(tgt_out == PAD_ID, 0.0).sum(1)
    own_grads = torch.autograd.grad(own.sum(), list(model.parameters()), allow_unused=True)
    torch.testing.assert_close(shared, own, atol=1e-5, rtol=1e-5)
    for a, b in zip(shared_grads, own_grads, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_draws_of_one_source_encoded_once_are_the_draws_of_its_copies(built):
    done, batch = built("objective=mrt")
    model, K = done.task.model, 3
    rows = torch.arange(len(batch)).repeat_interleave(K)
    caps = torch.full((len(rows),), 6)
    nothing, keep = batch.tgt_out[rows, :0], torch.zeros(len(rows), dtype=torch.long)
    with torch.no_grad():
        torch.manual_seed(7)
        once = objectives.rollout(
            model, batch.src, batch.src_lengths, nothing, keep, caps, sources=rows
        )
        torch.manual_seed(7)
        copies = objectives.rollout(
            model, batch.src[rows], batch.src_lengths[rows], nothing, keep, caps
        )
    assert torch.equal(once.tokens, copies.tokens)
    torch.testing.assert_close(once.log_probs, copies.log_probs, atol=1e-5, rtol=1e-5)


def test_mrt_candidate_sets_are_distinct_draws_and_the_reference(built):
    done, batch = built("objective=mrt", "objective.candidates=6")
    mrt = done.task.objective
    sets = mrt.candidate_sets(done.task.model, batch)
    for b, candidates in enumerate(sets):
        reference = words_of(batch.tgt_out[b].tolist())
        assert candidates.count(reference) == 1
        assert len(set(candidates)) == len(candidates) <= 7
        assert not any({EOS_ID, PAD_ID, BOS_ID} & set(y) for y in candidates)
    mrt.include_reference = False
    assert all(len(c) <= 6 for c in mrt.candidate_sets(done.task.model, batch))
    risk, out, logs = mrt(done.task, batch)
    assert out is None and 0.0 <= float(risk) <= 1.0 and logs["candidates"] > 1
    risk.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in done.task.model.parameters())
