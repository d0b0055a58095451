"""The decoder's fast path (`fast_path`: padding to few shapes, a compiled step, CUDA graphs)
computes what the step path computes: the same logits, attention and gradients for every
decoder family, scheduled sampling included. On CPU the padding and the compiled step are
checked (torch.compile's aot_eager backend: the graphs Dynamo and AOTAutograd make, run
op by op); the CUDA graphs are checked where a GPU is present."""

from __future__ import annotations

from functools import partial

import pytest
import torch
import torch.nn.functional as F

from alignmt.models import Luong, RNNEncDec, RNNSearch
from alignmt.models.attention import (
    AdditiveAttention,
    GeneralAttention,
    LocalMonotonicAttention,
    LocalPredictiveAttention,
)
from alignmt.models.compiled import FastPath, bucket, fast_path
from alignmt.models.coverage import LinguisticCoverage, NeuralCoverage
from alignmt.sampling import MixedFeed
from alignmt.special_tokens import BOS_ID, EOS_ID, PAD_ID
from tests.conftest import compose_config

SIZES = dict(embedding_dim=12, encoder_hidden_size=10, decoder_hidden_size=14, maxout_size=8)
FAMILIES = {
    "rnnsearch": lambda: RNNSearch(30, 25, **SIZES, attention=partial(AdditiveAttention)),
    "rnnsearch general": lambda: RNNSearch(30, 25, **SIZES, attention=GeneralAttention),
    "rnnsearch coverage": lambda: RNNSearch(30, 25, **SIZES, coverage=LinguisticCoverage),
    "rnnsearch neural coverage": lambda: RNNSearch(30, 25, **SIZES, coverage=NeuralCoverage),
    "luong input feeding": lambda: Luong(30, 25, 12, 14, 2, attention=GeneralAttention),
    "luong local-p, gru": lambda: Luong(
        30, 25, 12, 14, 1, rnn_type="gru", attention=partial(LocalPredictiveAttention, window=1)
    ),
    "luong local-m, one call": lambda: Luong(
        30, 25, 12, 14, 1, attention=partial(LocalMonotonicAttention, window=1),
        input_feeding=False,
    ),
    "luong without attention": lambda: Luong(
        30, 25, 12, 14, 2, attention=None, input_feeding=False, bidirectional_encoder=True
    ),
    "rnnencdec": lambda: RNNEncDec(30, 25, **SIZES),
}  # fmt: skip


def batch(source_words=(4, 2, 1), target_words=(4, 2, 3), seed=0):
    """Random sentence pairs of these lengths: (src, src_lengths, tgt_in, tgt_out). The
    default, five positions with [EOS], is padded to eight; three sentences to four."""
    g = torch.Generator().manual_seed(seed)
    S, T = max(source_words) + 1, max(target_words) + 1
    src = torch.full((len(source_words), S), PAD_ID)
    tgt_in = torch.full((len(source_words), T), PAD_ID)
    tgt_out = torch.full((len(source_words), T), PAD_ID)
    for b, (n, m) in enumerate(zip(source_words, target_words, strict=True)):
        src[b, :n] = torch.randint(4, 30, (n,), generator=g)
        src[b, n] = EOS_ID
        words = torch.randint(4, 25, (m,), generator=g)
        tgt_in[b, : m + 1] = torch.cat([torch.tensor([BOS_ID]), words])
        tgt_out[b, : m + 1] = torch.cat([words, torch.tensor([EOS_ID])])
    return src, torch.tensor(source_words) + 1, tgt_in, tgt_out


def loss_and_grads(model, data, feed=None):
    """Token cross-entropy plus a term on the attention weights, so that their gradient is
    checked too; the output, and every parameter's gradient."""
    model.zero_grad()
    src, lengths, tgt_in, tgt_out = data
    out = model(src, lengths, tgt_in, feed)
    loss = F.cross_entropy(out.logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD_ID)
    if out.attention is not None:
        ramp = torch.linspace(0, 1, out.attention.size(-1)).to(out.attention)
        loss = loss + (out.attention * ramp).sum()
    loss.backward()
    return out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_same(fast, step, atol=1e-10, rtol=1e-8):
    (fast_out, fast_grads), (step_out, step_grads) = fast, step
    torch.testing.assert_close(fast_out.logits, step_out.logits, atol=atol, rtol=rtol)
    if step_out.attention is None:
        assert fast_out.attention is None
    else:
        torch.testing.assert_close(fast_out.attention, step_out.attention, atol=atol, rtol=rtol)
    assert fast_grads.keys() == step_grads.keys()
    for name, grad in step_grads.items():
        torch.testing.assert_close(fast_grads[name], grad, atol=atol, rtol=rtol, msg=name)


def compare(name: str, data, feed=None, **options):
    """The model of `name` with and without the fast path, in double precision."""
    torch.manual_seed(0)
    model = FAMILIES[name]().double()
    step = loss_and_grads(model, data, feed)
    model.fast_path = FastPath(model.decoder, length_multiple=4, batch_multiple=4, **options)
    return loss_and_grads(model, data, feed), step


def test_bucket_rounds_up_by_less_than_its_step():
    assert [bucket(n, 8) for n in (1, 8, 9, 80, 81, 627, 1391)] == [8, 8, 16, 80, 88, 640, 1408]
    for n in range(1, 5000):
        b = bucket(n, 8)
        assert n <= b < n + max(8, 2 ** (n.bit_length() - 4)) and b % 8 == 0
    assert len({bucket(n, 8) for n in range(513, 1025)}) == 8  # eight shapes per doubling


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_padded_batches_compute_what_the_step_path_computes(name):
    """Three sentences padded to four, five positions to eight: the real rows' outputs and
    every gradient are the unpadded ones."""
    assert_same(*compare(name, batch()))


@pytest.mark.parametrize("ratio", [0.0, 1.0])
def test_scheduled_sampling_on_padded_batches(ratio):
    """At ratio 0 every input after the first is the model's own argmax, so each step's
    logits decide the next input; at 1 the reference (each coin drawn, none decisive)."""
    assert_same(*compare("rnnsearch general", batch(), feed=MixedFeed(ratio)))


@pytest.mark.parametrize("name", ["rnnsearch general", "luong input feeding", "rnnencdec"])
def test_compiled_step_computes_what_the_step_path_computes(name):
    """torch.compile of the step (forward and backward graphs), on two padded shapes: the
    second makes the compiled step's batch and source sizes dynamic. Families whose decoder
    declares a teacher-forcing path (RNNsearch with additive attention, with or without
    coverage) train through it instead, so these three have none."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    for data in (batch(), batch((2, 1), (1, 2), seed=1)):  # padded to 4 x 8, then 4 x 4
        assert_same(*compare(name, data, compile=True, backend="aot_eager"))
    assert torch._dynamo.utils.counters["frames"]["ok"] > 0  # the step was compiled


def test_compiled_step_under_scheduled_sampling():
    torch._dynamo.reset()
    fast, step = compare(
        "rnnsearch general", batch(), feed=MixedFeed(0.0), compile=True, backend="aot_eager"
    )
    assert_same(fast, step)


def test_scoring_without_gradients_takes_the_decoders_own_path():
    torch.manual_seed(0)
    model = FAMILIES["rnnsearch coverage"]().double()
    src, lengths, tgt_in, _ = batch()
    with torch.no_grad():
        plain = model(src, lengths, tgt_in)
        model.fast_path = FastPath(model.decoder, compile=True, backend="aot_eager")
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        fast = model(src, lengths, tgt_in)
    assert torch._dynamo.utils.counters["frames"]["total"] == 0  # nothing was compiled
    torch.testing.assert_close(fast.logits, plain.logits, atol=0, rtol=0)


def test_the_config_switches_it_on_for_gpus_only():
    default = compose_config("train", ["run_dir=/tmp/x"])
    assert fast_path(FAMILIES["rnnencdec"]().decoder, default.fast_path) is None
    assert fast_path(FAMILIES["rnnencdec"]().decoder, None) is None  # configs before the key
    gpu = compose_config("train", ["run_dir=/tmp/x", "trainer=gpu"])
    assert gpu.fast_path.compile and gpu.fast_path.cuda_graphs
    assert gpu.trainer.precision == "bf16-mixed" and gpu.trainer.accelerator == "gpu"
    made = fast_path(FAMILIES["rnnencdec"]().decoder, gpu.fast_path)
    assert made.graphs is not None and made.graphs.capacity == gpu.fast_path.max_graphs
    ddp = compose_config("train", ["run_dir=/tmp/x", "trainer=ddp"])
    assert ddp.fast_path.cuda_graphs  # every GPU trainer inherits it
    off = compose_config("train", ["run_dir=/tmp/x", "trainer=gpu", "fast_path.cuda_graphs=false"])
    assert off.fast_path.compile and not off.fast_path.cuda_graphs


def test_bad_multiples_are_refused_naming_the_key():
    with pytest.raises(ValueError, match=r"fast_path\.length_multiple"):
        FastPath(FAMILIES["rnnencdec"]().decoder, length_multiple=0)
    with pytest.raises(ValueError, match=r"fast_path\.max_graphs"):
        FastPath(FAMILIES["rnnencdec"]().decoder, cuda_graphs=True, max_graphs=0)


# ------------------------------------------------------------------ CUDA graphs (GPU only)
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")


def on_cuda(data):
    src, lengths, tgt_in, tgt_out = data
    return src.cuda(), lengths, tgt_in.cuda(), tgt_out.cuda()  # lengths stay on the CPU


def compare_on_cuda(name, datas, feed=None, dtype=torch.float32, **options):
    """Every batch of `datas` through one model without, then with, the graphs."""
    torch.manual_seed(0)
    model = FAMILIES[name]().to("cuda", dtype)
    steps = [loss_and_grads(model, on_cuda(d), feed) for d in datas]
    model.fast_path = FastPath(
        model.decoder, cuda_graphs=True, length_multiple=4, batch_multiple=4, **options
    )
    fasts = [loss_and_grads(model, on_cuda(d), feed) for d in datas]
    return list(zip(fasts, steps, strict=True)), model.fast_path.graphs


@cuda
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_cuda_graphs_compute_what_the_step_path_computes(name):
    """Three batches: the first captures its padded shape (4 x 8 x 8), the second, smaller,
    replays it over what the first left in its buffers, the third captures 4 x 4 x 4."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    datas = [batch((6, 3, 2), (5, 6, 1)), batch((4, 2), (3, 4), seed=1), batch((2, 1), (1, 2))]
    pairs, graphs = compare_on_cuda(name, datas)
    for fast, step in pairs:
        assert_same(fast, step, atol=1e-5, rtol=1e-4)
    assert graphs.captures == 2


@cuda
def test_cuda_graphs_with_the_compiled_step_and_scheduled_sampling():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch._dynamo.reset()
    datas = [batch(), batch((2, 1), (1, 2), seed=1)]
    pairs, _ = compare_on_cuda("rnnsearch coverage", datas, compile=True)
    pairs += compare_on_cuda("rnnsearch", datas, feed=MixedFeed(0.0), compile=True)[0]
    for fast, step in pairs:
        assert_same(fast, step, atol=1e-5, rtol=1e-4)


@cuda
def test_cuda_graphs_under_bf16_autocast_after_the_weights_change():
    """Autocast casts the weights inside the graph: an update between replays reaches it."""
    torch.manual_seed(0)
    model = FAMILIES["rnnsearch"]().cuda()
    data = on_cuda(batch())
    fast_path_ = FastPath(model.decoder, cuda_graphs=True)
    for _ in range(2):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            model.fast_path = None
            step = loss_and_grads(model, data)
            model.fast_path = fast_path_
            fast = loss_and_grads(model, data)
        assert_same(fast, step, atol=2e-2, rtol=2e-2)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.1 * torch.randn_like(p))


@cuda
def test_cuda_graphs_refuse_a_backward_pass_after_another_replay():
    model = FAMILIES["rnnsearch"]().cuda()
    model.fast_path = FastPath(model.decoder, cuda_graphs=True)
    src, lengths, tgt_in, _ = on_cuda(batch())
    first = model(src, lengths, tgt_in).logits.sum()
    model(src, lengths, tgt_in)
    with pytest.raises(RuntimeError, match="before this backward pass"):
        first.backward()


@cuda
def test_cuda_graphs_drop_the_least_recently_used_shape():
    pairs, graphs = compare_on_cuda(
        "rnnencdec", [batch(), batch((2, 1), (1, 2), seed=1), batch()], max_graphs=1
    )
    for fast, step in pairs:
        assert_same(fast, step, atol=1e-5, rtol=1e-4)
    assert graphs.captures == 3 and len(graphs.functions) == 1
