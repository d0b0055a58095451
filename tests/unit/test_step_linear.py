"""The recurrences' per-step products with oneDNN-packed weights compute x W^T (+ b, + other)
to float32 rounding, fall back to addmm where oneDNN does not run, and leave the recurrences
as exact as addmm does."""

import copy

import pytest
import torch

from alignmt.models import step_linear
from alignmt.models.readout import MaxoutReadout
from alignmt.models.step_linear import PackedReadout, StepLinear
from tests.unit.test_native_energies import MODELS, TOL, assert_as_exact, train_step

needs_onednn = pytest.mark.skipif(not step_linear.onednn_available(), reason="no oneDNN here")


@needs_onednn
@pytest.mark.parametrize("transposed", [False, True])  # the backward passes pack W^T views
def test_packed_products_equal_the_definition(transposed):
    torch.manual_seed(0)
    B, n_in, n_out = 5, 37, 23  # off every vector width
    weight = torch.randn(n_in, n_out).t() if transposed else torch.randn(n_out, n_in)
    x, bias = torch.randn(B, n_in), torch.randn(n_out)
    wide = torch.randn(B, n_out + 4)
    other = wide[:, 2 : 2 + n_out]  # a strided slice, as the recurrences pass
    by_weight = StepLinear(weight, B)
    assert by_weight.packed is not None
    exact = x.double() @ weight.double().t()

    torch.testing.assert_close(by_weight(x).double(), exact, **TOL)
    torch.testing.assert_close(by_weight(x, bias).double(), exact + bias.double(), **TOL)
    torch.testing.assert_close(by_weight.plus(x, other).double(), exact + other.double(), **TOL)
    buffer = torch.zeros(3, B, n_out)  # time-major, written in place
    returned = by_weight.plus(x, other, out=buffer[1])
    assert returned.data_ptr() == buffer[1].data_ptr()
    torch.testing.assert_close(buffer[1].double(), exact + other.double(), **TOL)
    assert not buffer[0].any() and not buffer[2].any()


@needs_onednn
def test_a_packed_readout_gives_the_readouts_logits_and_packs_once():
    """Scheduled sampling's per-step logits of a few rows: the maxout readout's own, with W_o
    packed at the first call and reused for every later one."""
    torch.manual_seed(0)
    readout = MaxoutReadout(21, 8, 45).eval()
    exact = copy.deepcopy(readout).double()
    packed = PackedReadout(readout.hidden, readout.output, batch=16)
    assert packed.project is None  # nothing packed until logits are asked for
    projects = []
    for rows in (16, 3, 1):  # the rows sampled vary from step to step
        features = torch.randn(rows, 21)
        torch.testing.assert_close(packed(features).double(), exact(features.double()), **TOL)
        projects.append(packed.project)
    assert projects[0].packed is not None and projects == [projects[0]] * 3


def test_other_dtypes_and_a_disabled_onednn_use_addmm(monkeypatch):
    weight, x = torch.randn(4, 3, dtype=torch.float64), torch.randn(2, 3, dtype=torch.float64)
    by_weight = StepLinear(weight, 2)
    assert by_weight.packed is None
    assert torch.equal(by_weight(x), x @ weight.t())
    monkeypatch.setattr(step_linear, "onednn_available", lambda: False)
    assert StepLinear(weight.float(), 2).packed is None


@needs_onednn
@pytest.mark.parametrize("name", sorted(MODELS))
def test_recurrences_with_packed_weights_are_as_exact_as_addmm(name, monkeypatch):
    """Both float32 paths against the same model in float64 (as the native attention pass is
    checked): packing changes the products' summation order, nothing else."""
    torch.manual_seed(0)
    model = MODELS[name]()
    packed = []
    init = StepLinear.__init__

    def recording(self, *args):
        init(self, *args)
        packed.append(self.packed is not None)

    monkeypatch.setattr(StepLinear, "__init__", recording)
    loss, attention, grads = train_step(model)
    assert packed and all(packed)  # the fused recurrence ran, forward and backward, packed
    monkeypatch.setattr(step_linear, "onednn_available", lambda: False)
    packed.clear()
    *_, addmm_grads = train_step(model)
    assert packed and not any(packed)
    exact_loss, exact_attention, exact_grads = train_step(copy.deepcopy(model).double())
    torch.testing.assert_close(loss.double(), exact_loss, **TOL)
    torch.testing.assert_close(attention.double(), exact_attention, **TOL)
    assert_as_exact(grads, addmm_grads, exact_grads)


@needs_onednn
def test_a_search_reads_out_through_the_weight_packed_while_it_is_unchanged():
    """Inside a search (`packed_weights`) a step's logits (Decoder.step_readout) are the
    readout's to float32 rounding, through W_o packed once and kept for the next search while
    the weight is unchanged; a search after a fused Adam step (which leaves no version on the
    parameters) or a loaded state dict packs the weight as it is then; outside a search, at one
    row, under autograd and for the int8 decoder's layers nothing is packed."""
    from alignmt.models import RNNSearch
    from alignmt.models.quantized import Int8Linear

    torch.manual_seed(0)
    model = RNNSearch(20, 15, 16, 16, 24, 16).eval()
    decoder, layer = model.decoder, model.decoder.maxout.output
    features = torch.randn(6, decoder.maxout.proj.in_features)

    def search():
        with step_linear.packed_weights(), torch.no_grad():
            logits = decoder.step_readout(features)
            pack = step_linear.packed_layer(layer, rows=6)
            assert pack.packed is not None
            decoder.step_readout(features)
            assert step_linear.packed_layer(layer, rows=6) is pack  # packed once
            exact = copy.deepcopy(decoder).double().readout(features.double())
        torch.testing.assert_close(logits.double(), exact, **TOL)
        return pack

    first = search()
    assert search() is first  # the same weight: the same pack
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    torch.optim.Adam(model.parameters(), lr=0.5, fused=True).step()
    second = search()  # the updated weights, though their versions did not move
    assert second is not first
    model.load_state_dict(RNNSearch(20, 15, 16, 16, 24, 16).state_dict())
    assert search() is not second

    with torch.no_grad():
        assert torch.equal(decoder.step_readout(features), decoder.readout(features))  # no search
        with step_linear.packed_weights():
            one_row = features[:1]
            assert torch.equal(decoder.step_readout(one_row), decoder.readout(one_row))
    with step_linear.packed_weights():
        assert decoder.step_readout(features).requires_grad  # autograd: the readout itself
        int8 = Int8Linear(layer.in_features, layer.out_features)
        assert step_linear.packed_layer(int8, rows=6) is None


@needs_onednn
def test_weights_made_in_inference_mode_are_packed_again_in_each_search():
    """They keep no version, so an in-place change could not be seen: no pack outlives its
    search, and the next search reads out through the weight as it is then."""
    from alignmt.models import RNNSearch

    torch.manual_seed(0)
    with torch.inference_mode():
        model = RNNSearch(20, 15, 16, 16, 24, 16).eval()
        decoder, layer = model.decoder, model.decoder.maxout.output
        features = torch.randn(6, decoder.maxout.proj.in_features)
        packs = []
        for _ in range(2):
            with step_linear.packed_weights():
                logits = decoder.step_readout(features)
                packs.append(step_linear.packed_layer(layer, rows=6))
            torch.testing.assert_close(logits, decoder.readout(features), **TOL)
            layer.weight.mul_(2.0)  # in place, untracked
    assert packs[0] is not packs[1] and packs[1].packed is not None


def _luong():
    from alignmt.models import Luong
    from alignmt.models.attention import AdditiveAttention

    model = Luong(30, 25, 12, 16, num_layers=1, rnn_type="gru", bidirectional_encoder=True,
                  attention=AdditiveAttention)  # fmt: skip
    rnn = model.decoder.rnn
    return model, [(rnn, "weight_ih_l0"), (rnn, "weight_hh_l0"), (model.decoder.combine, "weight")]


def _rnnsearch():
    from alignmt.models import RNNSearch

    model = RNNSearch(30, 25, 12, 16, 24, 16)
    d = model.decoder
    layers = d.embedding_proj, d.context_proj, d.recurrent_proj, d.attention.query_proj
    return model, [(layer, "weight") for layer in layers]


@needs_onednn
@pytest.mark.parametrize("make", [_luong, _rnnsearch], ids=["luong", "rnnsearch"])
def test_a_search_step_with_packed_weights_is_the_models_step(make):
    """Outside autograd a decoder step multiplies by its weights packed once (a one-layer GRU
    Luong decoder's GRU and W_c; RNNsearch's gate projections and W_a): its features, next
    state and attention are the step's definition (the same model in float64, where nothing
    is packed: torch.nn.GRU and nn.Linear) to float32 rounding."""
    torch.manual_seed(0)
    model, packed_weights = make()
    model.eval()
    exact = copy.deepcopy(model).double()
    src, lengths = torch.randint(4, 30, (5, 7)), torch.tensor([7, 6, 5, 3, 7])
    prev = torch.randint(4, 25, (5,))
    with torch.no_grad(), step_linear.packed_weights():
        memory, state = model.start(src, lengths)
        features, next_state, alpha = model.decoder.step(prev, memory, state)
        for module, name in packed_weights:
            assert step_linear._packs[module][name][1].packed is not None  # the step packed it
        exact_memory, exact_state = exact.start(src, lengths)
        expected = exact.decoder.step(prev, exact_memory, exact_state)
    torch.testing.assert_close(features.double(), expected[0], **TOL)
    torch.testing.assert_close(next_state["hidden"].double(), expected[1]["hidden"], **TOL)
    torch.testing.assert_close(alpha.double(), expected[2], **TOL)


def test_at_one_row_the_luong_gru_steps_by_its_two_products_as_torchs_gru_does():
    """At one row nothing is packed, but outside autograd the GRU still steps by its two
    products and the GRU update (gru_gates): the step is the definition's, torch.nn.GRU's own
    call on the same model in float64 (under autograd, where gru_gates steps aside), to float32
    rounding."""
    torch.manual_seed(0)
    model, _ = _luong()
    model.eval()
    exact = copy.deepcopy(model).double()
    src, lengths, prev = torch.randint(4, 30, (1, 7)), torch.tensor([7]), torch.tensor([5])
    with torch.no_grad(), step_linear.packed_weights():
        assert step_linear.gru_gates(model.decoder.rnn, rows=1) is not None
        memory, state = model.start(src, lengths)
        for _ in range(3):
            features, state, alpha = model.decoder.step(prev, memory, state)
    assert step_linear.gru_gates(exact.decoder.rnn, rows=1) is None  # autograd: torch's GRU
    exact_memory, exact_state = exact.start(src, lengths)
    for _ in range(3):
        expected = exact.decoder.step(prev, exact_memory, exact_state)
        exact_state = expected[1]
    torch.testing.assert_close(features.double(), expected[0].detach(), **TOL)
    torch.testing.assert_close(state["hidden"].double(), exact_state["hidden"].detach(), **TOL)
    torch.testing.assert_close(alpha.double(), expected[2].detach(), **TOL)


@needs_onednn
@pytest.mark.skipif(not step_linear.native_bfloat16(), reason="no native bfloat16 here")
def test_bfloat16_weights_are_packed_and_multiply_to_bfloat16_rounding():
    """The bfloat16 decoding copy's products: float32 sums of bfloat16 factors, rounded once
    to bfloat16 (8 significant bits)."""
    torch.manual_seed(0)
    B, n_in, n_out = 6, 37, 23
    weight, x, bias = (torch.randn(*s).bfloat16() for s in ((n_out, n_in), (B, n_in), (n_out,)))
    by_weight = StepLinear(weight, B)
    assert by_weight.packed is not None
    y = by_weight(x, bias)
    assert y.dtype == torch.bfloat16
    exact = x.double() @ weight.double().t() + bias.double()
    torch.testing.assert_close(y.double(), exact, rtol=2**-8, atol=2**-8 * exact.abs().max())
    layer = torch.nn.Linear(n_in, n_out).bfloat16()
    with step_linear.packed_weights(), torch.no_grad():
        assert step_linear.packed_layer(layer, rows=B) is not None
