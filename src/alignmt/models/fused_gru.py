"""One direction of a GRU layer over a padded batch, as a hand-written autograd function.

ATen's CPU GRU records every step's gate operations for autograd and computes the recurrent
weight's gradient one step at a time; here the input's gates are one product for all steps,
each step does only what depends on the previous state (a product by W_hh, packed once per
pass, and one GRU update), and the weight gradients are one product each after the backward
loop. It computes torch.nn.GRU's function (gates [r, z, n], b_hn inside the reset gate's
product) from a zero initial state; `tests/unit/test_encoder.py` checks values and gradients
against it.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from alignmt.models.fused_recurrence import gru_update_into, gru_update_into_backward
from alignmt.models.step_linear import StepLinear


class GRURecurrence(torch.autograd.Function):
    """outputs [B, T, H] of a GRU over inputs x [B, T, E] from h_0 = 0, for torch.nn.GRU's
    weights of one layer and direction (w_ih [3H, E], w_hh [3H, H], b_ih, b_hh [3H])."""

    @staticmethod
    def forward(ctx, x, w_ih, w_hh, b_ih, b_hh):
        B, T, E = x.shape
        H = w_hh.size(1)
        inputs = x.transpose(0, 1).reshape(T * B, E)  # time-major
        gx = torch.addmm(b_ih, inputs, w_ih.t()).view(T, B, 3 * H)
        states = x.new_empty(T + 1, B, H)  # h_0..h_T
        states[0] = 0
        gates = x.new_empty(T, B, 3 * H)  # r, z, n of every step
        gh_n = x.new_empty(T, B, H)  # W_hn h + b_hn, which the reset gate multiplies
        by_hh = StepLinear(w_hh, B)
        for t in range(T):
            gh = by_hh(states[t], b_hh)
            gru_update_into(gx[t], gh, states[t], gates[t], gh_n[t], out=states[t + 1])
        ctx.save_for_backward(inputs, w_ih, w_hh, states, gates, gh_n)
        return states[1:].transpose(0, 1)

    @staticmethod
    @once_differentiable
    def backward(ctx, d_outputs):
        inputs, w_ih, w_hh, states, gates, gh_n = ctx.saved_tensors
        T, B, H = gh_n.shape
        d_outputs = d_outputs.transpose(0, 1)  # time-major view
        d_gx = states.new_empty(T, B, 3 * H)
        d_gh = states.new_empty(T, B, 3 * H)
        by_hh = StepLinear(w_hh.t(), B)
        dh = d_outputs[T - 1].contiguous()  # into h_T
        for t in reversed(range(T)):
            direct = gru_update_into_backward(dh, states[t], gates[t], gh_n[t], d_gx[t], d_gh[t])
            if t > 0:  # h_0 is a constant
                dh = by_hh.plus(d_gh[t], direct.add_(d_outputs[t - 1]))
        d_gx_flat, d_gh_flat = d_gx.view(T * B, -1), d_gh.view(T * B, -1)
        d_x = (d_gx_flat @ w_ih).view(T, B, -1).transpose(0, 1)
        d_w_ih = d_gx_flat.t() @ inputs
        d_w_hh = d_gh_flat.t() @ states[:-1].reshape(T * B, H)
        return d_x, d_w_ih, d_w_hh, d_gx_flat.sum(0), d_gh_flat.sum(0)
