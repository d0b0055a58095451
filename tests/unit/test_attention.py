import pytest
import torch

from alignmt.models import functional, native_energies
from alignmt.models.attention import AdditiveAttention


def test_additive_attention_weights_and_context():
    torch.manual_seed(0)
    attention = AdditiveAttention(query_size=6, key_size=8, attention_size=5)
    values = torch.randn(3, 7, 8, requires_grad=True)
    mask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3, [True] + [False] * 6])
    keys = attention.precompute(values)
    query = torch.randn(3, 6)
    context, weights, state = attention(query, keys, values, mask)
    assert context.shape == (3, 8) and weights.shape == (3, 7) and state == {}
    torch.testing.assert_close(weights.sum(-1), torch.ones(3))
    assert torch.all(weights[~mask] == 0)
    torch.testing.assert_close(weights[2, 0], torch.tensor(1.0))
    torch.testing.assert_close(context, torch.einsum("bs,bsd->bd", weights, values))
    context.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in attention.parameters())


def test_all_steps_at_once_equals_one_step_at_a_time():
    torch.manual_seed(0)
    attention = AdditiveAttention(query_size=6, key_size=8, attention_size=5)
    values = torch.randn(2, 5, 8)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    keys = attention.precompute(values)
    queries = torch.randn(2, 4, 6)
    context, weights, _ = attention(queries, keys, values, mask)
    for t in range(4):
        c, w, _ = attention(queries[:, t], keys, values, mask)
        torch.testing.assert_close(c, context[:, t])
        torch.testing.assert_close(w, weights[:, t])


def test_in_place_tanh_matches_torch_tanh_in_value_and_gradient():
    from alignmt.models.functional import tanh_

    x = torch.randn(3, 5, 7, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(3, 5, 7, dtype=torch.float64)
    ours = (tanh_(x * 1.0) * weights).sum()  # x * 1.0: a fresh intermediate, as in attention
    (grad,) = torch.autograd.grad(ours, x)
    reference = (torch.tanh(x) * weights).sum()
    (expected,) = torch.autograd.grad(reference, x)
    assert torch.allclose(ours, reference, atol=1e-12)
    assert torch.allclose(grad, expected, atol=1e-12)
    assert torch.autograd.gradcheck(lambda t: tanh_(t * 1.0), (x,))


@pytest.mark.parametrize(
    "shape",  # B, T, S, A: several batch rows per block, queries split over blocks, huge rows
    [(7, 1, 9, 16), (3, 50, 11, 32), (2, 3, 300, 8), (5, 5, 13, 37)],
)
@pytest.mark.parametrize("native", [False, True], ids=["blocks", "native"])
def test_decoding_energies_equal_the_definition(shape, native, monkeypatch):
    """Without gradients the additive energies run in one native pass (where the library
    builds) or block by block; each must still be v . tanh(W_a s + b_a + U_a h_j), computed
    here in float64 from the definition."""
    if native and native_energies.library() is None:
        pytest.skip("no C compiler here")
    monkeypatch.setattr(functional, "ENERGY_BLOCK", 512)  # many blocks of every kind
    calls = []
    passes = native_energies.query_energies
    monkeypatch.setattr(native_energies, "usable", lambda keys: native)
    monkeypatch.setattr(native_energies, "query_energies", lambda *a: calls.append(1) or passes(*a))
    B, T, S, A = shape
    torch.manual_seed(0)
    attention = AdditiveAttention(query_size=6, key_size=5, attention_size=A)
    query, keys = torch.randn(B, T, 6), attention.precompute(torch.randn(B, S, 5))
    with torch.no_grad():
        blocked = attention.score(query, keys, {})
        W, b = attention.query_proj.weight.double(), attention.query_proj.bias.double()
        terms = query.double() @ W.T + b
        hidden = torch.tanh(terms.unsqueeze(2) + keys.double().unsqueeze(1))
        expected = hidden @ attention.energy.weight.double().view(-1)
    torch.testing.assert_close(blocked.double(), expected, rtol=1e-5, atol=1e-5)
    assert bool(calls) == native
    with torch.enable_grad():  # training takes the one-shot path: the same energies
        torch.testing.assert_close(attention.score(query, keys, {}), blocked)
