"""Numerical building blocks shared by the models."""

from __future__ import annotations

import math

import torch

from alignmt.models import native_gru


def _sigmoid_tanh_(x: torch.Tensor) -> torch.Tensor:
    """tanh(x) = 2 sigmoid(2x) - 1, in place."""
    return x.mul_(2).sigmoid_().mul_(2).sub_(1)


class _SigmoidTanhInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        _sigmoid_tanh_(x)
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
    Outside autograd, for states [B, H] in float32 on CPU, one native pass (native_gru), as
    the training recurrences run it: a search step's ten small PyTorch ops cost more there.
    """
    native = hidden.dim() == 2 and not torch.is_grad_enabled()
    if native and native_gru.usable(gates_x, gates_h, hidden):
        (B, H), empty = hidden.shape, hidden.new_empty
        gates, gh_n = empty(B, 3 * H), empty(B, H)  # kept for a backward pass: none here
        return native_gru.update(gates_x, gates_h, hidden, gates, gh_n, empty(B, H))
    size = hidden.size(-1)
    r, z = torch.sigmoid(gates_x[..., : 2 * size] + gates_h[..., : 2 * size]).chunk(2, dim=-1)
    n = torch.tanh(gates_x[..., 2 * size :] + r * gates_h[..., 2 * size :])
    return n + z * (hidden - n)


# Elements of tanh(q + k) that `additive_energies` computes at a time: a block that stays in
# the cores' caches, large enough that the calls per block cost little.
ENERGY_BLOCK = 1 << 18


def additive_energies(queries: torch.Tensor, keys: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """v . tanh(q_t + k_s) [B, T, S] for query terms [B, T, A] and keys [B, S, A], without
    gradients, block by block in one reused buffer: the [B, T, S, A] activations never reach
    main memory (a beam's [B, K, S, A] would be gigabytes a step). Each element costs one fused
    add, one sigmoid and one subtraction: v . tanh(x) = 2v . (sigmoid(2x) - 1/2)."""
    (B, T, A), S = queries.shape, keys.size(1)
    doubled_queries, doubled_v = queries * 2, v * 2
    energies = queries.new_empty(B, T, S)
    per_query = S * A
    if T * per_query <= ENERGY_BLOCK:  # whole batch rows per block
        rows = ENERGY_BLOCK // (T * per_query)
        blocks = [(slice(b, b + rows), slice(None)) for b in range(0, B, rows)]
    else:  # some of one batch row's queries per block
        n = max(1, ENERGY_BLOCK // per_query)
        blocks = [(slice(b, b + 1), slice(t, t + n)) for b in range(B) for t in range(0, T, n)]
    buffer = queries.new_empty(max(ENERGY_BLOCK, per_query))
    for batch, steps in blocks:  # batch rows, query positions
        query, key = doubled_queries[batch, steps].unsqueeze(2), keys[batch].unsqueeze(1)
        shape = (query.size(0), query.size(1), S, A)
        hidden = torch.add(query, key, alpha=2, out=buffer[: math.prod(shape)].view(shape))
        half_tanh = hidden.sigmoid_().sub_(0.5)
        torch.mv(half_tanh.view(-1, A), doubled_v, out=energies[batch, steps].view(-1))
    return energies
