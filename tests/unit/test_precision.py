"""Decoding precision: float32 is the searches' exact default; bfloat16, int8 and int8_fp16
options."""

import copy

import pytest
import torch

from alignmt.config import instantiate
from alignmt.decoding import BeamSearch, GreedySearch
from alignmt.decoding.precision import model_at
from alignmt.models import Luong, RNNSearch
from alignmt.models.attention import AdditiveAttention
from alignmt.models.copy import WithSourceCopy
from alignmt.models.ensemble import Ensemble
from alignmt.models.functional import gru_update
from alignmt.models.quantized import (
    Float16Linear,
    Int8Linear,
    QuantizedGRU,
    QuantizedLinear,
    amx_int8,
    quantized_recurrent,
)
from alignmt.special_tokens import EOS_ID
from tests.conftest import compose_config

LOW = ["bfloat16", "int8", "int8_fp16"]  # the precisions other than float32
ROUNDING = {torch.qint8: 0.05, torch.float16: 0.002}  # relative error allowed, as fbgemm rounds
MODELS = {
    "rnnsearch": lambda: RNNSearch(40, 30, 8, 6, 10, 4),
    "luong": lambda: Luong(40, 30, 8, 10, 1, rnn_type="gru", attention=AdditiveAttention),
}


def sources():
    lengths = torch.tensor([6, 3, 5])
    src = torch.randint(4, 40, (3, 6))
    src[torch.arange(6) >= lengths[:, None]] = 0
    src[torch.arange(3), lengths - 1] = EOS_ID
    return src, lengths


@pytest.mark.parametrize("search", [GreedySearch, BeamSearch])
def test_an_unknown_precision_is_refused(search):
    with pytest.raises(ValueError, match="precision must be one of"):
        search(precision="float16")


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("search", [GreedySearch, BeamSearch])
def test_bfloat16_decodes_float32_scores_and_attention_at_the_lengths_asked(name, search):
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    src, lengths = sources()
    out = search(max_length=4, min_length=4, precision="bfloat16")(model, src, lengths)
    for nbest, length in zip(out, lengths.tolist(), strict=True):
        best = nbest[0]
        assert len(best.tokens) == 4
        assert best.attention.dtype == torch.float32 and best.attention.shape == (5, length)
        # still weights, summing to 1 to bfloat16 precision (8 bits of mantissa)
        torch.testing.assert_close(best.attention.sum(1), torch.ones(5), atol=2**-7, rtol=0)
        assert isinstance(best.score, float) and best.score < 0


def test_float32_is_the_default_and_the_same_search():
    torch.manual_seed(0)
    model = MODELS["luong"]().eval()
    src, lengths = sources()
    default = BeamSearch(beam_size=3)(model, src, lengths)
    explicit = BeamSearch(beam_size=3, precision="float32")(model, src, lengths)
    assert [[(h.tokens, h.score) for h in n] for n in default] == [
        [(h.tokens, h.score) for h in n] for n in explicit
    ]


BAHDANAU = dict(embedding_dim=8, encoder_hidden_size=6, decoder_hidden_size=12, maxout_size=4)
FAMILIES = {
    "rnnsearch": BAHDANAU,
    "rnnencdec": BAHDANAU,
    "luong": dict(embedding_dim=8, hidden_size=12),
}


def configured(family: str, *overrides: str):
    cfg = compose_config("train", [f"model={family}", *overrides])
    torch.manual_seed(0)
    return instantiate(cfg.model, src_vocab_size=40, tgt_vocab_size=30, **FAMILIES[family]).eval()


@pytest.mark.parametrize(
    "family, overrides",
    [
        ("rnnsearch", []),
        ("rnnsearch", ["model/coverage=neural"]),
        ("luong", ["model.input_feeding=true"]),
        ("luong", ["model/attention=local_p"]),
        ("rnnencdec", []),
    ],
)
@pytest.mark.parametrize("precision", LOW)
def test_every_model_family_decodes_at_each_precision(family, overrides, precision):
    model = configured(family, *overrides)
    src, lengths = sources()
    for search in (GreedySearch, BeamSearch):
        out = search(max_length=4, min_length=4, precision=precision)(model, src, lengths)
        assert [len(n[0].tokens) for n in out] == [4, 4, 4]
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert not any(isinstance(m, QuantizedLinear) for m in model.modules())  # left alone


@pytest.mark.parametrize("precision", LOW)
def test_a_copying_model_decodes_with_its_batchs_copy_ids(precision):
    model = configured("rnnsearch", "model/copy=pointer_generator")
    src, lengths = sources()
    src_copy = src.clone()
    src_copy[src_copy == 7] = 30  # a source word outside the target vocabulary, copied as 30
    bound = WithSourceCopy(model, src_copy)
    out = GreedySearch(max_length=4, min_length=4, precision=precision)(bound, src, lengths)
    assert [len(n[0].tokens) for n in out] == [4, 4, 4]
    assert isinstance(model_at(precision, bound), WithSourceCopy)
    assert model_at(precision, bound).model is model_at(precision, model)


@pytest.mark.parametrize("precision", LOW)
def test_an_ensemble_decodes_at_each_precision(precision):
    members = [configured("rnnsearch"), configured("luong")]
    src, lengths = sources()
    out = BeamSearch(beam_size=2, max_length=3, precision=precision)(
        Ensemble(members).eval(), src, lengths
    )
    assert all(len(n[0].tokens) <= 3 for n in out)


def test_the_bfloat16_copy_is_made_once_and_again_after_the_weights_change():
    model = configured("luong")
    first = model_at("bfloat16", model)
    assert model_at("bfloat16", model) is first and model_at("float32", model) is model
    assert {p.dtype for p in first.parameters()} == {torch.bfloat16}

    with torch.no_grad():  # what an optimiser step does: the float32 weights change in place
        for p in model.parameters():
            p.mul_(-1.5)
    second = model_at("bfloat16", model)
    assert second is not first
    for low, p in zip(second.parameters(), model.parameters(), strict=True):
        assert torch.equal(low, p.to(torch.bfloat16))

    src, lengths = sources()
    search = GreedySearch(max_length=4, precision="bfloat16")
    fresh = GreedySearch(max_length=4)(copy.deepcopy(model).to(torch.bfloat16), src, lengths)
    assert [h[0].tokens for h in search(model, src, lengths)] == [h[0].tokens for h in fresh]


@pytest.mark.parametrize("precision", LOW)
def test_a_copy_is_made_again_after_a_fused_optimiser_step(precision):
    """Fused Adam, the default optimiser, updates the weights in place without moving their
    versions: validation decoding during training must still read the new weights. Another
    model's copy (a frozen teacher, an ensemble member) stays."""
    model, other = configured("luong"), configured("luong")
    first, others = model_at(precision, model), model_at(precision, other)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    torch.optim.Adam(model.parameters(), lr=0.5, fused=True).step()
    second = model_at(precision, model)
    assert second is not first
    # the encoder: bfloat16 in one copy, float32 (not quantized) in the other
    pairs = zip(second.encoder.parameters(), model.encoder.parameters(), strict=True)
    assert all(torch.equal(low, p.to(low.dtype)) for low, p in pairs)
    assert model_at(precision, model) is second
    assert model_at(precision, other) is others


def test_the_bfloat16_copy_follows_the_models_mode():
    model = configured("luong")
    assert not model_at("bfloat16", model).training
    model.train()
    assert model_at("bfloat16", model).training


WIDE = [
    "fbgemm",
    pytest.param("onednn", marks=pytest.mark.skipif(not amx_int8(), reason="no AMX int8 here")),
]


def int8_layer(layer, engine, monkeypatch):
    """Int8Linear.of(layer), multiplying 17 rows with `engine`'s packed weight."""
    if engine == "onednn":  # from any number of rows
        monkeypatch.setattr(Int8Linear, "WIDE_ROWS", 1)
        monkeypatch.setattr(Int8Linear, "WIDE_PRODUCT", 1)
    low = Int8Linear.of(layer)
    assert (low.packed_for(17) is low.wide) == (engine == "onednn")
    return low


@pytest.mark.parametrize("engine", WIDE)
def test_the_int8_projection_is_within_its_quantization_error(engine, monkeypatch):
    """Against the analytic bound of rounding both factors: with inputs x on a grid of step
    s_x = (max x - min x) / 127 (at most, 7-bit activations) and each weight row W_j on a grid of
    step s_j = max |W_j| / 127, |x^ . W^_j - x . W_j| <= sum_k (|W_jk| s_x + |x_k| s_j) / 2
    + K s_x s_j / 4."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 300)
    x = torch.randn(17, 64) * 3
    exact = layer(x)
    with torch.inference_mode():
        low = int8_layer(layer, engine, monkeypatch)(x)
    s_x = (x.max().clamp(min=0) - x.min().clamp(max=0)) / 127
    s_w = layer.weight.abs().amax(1) / 127  # [300]
    bound = (
        layer.weight.abs().sum(1) * s_x / 2
        + x.abs().sum(1, keepdim=True) * s_w / 2
        + 64 * s_x * s_w / 4
    )
    error = (low - exact).abs()
    assert bool((error <= bound * 1.001).all())
    assert error.max() > 0  # the product did run in int8
    assert error.max() < 0.05 * exact.abs().max()


@pytest.mark.skipif(not amx_int8(), reason="no AMX int8 here")
def test_both_int8_engines_multiply_the_same_integers(monkeypatch):
    """fbgemm and oneDNN round the same inputs to the same integers: their products differ by
    float rounding only, far below the int8 rounding itself."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(512, 2000)
    x = torch.randn(40, 512) * 3
    with torch.inference_mode():
        narrow = int8_layer(layer, "fbgemm", monkeypatch)(x)
        wide = int8_layer(layer, "onednn", monkeypatch)(x)
        rounding = (narrow - layer(x)).abs().max()
    torch.testing.assert_close(wide, narrow, rtol=1e-5, atol=1e-4 * narrow.abs().max().item())
    assert (wide - narrow).abs().max() < 1e-3 * rounding


def test_int8_multiplies_many_rows_with_onednn_only_where_it_has_amx():
    vocabulary = Int8Linear.of(torch.nn.Linear(512, 8000))
    assert vocabulary.packed_for(1) is vocabulary.packed
    assert vocabulary.packed_for(31) is vocabulary.packed  # fbgemm's rows (a beam at batch 1)
    assert (vocabulary.wide is not None) == amx_int8()
    assert vocabulary.packed_for(64) is (vocabulary.wide if amx_int8() else vocabulary.packed)
    small = Int8Linear.of(torch.nn.Linear(512, 512))
    assert small.packed_for(64) is small.packed  # too small a product for oneDNN to pay


def test_int8_copies_follow_the_weights_and_leave_the_model_alone():
    model = configured("luong")
    first = model_at("int8", model)
    assert model_at("int8", model) is first and model_at("bfloat16", model) is not first
    assert isinstance(first.decoder.output, Int8Linear)
    assert type(model.decoder.output) is torch.nn.Linear
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(-1.5)
    second = model_at("int8", model)
    assert second is not first
    x = torch.randn(3, model.decoder.output.in_features)
    with torch.inference_mode():
        close = second.decoder.output(x) - model.decoder.output(x)
        stale = first.decoder.output(x) - model.decoder.output(x)
    assert close.abs().max() < 0.1 * stale.abs().max()


def test_the_float16_projection_is_the_product_by_the_weights_rounded_to_float16():
    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 300)
    x = torch.randn(17, 64) * 3
    rounded = torch.nn.functional.linear(x, layer.weight.half().float(), layer.bias)
    with torch.inference_mode():
        low = Float16Linear.of(layer)(x)
    torch.testing.assert_close(low, rounded, rtol=1e-5, atol=1e-5)  # float32 sums, any order
    assert (low - layer(x)).abs().max() > 1e-4  # the weights were rounded


@pytest.mark.parametrize("precision", ["int8", "int8_fp16"])
def test_a_quantized_precision_is_refused_off_cpu(precision):
    with torch.device("meta"):
        model = Luong(40, 30, 8, 10, 1, rnn_type="gru", attention=AdditiveAttention)
    with pytest.raises(ValueError, match=f"precision={precision} runs on CPU only"):
        model_at(precision, model)


def test_float16_weights_are_refused_without_fbgemm(monkeypatch):
    """ARM builds of torch quantize with qnnpack only, which has no float16 products."""
    monkeypatch.setattr(type(torch.backends.quantized), "supported_engines", ["qnnpack"])
    model = configured("luong")
    with pytest.raises(ValueError, match="int8_fp16 needs fbgemm"):
        model_at("int8_fp16", model)
    assert isinstance(model_at("int8", model).decoder.output, Int8Linear)


@pytest.mark.parametrize("dtype", [torch.qint8, torch.float16])
@pytest.mark.parametrize("rnn_type", [torch.nn.GRU, torch.nn.LSTM])
def test_the_quantized_recurrent_layer_runs_the_same_recurrence_to_within_rounding(rnn_type, dtype):
    torch.manual_seed(0)
    rnn = rnn_type(24, 32, num_layers=2, batch_first=True)
    x = torch.randn(5, 7, 24)
    with torch.inference_mode():
        exact, _ = rnn(x)
        low, _ = quantized_recurrent(rnn, dtype)(x)
    error = (low - exact).abs().max()
    assert 0 < error < ROUNDING[dtype] * exact.abs().max()  # quantized, and rounded only


@pytest.mark.parametrize(
    "family, overrides",
    [
        ("rnnsearch", ["model/coverage=neural"]),
        ("luong", ["model.input_feeding=true"]),
        ("luong", ["model.rnn_type=lstm", "model/attention=general"]),
        ("rnnencdec", []),
    ],
)
@pytest.mark.parametrize("precision", ["int8", "int8_fp16"])
def test_the_quantized_decoder_step_is_the_float_step_to_within_rounding(
    family, overrides, precision
):
    """Every matrix of the decoder quantized (vectors and the encoder stay float32): one step
    from the same state gives the same logits and next state, up to rounding: int8's for the
    logits; int8's, or with int8_fp16 float16's, for the state."""
    model = configured(family, *overrides)
    low = model_at(precision, model)
    layers = [m for m in low.decoder.modules() if type(m) is torch.nn.Linear]
    assert all(1 in (m.in_features, m.out_features) for m in layers)
    assert not any(isinstance(m, QuantizedLinear) for m in low.encoder.modules())
    state_type = {"int8": Int8Linear, "int8_fp16": Float16Linear}[precision]
    projection = low.decoder.split_readout()[1]
    assert type(projection) is Int8Linear
    others = [m for m in low.decoder.modules() if isinstance(m, QuantizedLinear)]
    assert len(others) > 1 and all(type(m) is state_type for m in others if m is not projection)
    src, lengths = sources()
    tokens = torch.tensor([5, 6, 7])
    with torch.inference_mode():
        results = []
        for m in (model, low):
            logits, state, _ = m.step(tokens, *m.start(src, lengths))
            results.append((logits, state["hidden"]))
    state_rounding = ROUNDING[torch.float16 if precision == "int8_fp16" else torch.qint8]
    for exact, rounded, bound in zip(*results, (0.05, state_rounding), strict=True):
        error = (rounded - exact).abs().max()
        assert 0 < error < bound * exact.abs().max()


@pytest.mark.parametrize("dtype", [torch.qint8, torch.float16])
@pytest.mark.parametrize("batch_first", [True, False])
def test_the_quantized_gru_is_the_gru_to_within_rounding_and_its_steps_are_its_sequence(
    batch_first, dtype
):
    """A search steps a quantized decoder's GRU by its `gates` and gru_update; over a sequence
    it gives exactly those steps, and both are torch.nn.GRU to within rounding."""
    torch.manual_seed(0)
    gru = torch.nn.GRU(24, 32, batch_first=batch_first)
    x, h0 = torch.randn(5, 7, 24), torch.randn(1, 5, 32)
    inputs = x if batch_first else x.transpose(0, 1)
    low = QuantizedGRU(gru, dtype)
    with torch.inference_mode():
        exact, _ = gru(inputs, h0)
        outputs, last = low(inputs, h0)
        state, steps = h0[0], []
        for t in range(x.size(1)):
            state = gru_update(state, *low.gates(x[:, t], state))
            steps.append(state)
    steps = torch.stack(steps, 1 if batch_first else 0)
    assert torch.equal(outputs, steps) and torch.equal(last[0], state)
    error = (outputs - exact).abs().max()
    assert 0 < error < ROUNDING[dtype] * exact.abs().max()
    torch.testing.assert_close(
        last, outputs[:, -1:].transpose(0, 1) if batch_first else outputs[-1:]
    )


@pytest.mark.parametrize("precision", ["int8", "int8_fp16"])
def test_a_one_layer_gru_decoder_gets_the_quantized_gru_and_a_stacked_one_torchs(precision):
    gru = ["model.rnn_type=gru", "model.bidirectional_encoder=true"]
    one, two = configured("luong", *gru), configured("luong", *gru, "model.num_layers=2")
    assert isinstance(model_at(precision, one).decoder.rnn, QuantizedGRU)
    assert not isinstance(model_at(precision, two).decoder.rnn, QuantizedGRU)


@pytest.mark.parametrize("precision", LOW)
def test_a_model_made_in_inference_mode_decodes_at_each_precision_and_its_changes_are_seen(
    precision,
):
    """Inference tensors keep no version: the copy is made again for each search."""
    model = configured("luong")
    with torch.inference_mode():
        frozen = copy.deepcopy(model)
        for p, q in zip(frozen.parameters(), model.parameters(), strict=True):
            p.data = q.detach().clone()
    assert all(p.is_inference() for p in frozen.parameters())
    src, lengths = sources()
    search = GreedySearch(max_length=4, precision=precision)

    def outputs(m):
        with torch.inference_mode():
            return [(h[0].tokens, h[0].score) for h in search(m, src, lengths)]

    assert outputs(frozen) == outputs(model)
    with torch.inference_mode(), torch.no_grad():
        for p in frozen.parameters():
            p.mul_(-1.5)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(-1.5)
    assert outputs(frozen) == outputs(model)
