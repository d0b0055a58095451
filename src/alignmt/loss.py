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


def _mean_loss(log_probs, targets, ignore_index: int, label_smoothing: float):
    """(mean loss over the kept tokens, targets with padding at 0, the kept mask, their count)."""
    keep = targets != ignore_index
    safe = targets.masked_fill(~keep, 0)
    per_token = -log_probs.gather(1, safe.unsqueeze(1)).squeeze(1)
    if label_smoothing:
        per_token = (1 - label_smoothing) * per_token - label_smoothing * log_probs.mean(1)
    count = keep.sum().clamp(min=1)
    return (per_token * keep).sum() / count, safe, keep, count


def _logit_gradient_(log_probs, safe, smoothing: float):
    """d(loss per token)/d(logits) = softmax - the smoothed one-hot target, written over the
    log-probabilities [tokens, V]."""
    grad = log_probs.exp_()
    grad.scatter_add_(1, safe.unsqueeze(1), grad.new_full((grad.size(0), 1), -(1.0 - smoothing)))
    if smoothing:
        grad.sub_(smoothing / grad.size(1))
    return grad


class _TokenCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets, ignore_index: int, label_smoothing: float):
        log_probs = torch.log_softmax(logits, dim=-1)
        loss, safe, keep, count = _mean_loss(log_probs, targets, ignore_index, label_smoothing)
        ctx.save_for_backward(log_probs, safe, keep, count)
        ctx.label_smoothing = label_smoothing
        ctx.consumed = False
        return loss

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
        grad = _logit_gradient_(log_probs, safe, ctx.label_smoothing)
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


class Workspace:
    """One [tokens, vocabulary] buffer that `linear_cross_entropy` reuses from step to step: a
    fresh tensor of that size faults in every one of its pages on every training step."""

    def __init__(self):
        self._flat: torch.Tensor | None = None
        self.in_use = False

    def take(self, rows: int, cols: int, like: torch.Tensor) -> torch.Tensor:
        """A [rows, cols] buffer; a fresh one while the reused one waits for its backward."""
        if self.in_use:
            return like.new_empty(rows, cols)
        flat = self._flat
        fits = flat is not None and flat.numel() >= rows * cols
        if not (fits and flat.device == like.device and flat.dtype == like.dtype):
            flat = self._flat = like.new_empty(rows * cols)
        self.in_use = True
        return flat[: rows * cols].view(rows, cols)

    def release(self, buffer: torch.Tensor) -> None:
        if self._flat is not None and buffer.data_ptr() == self._flat.data_ptr():
            self.in_use = False

    def clear(self) -> None:
        """Drop the buffer (unless a backward waits for it): evaluation has no use for it."""
        if not self.in_use:
            self._flat = None


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, ignore_index, label_smoothing, workspace):
        scores = workspace.take(hidden.size(0), weight.size(0), hidden)
        if bias is None:
            torch.mm(hidden, weight.t(), out=scores)
        else:
            torch.addmm(bias, hidden, weight.t(), out=scores)
        log_probs = torch.log_softmax(scores, dim=-1, out=scores)
        loss, safe, keep, count = _mean_loss(log_probs, targets, ignore_index, label_smoothing)
        ctx.save_for_backward(hidden, weight, safe, keep, count)
        ctx.scores, ctx.workspace = scores, workspace
        ctx.label_smoothing, ctx.has_bias = label_smoothing, bias is not None
        return loss

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss):
        if ctx.scores is None:
            raise RuntimeError(
                "linear_cross_entropy's buffer is reused in place: backward through it once "
                "(no retain_graph)"
            )
        hidden, weight, safe, keep, count = ctx.saved_tensors
        grad = _logit_gradient_(ctx.scores, safe, ctx.label_smoothing)
        ctx.scores = None
        dropped = (~keep).nonzero().squeeze(1)
        if len(dropped):
            grad.index_fill_(0, dropped, 0.0)
        scale = grad_loss / count  # applied to the small results, not to the buffer
        needs = ctx.needs_input_grad
        d_hidden = (grad @ weight).mul_(scale) if needs[0] else None
        d_weight = (grad.t() @ hidden).mul_(scale) if needs[1] else None
        d_bias = grad.sum(0).mul_(scale) if ctx.has_bias and needs[2] else None
        ctx.workspace.release(grad)
        return d_hidden, d_weight, d_bias, None, None, None, None


def linear_cross_entropy(
    hidden: torch.Tensor,
    layer: torch.nn.Linear,
    targets: torch.Tensor,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    workspace: Workspace | None = None,
) -> torch.Tensor:
    """`token_cross_entropy(layer(hidden), targets, ...)` for hidden [tokens, F], with the output
    layer's logits, their log-probabilities and their gradient in one buffer, the workspace's
    (reused from call to call) where one is given."""
    parameters = (hidden, layer.weight, layer.bias)
    if not (torch.is_grad_enabled() and any(p is not None and p.requires_grad for p in parameters)):
        return token_cross_entropy(layer(hidden), targets, ignore_index, label_smoothing)
    return _LinearCrossEntropy.apply(
        hidden, layer.weight, layer.bias, targets, ignore_index, label_smoothing,
        workspace or Workspace(),
    )  # fmt: skip
