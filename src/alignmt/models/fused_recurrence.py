"""The RNNsearch decoder recurrence (additive attention + GRU) as one autograd function.

Under teacher forcing the recurrence is the only sequential part of RNNsearch, and with small
batches its cost is dominated by per-step overheads: every step records some thirty autograd
nodes and computes five small weight gradients that are summed over steps. This function
runs the same arithmetic without building a graph and back-propagates through time by hand:
per-step work is only what truly depends on the previous step, and the weight gradients are
computed once for all steps as large matrix products. `tests/unit/test_fused_recurrence.py`
checks values and gradients against the plain autograd path.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

tanh_backward = torch.ops.aten.tanh_backward
sigmoid_backward = torch.ops.aten.sigmoid_backward


class AdditiveGRURecurrence(torch.autograd.Function):
    """For t = 0..T-1, with s = s_t:

        q = W_q s + b_q;  E = v . tanh(K + q);  alpha = softmax(E masked);  c = alpha V
        [r, z, n] gates from x_t + W_c c and W_h s + b_h;  s_{t+1} = n + z (s - n)

    Returns (states s_0..s_{T-1} [B, T, H], contexts c_1..c_T [B, T, D], alphas [B, T, S]).
    W_sh stacks W_q (first A rows) over W_h, so s_t is projected with one matmul per step.
    """

    @staticmethod
    def forward(ctx, x, s0, keys, values, mask, w_sh, b_sh, v, w_c):
        B, T, _ = x.shape
        H, A, S = s0.size(1), keys.size(2), keys.size(1)
        blocked = ~mask
        states = x.new_empty(B, T, H)
        contexts = x.new_empty(B, T, values.size(2))
        alphas = x.new_empty(B, T, S)
        hidden = x.new_empty(T, B, S, A)  # tanh(K + q) of every step, for the backward pass
        gates = x.new_empty(T, B, 3 * H)  # r, z, n of every step
        gh_n = x.new_empty(T, B, H)  # W_hn s + b_hn, which the reset gate multiplies
        w_c_t, w_sh_t = w_c.t(), w_sh.t()
        s = s0
        for t in range(T):
            states[:, t] = s
            proj = torch.addmm(b_sh, s, w_sh_t)  # [B, A + 3H]: q and W_h s + b_h
            h = torch.add(keys, proj[:, :A].unsqueeze(1), out=hidden[t])
            h.mul_(2).sigmoid_().mul_(2).sub_(1)  # tanh (see functional.tanh_)
            energy = torch.matmul(h, v).masked_fill_(blocked, float("-inf"))
            alpha = torch.softmax(energy, dim=-1)
            alphas[:, t] = alpha
            c = torch.bmm(alpha.unsqueeze(1), values).squeeze(1)
            contexts[:, t] = c
            gx = torch.addmm(x[:, t], c, w_c_t)
            rz = torch.sigmoid(gx[:, : 2 * H] + proj[:, A : A + 2 * H])
            r, z = rz[:, :H], rz[:, H:]
            gh_n[t] = proj[:, A + 2 * H :]
            n = torch.tanh(torch.addcmul(gx[:, 2 * H :], r, gh_n[t]))
            gates[t, :, : 2 * H] = rz
            gates[t, :, 2 * H :] = n
            s = torch.addcmul(n, z, s - n)
        ctx.save_for_backward(
            s0, keys, values, w_sh, v, w_c, states, contexts, alphas, hidden, gates, gh_n
        )
        return states, contexts, alphas

    @staticmethod
    @once_differentiable
    def backward(ctx, d_states, d_contexts, d_alphas):
        s0, keys, values, w_sh, v, w_c, states, contexts, alphas, hidden, gates, gh_n = (
            ctx.saved_tensors
        )
        B, T, H = states.shape
        A = keys.size(2)
        if d_states is None:
            d_states = torch.zeros_like(states)
        if d_contexts is None:
            d_contexts = torch.zeros_like(contexts)
        d_keys = torch.zeros_like(keys)
        d_v = torch.zeros_like(v)
        d_proj = states.new_empty(B, T, A + 3 * H)  # [dq, d(W_h s + b_h)] of every step
        d_x = states.new_empty(B, T, 3 * H)
        d_c_all = states.new_empty(B, T, values.size(2))
        ds = torch.zeros_like(s0)  # gradient flowing into s_{t+1}
        for t in reversed(range(T)):
            s = states[:, t]
            g = gates[t]
            r, z, n = g[:, :H], g[:, H : 2 * H], g[:, 2 * H :]
            # s_{t+1} = n + z (s - n),  n = tanh(x_n + W_cn c + r (W_hn s + b_hn))
            d_pre_n = tanh_backward(ds * (1 - z), n)
            d_pre_r = sigmoid_backward(d_pre_n * gh_n[t], r)
            d_pre_z = sigmoid_backward(ds * (s - n), z)
            d_gx = torch.cat([d_pre_r, d_pre_z, d_pre_n], dim=1)
            d_x[:, t] = d_gx
            d_c = torch.addmm(d_contexts[:, t], d_gx, w_c)
            d_c_all[:, t] = d_c
            # c = alpha V,  alpha = softmax(v . tanh(K + q))
            alpha = alphas[:, t]
            d_alpha = (values * d_c.unsqueeze(1)).sum(-1)  # faster than bmm for this shape
            if d_alphas is not None:  # a loss on the attention itself (coverage loss)
                d_alpha = d_alpha + d_alphas[:, t]
            d_energy = alpha * (d_alpha - (alpha * d_alpha).sum(-1, keepdim=True))
            h = hidden[t]
            d_v.addmv_(h.reshape(-1, A).t(), d_energy.reshape(-1))
            d_pre = tanh_backward(d_energy.unsqueeze(2) * v, h)
            d_keys += d_pre
            d_p = torch.cat([d_pre.sum(1), d_pre_r, d_pre_z, d_pre_n * r], dim=1)
            d_proj[:, t] = d_p
            ds = torch.addmm(torch.addcmul(d_states[:, t], ds, z), d_p, w_sh)
        # Weight gradients, once for all steps.
        d_proj_flat = d_proj.reshape(B * T, -1)
        d_w_sh = d_proj_flat.t() @ states.reshape(B * T, H)
        d_b_sh = d_proj_flat.sum(0)
        d_w_c = d_x.reshape(B * T, -1).t() @ contexts.reshape(B * T, -1)
        d_values = torch.bmm(alphas.transpose(1, 2), d_c_all)
        return d_x, ds, d_keys, d_values, None, d_w_sh, d_b_sh, d_v, d_w_c
