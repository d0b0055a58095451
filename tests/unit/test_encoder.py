"""The encoder's padded-batch GRU path equals nn.GRU over packed sequences, values and gradients."""

import copy

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from alignmt.models.encoder import RNNEncoder, reverse_padded


def packed_reference(encoder: RNNEncoder, src, lengths):
    """What the encoder computes by definition: nn.GRU over the packed batch."""
    embedded = encoder.embedding(reverse_padded(src, lengths) if encoder.reverse_source else src)
    packed = pack_padded_sequence(embedded, lengths, batch_first=True, enforce_sorted=False)
    states, final = encoder.rnn(packed)
    states, _ = pad_packed_sequence(states, batch_first=True, total_length=src.size(1))
    if encoder.reverse_source:
        states = reverse_padded(states, lengths)
    return states, encoder._by_layer(final)


@pytest.mark.parametrize(
    "layers, bidirectional, reverse_source", [(1, True, False), (2, True, False), (2, False, True)]
)
def test_padded_gru_equals_the_packed_recurrence(layers, bidirectional, reverse_source):
    torch.manual_seed(0)
    encoder = RNNEncoder(
        30, 6, 5, num_layers=layers, bidirectional=bidirectional, reverse_source=reverse_source
    ).double()
    lengths = torch.tensor([7, 3, 5, 1])
    src = torch.randint(4, 30, (4, 7))
    src[torch.arange(7) >= lengths.unsqueeze(1)] = 0  # PAD_ID
    ours = encoder(src, lengths)
    states, hidden = packed_reference(encoder, src, lengths)
    torch.testing.assert_close(ours.states, states, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(ours.hidden, hidden, atol=1e-12, rtol=1e-10)
    weights = torch.randn_like(states), torch.randn_like(hidden)
    loss = lambda s, h: (s * weights[0]).sum() + (h * weights[1]).sum()  # noqa: E731
    params = list(encoder.parameters())
    expected = torch.autograd.grad(loss(states, hidden), params)
    got = torch.autograd.grad(loss(ours.states, ours.hidden), params)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, atol=1e-12, rtol=1e-10)


def test_in_float32_the_padded_gru_is_as_exact_as_atens():
    """The fast path (oneDNN products, the native GRU step) against the float64 definition:
    its error is at most twice that of ATen's float32 GRU over the packed batch."""
    torch.manual_seed(0)
    encoder = RNNEncoder(30, 16, 24, num_layers=2, bidirectional=True)
    lengths = torch.tensor([9, 3, 6, 1, 9])
    src = torch.randint(4, 30, (5, 9))
    src[torch.arange(9) >= lengths.unsqueeze(1)] = 0  # PAD_ID
    exact = copy.deepcopy(encoder).double()

    def padded(model):
        out = model(src, lengths)
        return out.states, out.hidden

    results = {}
    for name, model, run in [
        ("ours", encoder, padded),
        ("aten", encoder, lambda m: packed_reference(m, src, lengths)),
        ("exact", exact, lambda m: packed_reference(m, src, lengths)),
    ]:
        states, hidden = run(model)
        weights = torch.linspace(-1, 1, states.numel()).view_as(states).to(states.dtype)
        grads = torch.autograd.grad((states * weights).sum() + hidden.sum(), model.parameters())
        results[name] = [states, hidden, *grads]
    for ours, aten, exact in zip(*results.values(), strict=True):
        error = (ours.double() - exact).abs().max().item()
        aten_error = (aten.double() - exact).abs().max().item()
        assert error <= 2 * aten_error + 1e-7 * exact.abs().max().item(), (error, aten_error)
