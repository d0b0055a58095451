"""Token-level cross-entropy that keeps one [tokens, vocabulary] buffer instead of three.

`F.cross_entropy` keeps the log-probabilities for its backward pass and then allocates two
more tensors of the same size (the gradient of the log-probabilities, then of the logits).
With a 30,000-word output layer these are the largest tensors of a training step. Here the
backward pass turns the saved log-probabilities into the gradient in place
(softmax - smoothed one-hot), so the peak holds one such buffer. Same value, same gradient.
In float32 on CPU the output layer's loss (`linear_cross_entropy`) takes one native pass over
the buffer each way (alignmt/native/cross_entropy.c), the bias added and its gradient summed
in the same passes.
"""

from __future__ import annotations

import ctypes
import functools

import torch
from torch.autograd.function import once_differentiable

from alignmt import native


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


@functools.cache
def _native_library() -> ctypes.CDLL | None:
    lib = native.load("cross_entropy")
    if lib is not None:
        pointer, size, real = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
        lib.cross_entropy_forward.argtypes = [pointer] * 3 + [size, real] + [pointer] * 2
        lib.cross_entropy_forward.argtypes += [size] * 2
        lib.cross_entropy_backward.argtypes = [pointer] * 3 + [size, real, real, pointer]
        lib.cross_entropy_backward.argtypes += [size] * 2
    return lib


def _runs_native(hidden, weight, bias, targets) -> bool:
    tensors = (hidden, weight) if bias is None else (hidden, weight, bias)
    return (
        all(t.dtype == torch.float32 and t.device.type == "cpu" for t in tensors)
        and (bias is None or bias.is_contiguous())
        and targets.dtype == torch.int64
        and _native_library() is not None
    )


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, ignore_index, label_smoothing, workspace):
        scores = workspace.take(hidden.size(0), weight.size(0), hidden)
        ctx.native = _runs_native(hidden, weight, bias, targets)
        if ctx.native:  # the bias is added in the native pass
            torch.mm(hidden, weight.t(), out=scores)
            targets = targets.contiguous()
            loss, keep, count, lse = _native_forward(
                scores, bias, targets, ignore_index, label_smoothing
            )
            saved_targets = targets  # the raw targets: the pass reads ignore_index itself
        else:
            if bias is None:
                torch.mm(hidden, weight.t(), out=scores)
            else:
                torch.addmm(bias, hidden, weight.t(), out=scores)
            log_probs = torch.log_softmax(scores, dim=-1, out=scores)
            loss, saved_targets, keep, count = _mean_loss(
                log_probs, targets, ignore_index, label_smoothing
            )  # the targets with ignored positions at 0, safe to gather
            lse = None
        ctx.save_for_backward(hidden, weight, saved_targets, keep, count, lse)
        ctx.scores, ctx.workspace = scores, workspace
        ctx.label_smoothing, ctx.has_bias = label_smoothing, bias is not None
        ctx.ignore_index = ignore_index
        return loss

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss):
        if ctx.scores is None:
            raise RuntimeError(
                "linear_cross_entropy's buffer is reused in place: backward through it once "
                "(no retain_graph)"
            )
        hidden, weight, saved_targets, keep, count, lse = ctx.saved_tensors
        scores, ctx.scores = ctx.scores, None
        scale = grad_loss / count
        needs = ctx.needs_input_grad
        wants_bias = ctx.has_bias and needs[2]
        if ctx.native:  # the gradient scaled and the bias's summed in the pass
            grad, d_bias = _native_backward(
                scores, lse, saved_targets, ctx.ignore_index, ctx.label_smoothing, scale, wants_bias
            )
            d_hidden = grad @ weight if needs[0] else None
            d_weight = grad.t() @ hidden if needs[1] else None
        else:
            grad = _logit_gradient_(scores, saved_targets, ctx.label_smoothing)
            dropped = (~keep).nonzero().squeeze(1)
            if len(dropped):
                grad.index_fill_(0, dropped, 0.0)
            # scale applied to the small results, not to the buffer
            d_hidden = (grad @ weight).mul_(scale) if needs[0] else None
            d_weight = (grad.t() @ hidden).mul_(scale) if needs[1] else None
            d_bias = grad.sum(0).mul_(scale) if wants_bias else None
        ctx.workspace.release(grad)
        return d_hidden, d_weight, d_bias, None, None, None, None


def _native_forward(scores, bias, targets, ignore_index, label_smoothing):
    """The native pass's (loss, kept mask, kept count, row log-sum-exps); the scores gain the
    bias in place."""
    rows, classes = scores.shape
    keep = targets != ignore_index
    outside = keep & ((targets < 0) | (targets >= classes))
    if outside.any():  # the pass would read outside the row
        raise IndexError(
            f"target {targets[outside][0].item()} is out of bounds for {classes} classes"
        )
    lse, losses = scores.new_empty(2, rows)
    _native_library().cross_entropy_forward(
        *map(native.pointer, (scores, bias, targets)), ignore_index, label_smoothing,
        native.pointer(lse), native.pointer(losses), rows, classes,
    )  # fmt: skip
    count = keep.sum().clamp(min=1)
    return losses.sum() / count, keep, count, lse


def _native_backward(scores, lse, targets, ignore_index, label_smoothing, scale, wants_bias):
    """(the logits' gradient, written over the scores, and the bias's gradient or None)."""
    d_bias = scores.new_empty(scores.size(1)) if wants_bias else None
    failed = _native_library().cross_entropy_backward(
        *map(native.pointer, (scores, lse, targets)), ignore_index, label_smoothing, float(scale),
        native.pointer(d_bias), *scores.shape,
    )  # fmt: skip
    if failed:
        raise MemoryError("linear_cross_entropy: no memory for the bias gradient's column sums")
    return scores, d_bias


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
