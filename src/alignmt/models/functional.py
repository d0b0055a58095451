"""Numerical building blocks shared by the models."""

from __future__ import annotations

import torch


class _SigmoidTanhInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        x.mul_(2).sigmoid_().mul_(2).sub_(1)
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)


def tanh_(x: torch.Tensor) -> torch.Tensor:
    """In-place tanh of a fresh intermediate that nothing else holds (such as W s + U h_j).

    On CPUs it computes 2 sigmoid(2x) - 1, which is much faster there than torch.tanh and
    exact to float32 rounding; in place, the per-step attention energies leave no temporaries
    in the heap. Only the result is kept for the backward pass, as for torch.tanh.
    """
    if x.is_cuda:
        return torch.tanh_(x)
    return _SigmoidTanhInPlace.apply(x)


def gru_update(hidden: torch.Tensor, gates_x: torch.Tensor, gates_h: torch.Tensor) -> torch.Tensor:
    """One GRU step from its pre-activations, gates ordered [r, z, n] as in torch.nn.GRU:

        r, z = sigmoid(x_rz + h_rz);  n = tanh(x_n + r * h_n);  h' = n + z (h - n)

    `gates_x` holds what does not pass through the reset gate (the input's part), `gates_h`
    what does (the recurrent part, U h + b, plus any term the candidate resets with it).
    """
    size = hidden.size(-1)
    r, z = torch.sigmoid(gates_x[..., : 2 * size] + gates_h[..., : 2 * size]).chunk(2, dim=-1)
    n = torch.tanh(gates_x[..., 2 * size :] + r * gates_h[..., 2 * size :])
    return n + z * (hidden - n)
