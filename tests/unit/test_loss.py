import pytest
import torch
import torch.nn.functional as F

from alignmt.loss import token_cross_entropy

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
