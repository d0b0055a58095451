from functools import partial

import pytest
import torch
import torch.nn.functional as F

from alignmt.models import RNNEncDec, RNNEncoder, RNNSearch
from alignmt.models.attention import AdditiveAttention
from alignmt.models.encoder import reverse_padded
from alignmt.models.init import initialise
from alignmt.special_tokens import PAD_ID

SIZES = dict(embedding_dim=12, encoder_hidden_size=10, decoder_hidden_size=14, maxout_size=8)


def make(cls, **kwargs):
    torch.manual_seed(0)
    if cls is RNNSearch:
        kwargs.setdefault("attention", partial(AdditiveAttention, attention_size=9))
    return cls(src_vocab_size=30, tgt_vocab_size=25, **SIZES, **kwargs)


def padded_batch():
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0], [11, 3, 0, 0, 0]])
    lengths = torch.tensor([5, 3, 2])
    tgt_in = torch.tensor([[2, 5, 6, 7], [2, 8, 9, 0], [2, 10, 0, 0]])
    tgt_out = torch.tensor([[5, 6, 7, 3], [8, 9, 3, 0], [10, 3, 0, 0]])
    return src, lengths, tgt_in, tgt_out


@pytest.mark.parametrize("cls", [RNNSearch, RNNEncDec])
def test_gradients_reach_every_parameter(cls):
    model = make(cls)
    src, lengths, tgt_in, tgt_out = padded_batch()
    logits = model(src, lengths, tgt_in).logits
    F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD_ID).backward()
    for name, param in model.named_parameters():
        assert param.grad is not None, name
        assert param.grad.abs().sum() > 0, name


@pytest.mark.parametrize("cls", [RNNSearch, RNNEncDec])
def test_step_by_step_decoding_matches_teacher_forcing(cls):
    model = make(cls).eval()
    src, lengths, tgt_in, _ = padded_batch()
    out = model(src, lengths, tgt_in)
    memory, state = model.start(src, lengths)
    logits, weights = [], []
    for t in range(tgt_in.size(1)):
        step_logits, state, alpha = model.step(tgt_in[:, t], memory, state)
        logits.append(step_logits)
        weights.append(alpha)
    torch.testing.assert_close(torch.stack(logits, 1), out.logits, atol=1e-5, rtol=1e-5)
    if out.attention is not None:
        torch.testing.assert_close(torch.stack(weights, 1), out.attention, atol=1e-6, rtol=1e-5)


def test_rnnsearch_attention_is_a_distribution_over_real_source_words():
    model = make(RNNSearch)
    src, lengths, tgt_in, _ = padded_batch()
    weights = model(src, lengths, tgt_in).attention  # [B, T, S]
    mask = (src != PAD_ID).unsqueeze(1).expand_as(weights)
    assert torch.all(weights[~mask] == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4))


@pytest.mark.parametrize("cls", [RNNSearch, RNNEncDec])
def test_padding_does_not_change_a_sentences_output(cls):
    model = make(cls).eval()
    src, lengths, tgt_in, _ = padded_batch()
    batched = model(src, lengths, tgt_in).logits
    alone = model(src[2:, :2], lengths[2:], tgt_in[2:, :2]).logits
    torch.testing.assert_close(batched[2:, :2], alone, atol=1e-5, rtol=1e-5)


def test_rnnsearch_initial_state_comes_from_the_backward_first_annotation():
    model = make(RNNSearch).eval()
    src, lengths, _, _ = padded_batch()
    encoded = model.encoder(src, lengths)
    H = model.encoder.hidden_size
    torch.testing.assert_close(encoded.final[:, H:], encoded.states[:, 0, H:])
    _, state = model.decoder.start(encoded)
    expected = torch.tanh(model.decoder.init_proj(encoded.states[:, 0, H:]))
    torch.testing.assert_close(state["hidden"], expected)


def test_encoder_reverse_source_keeps_annotations_in_source_order():
    torch.manual_seed(0)
    enc = RNNEncoder(20, 6, 5, bidirectional=False, reverse_source=True).eval()
    src = torch.tensor([[4, 5, 6, 3], [7, 3, 0, 0]])
    lengths = torch.tensor([4, 2])
    states = enc(src, lengths).states
    manual = RNNEncoder(20, 6, 5, bidirectional=False).eval()
    manual.load_state_dict(enc.state_dict())
    reversed_states = manual(reverse_padded(src, lengths), lengths).states
    torch.testing.assert_close(states, reverse_padded(reversed_states, lengths))
    assert reverse_padded(src, lengths).tolist() == [[3, 6, 5, 4], [3, 7, 0, 0]]


def test_paper_initialisation():
    model = make(RNNSearch, init="paper")
    U = model.decoder.recurrent_proj.weight
    H = U.size(1)
    for block in U.split(H):
        torch.testing.assert_close(block @ block.T, torch.eye(H), atol=1e-5, rtol=0)
    attention = model.decoder.attention
    assert attention.key_proj.weight.std() < 0.002
    assert torch.all(attention.energy.weight == 0)
    assert torch.all(model.decoder.maxout.proj.bias == 0)
    assert 0.005 < model.decoder.maxout.proj.weight.std() < 0.015
    with pytest.raises(ValueError, match=r"model\.init"):
        initialise(model, "xavier")


def test_models_need_torch_alone():
    """The GPU smoke benchmark runs the models where only torch is installed."""
    import subprocess
    import sys

    code = (
        "import sys, alignmt.models, alignmt.models.coverage, alignmt.decoding;"
        "print(sorted(m for m in ('pytorch_lightning', 'datasets', 'hydra', 'sacrebleu')"
        " if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "[]", result.stderr
