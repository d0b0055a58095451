"""The native additive-attention pass computes the energies' definition and its gradients, the
recurrences that use it train as with PyTorch ops, and it is built, cached and declined as
documented."""

import copy
from functools import partial

import pytest
import torch
import torch.nn.functional as F

from alignmt.models import Luong, RNNSearch
from alignmt.models import native_energies as native
from alignmt.models.attention import AdditiveAttention
from alignmt.models.coverage import LinguisticCoverage, NeuralCoverage
from alignmt.special_tokens import PAD_ID

needs_library = pytest.mark.skipif(native.library() is None, reason="no C compiler here")


@needs_library
@pytest.mark.parametrize("A", [7, 16, 37, 70])  # below, at and off the vector widths
@pytest.mark.parametrize("n", [0, 1, 3])  # coverage units per source word (0: none)
def test_energies_and_gradients_equal_the_definition(A, n):
    torch.manual_seed(0)
    B, S = 3, 5
    keys, query, v = torch.randn(B, S, A), torch.randn(B, A), torch.randn(A)
    coverage, w_cov = torch.rand(B, S, n), torch.randn(A, n)
    keys[0, 1, 0] = 60.0  # a saturated sigmoid
    d_energy = torch.randn(B, S)
    d_energy[2, 3:] = 0.0  # masked positions carry no gradient

    # E = v . tanh(K + W_cov C + q), in float64 with autograd
    k64, q64, v64, c64, w64 = (
        t.double().requires_grad_() for t in (keys, query, v, coverage, w_cov)
    )
    exact = (torch.tanh(k64 + c64 @ w64.t() + q64.unsqueeze(1)) * v64).sum(-1)
    exact.backward(d_energy.double())

    covered = () if n == 0 else (coverage, w_cov.t().contiguous())
    energy = native.energies(keys, 2 * query, 2 * v, torch.empty(B, S), *covered)
    torch.testing.assert_close(energy.double() - v64.sum().detach(), exact.detach(), **TOL)

    d_keys, dq, dv_rows = torch.ones(B, S, A), torch.empty(B, A), torch.empty(B, A)
    d_coverage, d_w_cov_t = torch.ones(B, S, n), torch.ones(n, A)  # accumulated onto ones
    grads = () if n == 0 else (d_coverage, d_w_cov_t)
    native.energies_backward(
        keys, 2 * query, 4 * v, d_energy, d_keys, dq, dv_rows, *covered, *grads
    )
    d_v = 2 * dv_rows.sum(0) - d_energy.sum()
    torch.testing.assert_close(d_keys.double() - 1, k64.grad, **TOL)
    torch.testing.assert_close(dq.double(), q64.grad, **TOL)
    torch.testing.assert_close(d_v.double(), v64.grad, **TOL)
    if n:
        torch.testing.assert_close(d_coverage.double() - 1, c64.grad, **TOL)
        torch.testing.assert_close(d_w_cov_t.t().double() - 1, w64.grad, **TOL)

    # c = alpha V, so dL/d alpha[b, s] = V[b, s] . dL/dc[b]
    values, d_c = torch.randn(B, S, A + 3), torch.randn(B, A + 3)
    d_alpha = native.weights_grad(values, d_c, torch.empty(B, S))
    exact = torch.einsum("bsd,bd->bs", values.double(), d_c.double())
    torch.testing.assert_close(d_alpha.double(), exact, **TOL)


TOL = dict(atol=1e-5, rtol=1e-5)
MODELS = {
    "rnnsearch": lambda: RNNSearch(
        30, 25, embedding_dim=12, encoder_hidden_size=10, decoder_hidden_size=14,
        maxout_size=8, attention=partial(AdditiveAttention, attention_size=40),
    ),
    "luong input feeding": lambda: Luong(
        30, 25, 12, 20, 1, rnn_type="gru", bidirectional_encoder=True,
        attention=partial(AdditiveAttention, attention_size=40),
    ),
    "rnnsearch, linguistic coverage": lambda: RNNSearch(
        30, 25, embedding_dim=12, encoder_hidden_size=10, decoder_hidden_size=14,
        maxout_size=8, attention=partial(AdditiveAttention, attention_size=40),
        coverage=LinguisticCoverage,
    ),
    "luong input feeding, neural coverage": lambda: Luong(
        30, 25, 12, 20, 1, rnn_type="gru", bidirectional_encoder=True,
        attention=partial(AdditiveAttention, attention_size=40),
        coverage=partial(NeuralCoverage, size=3),
    ),
}  # fmt: skip


def train_step(model):
    """Loss, attention and gradients of one float32 teacher-forced step on a padded batch."""
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0], [11, 3, 0, 0, 0]])
    tgt_in = torch.tensor([[2, 5, 6, 7, 8], [2, 8, 9, 0, 0], [2, 10, 11, 12, 0]])
    tgt_out = torch.tensor([[5, 6, 7, 8, 3], [8, 9, 3, 0, 0], [10, 11, 12, 3, 0]])
    model.zero_grad()
    out = model(src, torch.tensor([5, 3, 2]), tgt_in)
    loss = F.cross_entropy(out.logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD_ID)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss, out.attention, grads


@needs_library
@pytest.mark.parametrize("name", sorted(MODELS))
def test_recurrences_with_the_native_pass_are_as_exact_as_pytorch_ops(name, monkeypatch):
    """Both float32 paths against the same model in float64: the native pass's error is at
    most twice the PyTorch ops' (or float32 rounding of the gradient's scale). The attention's
    query gradients carry errors far above float32's epsilon on either path: they are small
    differences of softmax terms."""
    torch.manual_seed(0)
    assert_native_pass_as_exact(MODELS[name](), native, "energies", monkeypatch)


def assert_native_pass_as_exact(model, module, entry: str, monkeypatch) -> None:
    """One training step of `model` in float32 with `module`'s native pass (its function `entry`
    must run) and with PyTorch ops (its library() None), both against the model in float64."""
    calls = []
    native_function = getattr(module, entry)
    monkeypatch.setattr(module, entry, lambda *a: calls.append(1) or native_function(*a))
    loss, attention, grads = train_step(model)
    assert calls  # the native pass ran
    monkeypatch.setattr(module, "library", lambda: None)
    calls.clear()
    *_, ops_grads = train_step(model)
    assert not calls
    exact_loss, exact_attention, exact_grads = train_step(copy.deepcopy(model).double())
    torch.testing.assert_close(loss.double(), exact_loss, **TOL)
    torch.testing.assert_close(attention.double(), exact_attention, **TOL)
    assert_as_exact(grads, ops_grads, exact_grads)


def assert_as_exact(grads: dict, reference_grads: dict, exact_grads: dict) -> None:
    """Each float32 gradient's error against float64 is at most twice the reference path's, or
    within 1e-5 of the gradient's scale: the attention's query gradients, small differences of
    softmax terms, reach a few 1e-6 of their scale on any float32 path, as rounding falls."""
    assert grads.keys() == reference_grads.keys() == exact_grads.keys()
    for param, exact in exact_grads.items():
        scale = exact.abs().max().item()
        error = (grads[param].double() - exact).abs().max().item()
        reference_error = (reference_grads[param].double() - exact).abs().max().item()
        assert error <= 2 * reference_error + 1e-5 * scale, (param, error, reference_error)


@needs_library
def test_the_library_is_built_once_per_cache_and_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    native.library.cache_clear()
    try:
        assert native.library() is not None
        built = list((tmp_path / "alignmt" / "native").iterdir())
        assert len(built) == 1 and built[0].suffix == ".so"  # no scratch left behind
        inode = built[0].stat().st_ino
        native.library.cache_clear()
        assert native.library() is not None
        assert built[0].stat().st_ino == inode  # reused, not rebuilt (a build renames a new file)

        native.library.cache_clear()
        monkeypatch.setenv("ALIGNMT_NATIVE", "0")
        assert native.library() is None
        assert not native.usable(torch.zeros(1, 1, 1))
    finally:
        native.library.cache_clear()


@needs_library
def test_libraries_unused_for_a_month_are_pruned_and_those_in_use_kept(tmp_path, monkeypatch):
    """Builds for an older source, compiler or CPU go once unused for STALE_S; another
    machine's recent build, and the library loaded, an old file itself, stay."""
    import os
    import time

    from alignmt import native as builds

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache = tmp_path / "alignmt" / "native"
    native.library.cache_clear()
    try:
        assert native.library() is not None
        (loaded,) = cache.glob("*.so")
        month_ago = time.time() - builds.STALE_S - 60
        os.utime(loaded, (month_ago, month_ago))
        stale, recent, killed = (
            cache / "gru_update-older-source.so",
            cache / "gru_update-other-cpu.so",
            cache / "tmp-killed-build",
        )
        stale.write_bytes(b"")
        recent.write_bytes(b"")
        killed.mkdir()
        (killed / "gru_update.o").write_bytes(b"")
        for path in (stale, killed):
            os.utime(path, (month_ago, month_ago))
        native.library.cache_clear()
        assert native.library() is not None
        assert sorted(p.name for p in cache.iterdir()) == sorted([loaded.name, recent.name])
        assert loaded.stat().st_mtime > month_ago  # marked in use again
    finally:
        native.library.cache_clear()


def test_a_failing_compiler_warns_and_leaves_pytorch_ops(tmp_path, monkeypatch):
    compiler = tmp_path / "cc"
    compiler.write_text("#!/bin/sh\nexit 1\n")
    compiler.chmod(0o755)
    monkeypatch.setenv("CC", str(compiler))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    native.library.cache_clear()
    try:
        with pytest.warns(UserWarning, match="additive_energies.c"):
            assert native.library() is None
    finally:
        native.library.cache_clear()
