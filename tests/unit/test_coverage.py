import pytest
import torch
import torch.nn.functional as F

from alignmt.config import CONF_DIR, instantiate
from alignmt.models.attention.hard import reinforce_estimators, reinforce_loss
from alignmt.models.coverage import LinguisticCoverage, coverage_loss
from alignmt.models.seq2seq import reorder_state
from alignmt.special_tokens import PAD_ID
from tests.conftest import compose_config

ATTENTIONS = sorted(p.stem for p in (CONF_DIR / "model" / "attention").glob("*.yaml"))
COVERAGES = sorted(p.stem for p in (CONF_DIR / "model" / "coverage").glob("*.yaml"))


def build(family: str, attention: str, coverage: str, **sizes):
    cfg = compose_config(
        "train", [f"model={family}", f"model/attention={attention}", f"model/coverage={coverage}"]
    )
    torch.manual_seed(0)
    return instantiate(cfg.model, src_vocab_size=30, tgt_vocab_size=25, **sizes).eval()


SMALL = {
    "rnnsearch": dict(
        embedding_dim=8, encoder_hidden_size=6, decoder_hidden_size=12, maxout_size=4
    ),
    "luong": dict(embedding_dim=8, hidden_size=12, input_feeding=False),
}


def batch():
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0], [11, 3, 0, 0, 0]])
    tgt_in = torch.tensor([[2, 5, 6, 7, 8], [2, 8, 9, 0, 0], [2, 10, 11, 12, 0]])
    return src, torch.tensor([5, 3, 2]), tgt_in


def run_steps(model, src, lengths, tgt_in):
    memory, state = model.start(src, lengths)
    logits, weights, states = [], [], []
    for t in range(tgt_in.size(1)):
        step_logits, state, alpha = model.step(tgt_in[:, t], memory, state)
        logits.append(step_logits)
        weights.append(alpha)
        states.append(state)
    return torch.stack(logits, 1), torch.stack(weights, 1), states


@pytest.mark.parametrize("coverage", COVERAGES)
@pytest.mark.parametrize("attention", [a for a in ATTENTIONS if a != "dot"])
@pytest.mark.parametrize("family", ["rnnsearch", "luong"])
def test_coverage_composes_with_every_attention_variant(family, attention, coverage):
    model = build(family, attention, coverage, **SMALL[family])
    assert model.decoder.attention.coverage is not None
    src, lengths, tgt_in = batch()
    out = model(src, lengths, tgt_in)
    logits, weights, _ = run_steps(model, src, lengths, tgt_in)
    torch.testing.assert_close(logits, out.logits, atol=1e-5, rtol=1e-5)
    assert torch.all(weights.masked_select(~(src != PAD_ID).unsqueeze(1).expand_as(weights)) == 0)
    model.train()
    target = torch.roll(tgt_in, -1, 1)
    per_token = F.cross_entropy(
        model(src, lengths, tgt_in).logits.flatten(0, 1), target.flatten(), reduction="none"
    ).view(target.shape)
    loss = per_token.mean()
    estimators = reinforce_estimators(model)  # hard attention learns through its samples
    if estimators:
        mask = torch.ones_like(target, dtype=torch.bool)
        loss = loss + reinforce_loss(estimators, -per_token.sum(1), mask)[0]
    loss.backward()
    coverage_params = [p for n, p in model.named_parameters() if "coverage" in n]
    assert coverage_params and all(p.grad is not None for p in coverage_params)


def test_linguistic_coverage_without_fertility_is_the_running_sum_of_attention():
    model = build("rnnsearch", "additive", "linguistic", **SMALL["rnnsearch"])
    model.decoder.attention.coverage.fertility = None
    src, lengths, tgt_in = batch()
    _, weights, states = run_steps(model, src, lengths, tgt_in)
    for t, state in enumerate(states):
        coverage = state["attention"]["coverage"]["coverage"].squeeze(-1)
        torch.testing.assert_close(coverage, weights[:, : t + 1].sum(1))


def test_fertility_divides_the_attention():
    coverage = LinguisticCoverage(key_size=4, query_size=3, max_fertility=2.0)
    values = torch.randn(2, 5, 4)
    state = coverage.init(values, torch.ones(2, 5, dtype=torch.bool))
    weights = torch.softmax(torch.randn(2, 5), -1)
    updated = coverage.update(state, weights, torch.randn(2, 3))
    phi = 2.0 * torch.sigmoid(coverage.fertility(values)).squeeze(-1)
    torch.testing.assert_close(updated["coverage"].squeeze(-1), weights / phi)


def test_coverage_state_survives_beam_reordering():
    model = build("rnnsearch", "additive", "neural", **SMALL["rnnsearch"])
    src, lengths, tgt_in = batch()
    order = torch.tensor([2, 0, 1])
    memory, state = model.start(src, lengths)
    for t in range(2):
        _, state, _ = model.step(tgt_in[:, t], memory, state)
    memory, state = memory.index_select(order), reorder_state(state, order)
    for t in range(2, 5):
        logits, state, _ = model.step(tgt_in[order, t], memory, state)
    expected, _, _ = run_steps(model, src[order], lengths[order], tgt_in[order])
    torch.testing.assert_close(logits, expected[:, -1], atol=1e-6, rtol=1e-5)


def test_coverage_loss():
    # Attention that never returns to a source word: no overlap, no loss.
    disjoint = torch.eye(4).unsqueeze(0)
    mask = torch.ones(1, 4, dtype=torch.bool)
    assert coverage_loss(disjoint, mask).item() == 0.0
    # Step 2 attends again to word 0 (0.5) and word 1 (0.5) after step 1 put 1.0 on word 0:
    # min(0.5, 1.0) + min(0.5, 0) = 0.5, over 2 target positions -> 0.25.
    weights = torch.tensor([[[1.0, 0.0], [0.5, 0.5]]])
    assert coverage_loss(weights, torch.ones(1, 2, dtype=torch.bool)).item() == pytest.approx(0.25)
    # Padding positions of the target do not count.
    padded = torch.tensor([[True, False]])
    assert coverage_loss(weights, padded).item() == 0.0
    with pytest.raises(ValueError, match="needs a model with attention"):
        coverage_loss(None, mask)
