"""The native GRU step computes functional.gru_update and its gradients, and the recurrences
that use it are as exact as with PyTorch ops."""

import pytest
import torch

from alignmt.models import native_gru
from alignmt.models.functional import gru_update
from alignmt.models.fused_recurrence import gru_update_into, gru_update_into_backward
from tests.unit.test_native_energies import MODELS, TOL, assert_native_pass_as_exact

needs_library = pytest.mark.skipif(native_gru.library() is None, reason="no C compiler here")


@needs_library
@pytest.mark.parametrize("H", [5, 16, 37])  # below, at and off the vector width
def test_the_step_and_its_gradients_equal_the_definition(H):
    torch.manual_seed(0)
    B = 3
    gx = torch.randn(B, 3 * H)
    gh = torch.randn(B, 3 * H + 4)[:, 2 : 2 + 3 * H]  # strided rows, as a slice of the projection
    s = torch.randn(B, H + 1)[:, 1:]
    gh[0, 0] = 90.0  # a saturated reset gate
    ds = torch.randn(B, H)
    s64, gx64, gh64 = (t.double().requires_grad_() for t in (s, gx, gh))
    exact = gru_update(s64, gx64, gh64)
    exact.backward(ds.double())

    gates, gh_n, out = torch.empty(B, 3 * H), torch.empty(B, H), torch.empty(B, H)
    assert native_gru.usable(gx, gh, s)
    returned = gru_update_into(gx, gh, s, gates, gh_n, out)
    assert returned.data_ptr() == out.data_ptr()
    torch.testing.assert_close(out.double(), exact.detach(), **TOL)
    torch.testing.assert_close(gh_n, gh[:, 2 * H :])

    d_gx, d_gh = torch.empty(B, 3 * H), torch.zeros(B, 3 * H + 4)[:, 1 : 1 + 3 * H]
    direct = gru_update_into_backward(ds, s, gates, gh_n, d_gx, d_gh)
    torch.testing.assert_close(d_gx.double(), gx64.grad, **TOL)
    torch.testing.assert_close(d_gh.double(), gh64.grad, **TOL)
    torch.testing.assert_close(direct.double(), s64.grad, **TOL)  # s reaches s' only as z s


@needs_library
@pytest.mark.parametrize("name", sorted(MODELS))
def test_recurrences_with_the_native_step_are_as_exact_as_pytorch_ops(name, monkeypatch):
    """Both float32 paths against the same model in float64, as the attention's native pass is
    checked."""
    torch.manual_seed(0)
    assert_native_pass_as_exact(MODELS[name](), native_gru, "update", monkeypatch)
