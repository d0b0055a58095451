"""The contract every attention variant in conf/model/attention/ keeps, and each one's maths."""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from alignmt.config import CONF_DIR, instantiate
from alignmt.models import Luong, RNNSearch
from alignmt.models.attention import (
    DotAttention,
    LocalMonotonicAttention,
    LocalPredictiveAttention,
    LocationAttention,
)
from alignmt.models.attention.hard import reinforce_estimators, reinforce_loss
from alignmt.special_tokens import PAD_ID
from tests.conftest import compose_config

VARIANTS = sorted(p.stem for p in (CONF_DIR / "model" / "attention").glob("*.yaml"))
SIZE = 8


def test_every_paper_variant_has_a_config():
    assert set(VARIANTS) >= {
        "additive",
        "dot",
        "general",
        "concat",
        "location",
        "local_m",
        "local_p",
    }


def build(name: str, **sizes):
    cfg = compose_config("train", ["model=luong", f"model/attention={name}"])
    torch.manual_seed(0)
    return instantiate(cfg.model.attention)(query_size=SIZE, key_size=SIZE, **sizes)


def padded_memory(attention):
    torch.manual_seed(1)
    lengths = torch.tensor([7, 4, 1])
    mask = torch.arange(7).unsqueeze(0) < lengths.unsqueeze(1)
    values = torch.randn(3, 7, SIZE).masked_fill(~mask.unsqueeze(-1), 0.0)
    return values, mask, attention.precompute(values), attention.init_state(values, mask)


@pytest.mark.parametrize("name", VARIANTS)
def test_attention_contract(name):
    attention = build(name)
    values, mask, keys, state = padded_memory(attention)
    queries = torch.randn(3, 5, SIZE, requires_grad=True)
    context, weights, _ = attention(queries, keys, values, mask, state)
    assert context.shape == (3, 5, SIZE) and weights.shape == (3, 5, 7)
    assert torch.all(weights.masked_select(~mask.unsqueeze(1).expand_as(weights)) == 0)
    assert torch.all(weights >= 0)
    totals = weights.sum(-1)
    if attention.normalized:
        torch.testing.assert_close(totals, torch.ones(3, 5))
    else:
        assert torch.all(totals <= 1 + 1e-6) and torch.all(totals > 0)
    torch.testing.assert_close(context, torch.bmm(weights, values))
    loss = (context * torch.randn_like(context)).sum()
    estimators = reinforce_estimators(attention)  # sampled choices learn from a reward
    if estimators:
        rewards = torch.tensor([-1.0, -2.0, -4.0])
        loss = loss + reinforce_loss(estimators, rewards, torch.ones(3, 5, dtype=torch.bool))[0]
    loss.backward()
    assert queries.grad.abs().sum() > 0
    for param_name, param in attention.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, param_name


@pytest.mark.parametrize("name", VARIANTS)
def test_all_steps_at_once_equals_one_step_at_a_time(name):
    attention = build(name).eval()
    values, mask, keys, state = padded_memory(attention)
    queries = torch.randn(3, 5, SIZE)
    context, weights, _ = attention(queries, keys, values, mask, state)
    for t in range(5):
        c, w, state = attention(queries[:, t], keys, values, mask, state)
        torch.testing.assert_close(w, weights[:, t])
        torch.testing.assert_close(c, context[:, t])


def test_local_windows_are_clipped_at_the_sentence_edges():
    attention = LocalMonotonicAttention(SIZE, SIZE, window=2)
    values, mask, keys, state = padded_memory(attention)
    _, weights, _ = attention(torch.randn(3, 9, SIZE), keys, values, mask, state)
    assert torch.all(weights[0, 0, 3:] == 0) and torch.all(weights[0, 0, :3] > 0)  # t=0: [0, 2]
    assert torch.all(weights[0, 4, [0, 1]] == 0) and torch.all(weights[0, 4, 2:7] > 0)
    # t >= length: the centre stays on the last word instead of leaving the sentence.
    assert weights[1, 8, 0] == 0 and torch.all(weights[1, 8, 1:4] > 0)  # centre 3: [1, 3]
    torch.testing.assert_close(weights[2, :, 0], torch.ones(9))


def test_local_p_centres_lie_in_the_sentence_and_weights_follow_the_gaussian():
    attention = LocalPredictiveAttention(SIZE, SIZE, window=4)
    values, mask, keys, _ = padded_memory(attention)
    queries = torch.randn(3, 6, SIZE) * 5
    centres = attention.centres(queries, mask, None)
    lengths = mask.sum(-1, keepdim=True)
    assert torch.all(centres >= 0) and torch.all(centres <= lengths)
    _, weights, _ = attention(queries, keys, values, mask)
    positions = torch.arange(7.0)
    gaussian = torch.exp(-((positions - centres.unsqueeze(-1)) ** 2) / (2 * 2.0**2))
    in_window = ((positions - centres.unsqueeze(-1)).abs() <= 4) & mask.unsqueeze(1)
    energies = attention.scorer.score(queries, keys, None)
    align = torch.softmax(energies.masked_fill(~in_window, float("-inf")), -1)
    torch.testing.assert_close(weights, align * gaussian)


def test_local_p_hand_computed_example():
    # v_p = 0 puts the centre at S/2 = 2.5 for a source of 5 positions; the dot score of a
    # zero query is 0 everywhere, so align is uniform over the window [0.5, 4.5] -> 1..4.
    attention = LocalPredictiveAttention(2, 2, score=DotAttention, window=2)
    torch.nn.init.zeros_(attention.position_energy.weight)
    values = torch.arange(10.0).view(1, 5, 2)
    mask = torch.ones(1, 5, dtype=torch.bool)
    context, weights, _ = attention(torch.zeros(1, 2), values, values, mask)
    sigma = 1.0
    expected = [0.0] + [
        0.25 * torch.exp(torch.tensor(-((s - 2.5) ** 2) / (2 * sigma**2))).item()
        for s in (1, 2, 3, 4)
    ]
    torch.testing.assert_close(weights, torch.tensor([expected]))
    torch.testing.assert_close(context, torch.tensor([expected]) @ values[0])


def test_location_attention_gives_no_weight_past_its_maximum_length():
    attention = LocationAttention(SIZE, SIZE, max_length=5)
    values, mask, keys, _ = padded_memory(attention)
    _, weights, _ = attention(torch.randn(3, SIZE), keys, values, mask)
    assert torch.all(weights[:, 5:] == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3))


def test_dot_attention_rejects_mismatched_sizes():
    with pytest.raises(ValueError, match="general attention"):
        DotAttention(8, 16)


def luong(name: str, **kwargs):
    cfg = compose_config("train", ["model=luong", f"model/attention={name}"])
    torch.manual_seed(0)
    kwargs = {"embedding_dim": 10, "hidden_size": 12, "num_layers": 2, **kwargs}
    attention = instantiate(cfg.model.attention)
    return Luong(30, 25, attention=attention, **kwargs).eval()


def rnnsearch(name: str):
    cfg = compose_config("train", ["model=rnnsearch", f"model/attention={name}"])
    torch.manual_seed(0)
    return RNNSearch(
        30,
        25,
        embedding_dim=10,
        encoder_hidden_size=6,
        decoder_hidden_size=12,
        maxout_size=5,
        attention=instantiate(cfg.model.attention),
    ).eval()


def padded_batch():
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0], [11, 3, 0, 0, 0]])
    lengths = torch.tensor([5, 3, 2])
    tgt_in = torch.tensor([[2, 5, 6, 7, 8, 9], [2, 8, 9, 0, 0, 0], [2, 10, 11, 12, 13, 0]])
    return src, lengths, tgt_in


def assert_step_path_matches(model):
    src, lengths, tgt_in = padded_batch()
    out = model(src, lengths, tgt_in)
    memory, state = model.start(src, lengths)
    logits = []
    for t in range(tgt_in.size(1)):
        step_logits, state, _ = model.step(tgt_in[:, t], memory, state)
        logits.append(step_logits)
    torch.testing.assert_close(torch.stack(logits, 1), out.logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", VARIANTS)
def test_luong_parallel_teacher_forcing_matches_step_by_step(name):
    assert_step_path_matches(luong(name, input_feeding=False, rnn_type="lstm"))


@pytest.mark.parametrize("name", [v for v in VARIANTS if v != "dot"])
def test_rnnsearch_takes_every_attention_variant(name):
    assert_step_path_matches(rnnsearch(name))


@pytest.mark.parametrize(
    "options",
    [
        {"input_feeding": True},
        {"input_feeding": False, "rnn_type": "gru", "bidirectional_encoder": True},
        {"input_feeding": False, "reverse_source": True, "num_layers": 1},
    ],
)
def test_luong_gradients_reach_every_parameter(options):
    model = luong("local_p", **options).train()
    src, lengths, tgt_in = padded_batch()
    tgt_out = torch.roll(tgt_in, -1, 1)
    logits = model(src, lengths, tgt_in).logits
    F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD_ID).backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name
    assert_step_path_matches(model.eval())


def test_luong_without_attention_and_with_copied_encoder_states():
    cfg = compose_config("train", ["model=luong", "~model/attention", "model.input_feeding=false"])
    model = instantiate(cfg.model, src_vocab_size=30, tgt_vocab_size=25)
    assert model.decoder.attention is None and model.decoder.bridge is None
    src, lengths, _ = padded_batch()
    encoded = model.encoder(src, lengths)
    _, state = model.decoder.start(encoded)
    torch.testing.assert_close(state["hidden"], encoded.hidden)
    assert_step_path_matches(model.eval())
    with pytest.raises(ValueError, match="input_feeding needs attention"):
        Luong(30, 25, attention=None, input_feeding=True)


def test_luong_config_files_exist():
    assert (Path(CONF_DIR) / "model" / "luong.yaml").is_file()
