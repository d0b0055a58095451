"""Token-level cross-entropy that keeps one [tokens, vocabulary] buffer instead of three.

`F.cross_entropy` keeps the log-probabilities for its backward pass and then allocates two
more tensors of the same size (the gradient of the log-probabilities, then of the logits).
With a 30,000-word output layer these are the largest tensors of a training step. Here the
backward pass turns the saved log-probabilities into the gradient in place
(softmax - smoothed one-hot), so the peak holds one such buffer. Same value, same gradient.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable


class _TokenCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets, ignore_index: int, label_smoothing: float):
        log_probs = torch.log_softmax(logits, dim=-1)
        keep = targets != ignore_index
        safe = targets.masked_fill(~keep, 0)
        per_token = -log_probs.gather(1, safe.unsqueeze(1)).squeeze(1)
        if label_smoothing:
            per_token = (1 - label_smoothing) * per_token - label_smoothing * log_probs.mean(1)
        count = keep.sum().clamp(min=1)
        ctx.save_for_backward(log_probs, safe, keep, count)
        ctx.label_smoothing = label_smoothing
        ctx.consumed = False
        return (per_token * keep).sum() / count

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss):
        if ctx.consumed:
            raise RuntimeError(
                "token_cross_entropy's saved buffer is reused in place: "
                "backward through it once (no retain_graph)"
            )
        ctx.consumed = True
        log_probs, safe, keep, count = ctx.saved_tensors
        smoothing = ctx.label_smoothing
        grad = log_probs.exp_()  # softmax, in place of the log-probabilities
        grad.scatter_add_(
            1, safe.unsqueeze(1), grad.new_full((grad.size(0), 1), -(1.0 - smoothing))
        )
        if smoothing:
            grad.sub_(smoothing / grad.size(1))
        grad.mul_((keep.to(grad.dtype) * (grad_loss / count)).unsqueeze(1))
        return grad, None, None, None


def token_cross_entropy(
    logits: torch.Tensor,
    targets: torch.Tensor,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """Mean cross-entropy over the tokens whose target is not `ignore_index`, with optional
    label smoothing: `F.cross_entropy(logits, targets, ignore_index=..., label_smoothing=...)`
    for logits [tokens, vocabulary] and targets [tokens], in a third of its memory."""
    if not logits.requires_grad:
        return torch.nn.functional.cross_entropy(
            logits, targets, ignore_index=ignore_index, label_smoothing=label_smoothing
        )
    return _TokenCrossEntropy.apply(logits, targets, ignore_index, label_smoothing)
