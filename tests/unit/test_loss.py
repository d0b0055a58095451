import pytest
import torch
import torch.nn.functional as F

from alignmt import loss as loss_module
from alignmt.loss import Workspace, linear_cross_entropy, token_cross_entropy

PAD = 0


def batch(dtype=torch.float32):
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(12, 9, generator=generator, dtype=dtype, requires_grad=True)
    targets = torch.randint(1, 9, (12,), generator=generator)
    targets[[2, 7, 11]] = PAD  # padding positions: no loss, no gradient
    return logits, targets


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_equals_torch_cross_entropy_in_value_and_gradient(smoothing, dtype):
    logits, targets = batch(dtype)
    ours = token_cross_entropy(logits * 2, targets, PAD, smoothing)
    (grad,) = torch.autograd.grad(ours, logits)
    reference = F.cross_entropy(logits * 2, targets, ignore_index=PAD, label_smoothing=smoothing)
    (expected,) = torch.autograd.grad(reference, logits)
    assert torch.allclose(ours, reference, atol=1e-6)
    assert torch.allclose(grad, expected, atol=1e-6)
    assert grad[[2, 7, 11]].abs().max() == 0


def test_a_second_backward_through_the_consumed_buffer_is_refused():
    logits, targets = batch()
    loss = token_cross_entropy(logits * 1.0, targets, PAD)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="once"):
        loss.backward()


def test_without_gradients_it_is_plain_cross_entropy():
    logits, targets = batch()
    with torch.no_grad():
        value = token_cross_entropy(logits, targets, PAD)
    assert torch.allclose(value, F.cross_entropy(logits, targets, ignore_index=PAD).detach())


def linear_batch(dtype=torch.float64):
    generator = torch.Generator().manual_seed(1)
    hidden = torch.randn(12, 5, generator=generator, dtype=dtype, requires_grad=True)
    layer = torch.nn.Linear(5, 9).to(dtype)
    targets = torch.randint(1, 9, (12,), generator=generator)
    targets[[2, 7, 11]] = PAD
    return hidden, layer, targets


def reference_gradients(hidden, layer, targets, smoothing=0.0):
    loss = F.cross_entropy(layer(hidden), targets, ignore_index=PAD, label_smoothing=smoothing)
    return loss, torch.autograd.grad(loss, [hidden, layer.weight, layer.bias])


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_linear_cross_entropy_equals_the_layer_then_cross_entropy(smoothing):
    hidden, layer, targets = linear_batch()
    expected, expected_grads = reference_gradients(hidden, layer, targets, smoothing)
    workspace = Workspace()
    for _ in range(2):  # the second call reuses the first one's buffer
        loss = linear_cross_entropy(hidden, layer, targets, PAD, smoothing, workspace)
        grads = torch.autograd.grad(loss, [hidden, layer.weight, layer.bias])
        torch.testing.assert_close(loss, expected, atol=1e-12, rtol=1e-12)
        for got, want in zip(grads, expected_grads, strict=True):
            torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)
        assert grads[0][[2, 7, 11]].abs().max() == 0


def test_the_workspace_buffer_is_reused_but_never_while_a_backward_waits_for_it():
    hidden, layer, targets = linear_batch()
    workspace = Workspace()
    first = workspace.take(4, 3, hidden)
    assert workspace.take(4, 3, hidden).data_ptr() != first.data_ptr()  # in use: a fresh one
    workspace.release(first)
    assert workspace.take(2, 3, hidden).data_ptr() == first.data_ptr()  # free again: reused
    workspace.release(first)
    workspace.clear()  # evaluation drops it; the next call takes a new one
    second = workspace.take(2, 3, hidden)
    assert second.data_ptr() != first.data_ptr()
    workspace.release(second)
    assert not workspace.in_use
    # Two losses before one backward: each keeps its own buffer, both gradients are right.
    other = targets.roll(1)
    both = linear_cross_entropy(hidden, layer, targets, PAD, 0.0, workspace)
    both = both + linear_cross_entropy(hidden * 2, layer, other, PAD, 0.0, workspace)
    got = torch.autograd.grad(both, [hidden, layer.weight])
    reference = F.cross_entropy(layer(hidden), targets, ignore_index=PAD) + F.cross_entropy(
        layer(hidden * 2), other, ignore_index=PAD
    )
    for g, e in zip(got, torch.autograd.grad(reference, [hidden, layer.weight]), strict=True):
        torch.testing.assert_close(g, e, atol=1e-12, rtol=1e-12)


def test_linear_cross_entropy_refuses_a_second_backward_and_needs_no_buffer_without_grad():
    hidden, layer, targets = linear_batch()
    workspace = Workspace()
    loss = linear_cross_entropy(hidden, layer, targets, PAD, 0.0, workspace)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="once"):
        loss.backward()
    with torch.no_grad():
        value = linear_cross_entropy(hidden, layer, targets, PAD, 0.0, workspace)
    torch.testing.assert_close(value, F.cross_entropy(layer(hidden), targets, ignore_index=PAD))
    assert not workspace.in_use


needs_native = pytest.mark.skipif(loss_module._native_library() is None, reason="no C compiler")


@needs_native
@pytest.mark.parametrize("classes", [9, 1003])  # below and off the vector width
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_the_native_pass_in_float32_equals_the_definition_in_float64(smoothing, with_bias, classes):
    generator = torch.Generator().manual_seed(2)
    hidden = torch.randn(12, 5, generator=generator, requires_grad=True)
    layer = torch.nn.Linear(5, classes, bias=with_bias)
    targets = torch.randint(1, classes, (12,), generator=generator)
    targets[[2, 7, 11]] = PAD
    assert loss_module._runs_native(hidden, layer.weight, layer.bias, targets)
    params = [hidden, layer.weight] + ([layer.bias] if with_bias else [])
    workspace = Workspace()
    for _ in range(2):  # the second call reuses the first one's buffer, biased in place
        loss = linear_cross_entropy(hidden, layer, targets, PAD, smoothing, workspace)
        grads = torch.autograd.grad(loss * 3, params)  # a gradient other than 1 reaches it
        exact_params = [p.detach().double().requires_grad_() for p in params]
        logits = exact_params[0] @ exact_params[1].t()
        if with_bias:
            logits = logits + exact_params[2]
        exact = F.cross_entropy(logits, targets, ignore_index=PAD, label_smoothing=smoothing)
        exact_grads = torch.autograd.grad(exact * 3, exact_params)
        torch.testing.assert_close(loss.double(), exact, atol=1e-6, rtol=1e-6)
        for got, want in zip(grads, exact_grads, strict=True):
            torch.testing.assert_close(got.double(), want, atol=1e-6, rtol=1e-5)
        assert grads[0][[2, 7, 11]].abs().max() == 0


@needs_native
def test_the_native_pass_refuses_a_target_outside_the_output_layer():
    hidden, layer, targets = linear_batch(torch.float32)
    targets[0] = 9  # the layer has 9 classes: 0..8
    with pytest.raises(IndexError, match="9 is out of bounds for 9 classes"):
        linear_cross_entropy(hidden, layer, targets, PAD)
