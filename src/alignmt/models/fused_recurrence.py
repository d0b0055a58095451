"""Decoder recurrences (additive attention + GRU) as hand-written autograd functions: RNNsearch's
and Luong's input-feeding decoder.

Under teacher forcing the recurrence is the only sequential part of these models, and with small
batches its cost is dominated by per-step overheads: every step records some thirty autograd
nodes and computes five small weight gradients that are summed over steps. This function
runs the same arithmetic without building a graph and back-propagates through time by hand:
per-step work is only what truly depends on the previous step, and the weight gradients are
computed once for all steps as large matrix products. `tests/unit/test_fast_paths.py` checks
values and gradients against the decoders' step functions.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

tanh_backward = torch.ops.aten.tanh_backward
sigmoid_backward = torch.ops.aten.sigmoid_backward


def attention_hidden(keys: torch.Tensor, query: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """tanh(K + q) [B, S, A] into `out`. The backward pass recomputes it instead of keeping
    one [B, S, A] tensor per step, the largest of the recurrence (see functional.tanh_)."""
    return torch.add(keys, query.unsqueeze(1), out=out).mul_(2).sigmoid_().mul_(2).sub_(1)


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
        hidden = x.new_empty(B, S, A)  # tanh(K + q), recomputed in the backward pass
        queries = x.new_empty(T, B, A)
        gates = x.new_empty(T, B, 3 * H)  # r, z, n of every step
        gh_n = x.new_empty(T, B, H)  # W_hn s + b_hn, which the reset gate multiplies
        w_c_t, w_sh_t = w_c.t(), w_sh.t()
        s = s0
        for t in range(T):
            states[:, t] = s
            proj = torch.addmm(b_sh, s, w_sh_t)  # [B, A + 3H]: q and W_h s + b_h
            queries[t] = proj[:, :A]
            h = attention_hidden(keys, queries[t], hidden)
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
            s0, keys, values, w_sh, v, w_c, states, contexts, alphas, queries, gates, gh_n
        )
        return states, contexts, alphas

    @staticmethod
    @once_differentiable
    def backward(ctx, d_states, d_contexts, d_alphas):
        s0, keys, values, w_sh, v, w_c, states, contexts, alphas, queries, gates, gh_n = (
            ctx.saved_tensors
        )
        B, T, H = states.shape
        A = keys.size(2)
        if d_states is None:
            d_states = torch.zeros_like(states)
        if d_contexts is None:
            d_contexts = torch.zeros_like(contexts)
        d_keys = torch.zeros_like(keys)
        hidden = torch.empty_like(keys)  # tanh(K + q) of the step at hand
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
            h = attention_hidden(keys, queries[t], hidden)
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


class LuongGRURecurrence(torch.autograd.Function):
    """Luong et al.'s input-feeding decoder (one GRU layer, additive attention on the new state)
    for t = 0..T-1, with s = s_t and f = h~_{t-1}:

        [r, z, n] gates from x_t + W_f f and W_h s + b_h;  s' = n + z (s - n)
        q = W_q s' + b_q;  E = v . tanh(K + q);  alpha = softmax(E masked);  c = alpha V
        h~_t = tanh(W_cc c + W_cs s')

    Returns (h~_0..h~_{T-1} [B, T, H], alphas [B, T, S]). W_stack stacks W_q, W_cs and W_h, which
    all multiply s', so each step projects s' once (its W_h part is the next step's).
    """

    @staticmethod
    def forward(ctx, x, s0, f0, keys, values, mask, w_stack, b_stack, w_f, w_cc, v):
        B, T, _ = x.shape
        H, A, S = s0.size(1), keys.size(2), keys.size(1)
        blocked = ~mask
        news = x.new_empty(B, T, H)  # s' of every step
        feeds = x.new_empty(B, T, H)  # h~ of every step
        contexts = x.new_empty(B, T, values.size(2))
        alphas = x.new_empty(B, T, S)
        hidden = x.new_empty(B, S, A)  # tanh(K + q), recomputed in the backward pass
        queries = x.new_empty(T, B, A)
        gates = x.new_empty(T, B, 3 * H)  # r, z, n of every step
        gh_n = x.new_empty(T, B, H)  # W_hn s + b_hn, which the reset gate multiplies
        w_stack_t, w_f_t, w_cc_t = w_stack.t(), w_f.t(), w_cc.t()
        gh = torch.addmm(b_stack[A + H :], s0, w_stack_t[:, A + H :])
        s, f = s0, f0
        for t in range(T):
            gx = torch.addmm(x[:, t], f, w_f_t)
            rz = torch.sigmoid(gx[:, : 2 * H] + gh[:, : 2 * H])
            r, z = rz[:, :H], rz[:, H:]
            gh_n[t] = gh[:, 2 * H :]
            n = torch.tanh(torch.addcmul(gx[:, 2 * H :], r, gh_n[t]))
            gates[t, :, : 2 * H] = rz
            gates[t, :, 2 * H :] = n
            s = torch.addcmul(n, z, s - n)
            news[:, t] = s
            proj = torch.addmm(b_stack, s, w_stack_t)  # [B, A + H + 3H]: q, W_cs s', next W_h s'
            queries[t] = proj[:, :A]
            h = attention_hidden(keys, queries[t], hidden)
            energy = torch.matmul(h, v).masked_fill_(blocked, float("-inf"))
            alpha = torch.softmax(energy, dim=-1)
            alphas[:, t] = alpha
            c = torch.bmm(alpha.unsqueeze(1), values).squeeze(1)
            contexts[:, t] = c
            f = torch.tanh(torch.addmm(proj[:, A : A + H], c, w_cc_t))
            feeds[:, t] = f
            gh = proj[:, A + H :]
        ctx.save_for_backward(
            s0, f0, keys, values, w_stack, w_f, w_cc, v, news, feeds, contexts, alphas, queries,
            gates, gh_n,
        )  # fmt: skip
        return feeds, alphas

    @staticmethod
    @once_differentiable
    def backward(ctx, d_feeds, d_alphas):
        s0, f0, keys, values, w_stack, w_f, w_cc, v, news, feeds, contexts, alphas, queries = (
            ctx.saved_tensors[:13]
        )
        gates, gh_n = ctx.saved_tensors[13:]
        B, T, H = news.shape
        A = keys.size(2)
        if d_feeds is None:
            d_feeds = torch.zeros_like(feeds)
        d_keys = torch.zeros_like(keys)
        hidden = torch.empty_like(keys)  # tanh(K + q) of the step at hand
        d_v = torch.zeros_like(v)
        d_proj = news.new_zeros(B, T, A + 4 * H)  # [dq, d(W_cs s'), d(next W_h s')] per step
        d_x = news.new_empty(B, T, 3 * H)
        d_pre_c_all = news.new_empty(B, T, H)
        d_c_all = news.new_empty(B, T, values.size(2))
        d_f = torch.zeros_like(s0)  # gradient flowing into h~_t from step t + 1
        d_s_direct = torch.zeros_like(s0)  # into s'_t through step t + 1's z s term
        d_gh_next = news.new_zeros(B, 3 * H)  # step t + 1's d(W_h s'_t + b_h)
        for t in reversed(range(T)):
            # h~ = tanh(W_cc c + W_cs s')
            d_pre_c = tanh_backward(d_feeds[:, t] + d_f, feeds[:, t])
            d_pre_c_all[:, t] = d_pre_c
            d_c = d_pre_c @ w_cc
            d_c_all[:, t] = d_c
            # c = alpha V,  alpha = softmax(v . tanh(K + q))
            alpha = alphas[:, t]
            d_alpha = (values * d_c.unsqueeze(1)).sum(-1)
            if d_alphas is not None:
                d_alpha = d_alpha + d_alphas[:, t]
            d_energy = alpha * (d_alpha - (alpha * d_alpha).sum(-1, keepdim=True))
            h = attention_hidden(keys, queries[t], hidden)
            d_v.addmv_(h.reshape(-1, A).t(), d_energy.reshape(-1))
            d_pre = tanh_backward(d_energy.unsqueeze(2) * v, h)
            d_keys += d_pre
            d_p = torch.cat([d_pre.sum(1), d_pre_c, d_gh_next], dim=1)
            d_proj[:, t] = d_p
            ds = torch.addmm(d_s_direct, d_p, w_stack)  # d s'_t
            # s' = n + z (s - n),  n = tanh(x_n + W_fn f + r (W_hn s + b_hn))
            g = gates[t]
            r, z, n = g[:, :H], g[:, H : 2 * H], g[:, 2 * H :]
            s = news[:, t - 1] if t > 0 else s0
            d_pre_n = tanh_backward(ds * (1 - z), n)
            d_pre_r = sigmoid_backward(d_pre_n * gh_n[t], r)
            d_pre_z = sigmoid_backward(ds * (s - n), z)
            d_gx = torch.cat([d_pre_r, d_pre_z, d_pre_n], dim=1)
            d_x[:, t] = d_gx
            d_f = d_gx @ w_f
            d_gh_next = torch.cat([d_pre_r, d_pre_z, d_pre_n * r], dim=1)
            d_s_direct = ds * z
        # Weight gradients, once for all steps; W_h s_0 + b_h came before the loop.
        d_proj_flat = d_proj.reshape(B * T, -1)
        d_w_stack = d_proj_flat.t() @ news.reshape(B * T, H)
        d_b_stack = d_proj_flat.sum(0)
        d_w_stack[A + H :].addmm_(d_gh_next.t(), s0)
        d_b_stack[A + H :] += d_gh_next.sum(0)
        d_s0 = torch.addmm(d_s_direct, d_gh_next, w_stack[A + H :])
        previous_feeds = torch.cat([f0.unsqueeze(1), feeds[:, :-1]], dim=1)
        d_w_f = d_x.reshape(B * T, -1).t() @ previous_feeds.reshape(B * T, H)
        d_w_cc = d_pre_c_all.reshape(B * T, H).t() @ contexts.reshape(B * T, -1)
        d_values = torch.bmm(alphas.transpose(1, 2), d_c_all)
        return d_x, d_s0, d_f, d_keys, d_values, None, d_w_stack, d_b_stack, d_w_f, d_w_cc, d_v
