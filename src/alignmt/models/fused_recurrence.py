"""Decoder recurrences (additive attention + GRU) as hand-written autograd functions: RNNsearch's
and Luong's input-feeding decoder.

Under teacher forcing the recurrence is the only sequential part of these models, and with small
batches its cost is dominated by per-step overheads: every step records some thirty autograd
nodes and computes five small weight gradients that are summed over steps. This function
runs the same arithmetic without building a graph and back-propagates through time by hand:
per-step work is only what truly depends on the previous step, and the weight gradients are
computed once for all steps as large matrix products. The per-step products take weights
packed once per pass (step_linear); in float32 on CPU the attention energies and the GRU step
are native passes (native_energies, native_gru). `tests/unit/test_fast_paths.py` checks
values and gradients against the decoders' step functions.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from alignmt.models import native_energies, native_gru
from alignmt.models.step_linear import StepLinear

tanh_backward = torch.ops.aten.tanh_backward
sigmoid_backward = torch.ops.aten.sigmoid_backward


def runs_fused(x: torch.Tensor) -> bool:
    """Whether the hand-written recurrences take input x: float32 or float64 CPU tensors, outside
    autocast (their attention energies carry a constant offset, which a float32 softmax
    ignores to rounding but bfloat16 would round into the energies)."""
    return (
        x.device.type == "cpu"
        and x.dtype in (torch.float32, torch.float64)
        and not torch.is_autocast_enabled("cpu")
    )


class LinguisticCell:
    """Tu et al.'s linguistic coverage inside a fused recurrence: C' = C + alpha / Phi (Phi = 1
    without fertility), on plain tensors, with its backward pass by hand."""

    def __init__(self, fertility: torch.Tensor | None = None):
        self.fertility = fertility  # [B, S, 1]
        self.d_fertility = None if fertility is None else torch.zeros_like(fertility)

    def step(self, t, coverage, alpha, query):
        increment = alpha.unsqueeze(-1)
        if self.fertility is not None:
            increment = increment / self.fertility
        return coverage + increment

    def backward(self, t, d_next, coverage, alpha, query):
        """(d coverage, d alpha, d query or None) from d_next, the gradient into C'."""
        if self.fertility is None:
            return d_next, d_next.squeeze(-1), None
        d_increment = d_next / self.fertility
        self.d_fertility -= d_increment * alpha.unsqueeze(-1) / self.fertility
        return d_next, d_increment.squeeze(-1), None

    def grads(self) -> tuple:
        return () if self.fertility is None else (self.d_fertility,)


class NeuralCell:
    """Tu et al.'s neural coverage inside a fused recurrence: C' = GRU(C, [alpha; h_j; query])
    with the annotations' part of the gates precomputed, on plain tensors. Every source word's
    unit is a row of one [B S, 3n] GRU step (gru_update_into: one native pass each way)."""

    def __init__(self, annotation_gates, w_weight, w_query, w_rec, b_rec):
        self.annotation_gates, self.w_query = annotation_gates, w_query
        self.w_weight = w_weight[:, 0]  # [3n]: alpha is one input unit
        self.w_rec, self.b_rec = w_rec, b_rec
        self.saved = {}  # step -> r, z, n and W_hn C + b_hn, as gru_update_into keeps them
        # d W_rec summed as its transpose, as AttentionSteps sums d W_cov (see its grads())
        inputs = annotation_gates, w_weight, w_query, w_rec.t(), b_rec
        self.d = [torch.zeros_like(p, memory_format=torch.contiguous_format) for p in inputs]

    def step(self, t, coverage, alpha, query):
        n_size = coverage.size(-1)
        gates_x = torch.addcmul(self.annotation_gates, alpha.unsqueeze(-1), self.w_weight)
        gates_x += (query @ self.w_query.t()).unsqueeze(1)
        rows = coverage.reshape(-1, n_size)
        gates_h = torch.addmm(self.b_rec, rows, self.w_rec.t())
        gates, gh_n, out = gates_h.new_empty(gates_h.shape), *rows.new_empty(2, *rows.shape)
        self.saved[t] = gates, gh_n
        gru_update_into(gates_x.view(-1, 3 * n_size), gates_h, rows, gates, gh_n, out)
        return out.view(coverage.shape)

    def backward(self, t, d_next, coverage, alpha, query):
        """(d coverage, d alpha, d query) from d_next, the gradient into C'."""
        gates, gh_n = self.saved.pop(t)
        B, S, n_size = coverage.shape
        rows = coverage.reshape(-1, n_size)
        d_gx, d_gh = gates.new_empty(2, *gates.shape)
        direct = gru_update_into_backward(d_next.reshape(-1, n_size), rows, gates, gh_n, d_gx, d_gh)
        d_gates, d_weight, d_query_w, d_rec_t, d_bias = self.d
        d_gates += d_gx.view(B, S, -1)
        d_weight[:, 0].addmv_(d_gx.t(), alpha.reshape(-1))
        d_per_query = d_gx.view(B, S, -1).sum(1)  # [B, 3n]
        d_query_w.addmm_(d_per_query.t(), query)
        d_rec_t.addmm_(rows.t(), d_gh)
        d_bias += d_gh.sum(0)
        d_coverage = torch.addmm(direct, d_gh, self.w_rec).view(B, S, n_size)
        d_alpha = (d_gx @ self.w_weight).view(B, S)
        return d_coverage, d_alpha, d_per_query @ self.w_query

    def grads(self) -> tuple:
        d_gates, d_weight, d_query_w, d_rec_t, d_bias = self.d
        return d_gates, d_weight, d_query_w, d_rec_t.t(), d_bias


class AttentionSteps:
    """The additive attention of a fused recurrence, one step at a time forward and backward:

        E = v . tanh(K + W_cov C + q);  alpha = softmax(E masked);  c = alpha V

    with C a coverage model's state (`cell`, `w_cov`), if any, advanced after every step. Since
    tanh(x) = 2 sigmoid(2x) - 1, E = 2 v . sigmoid(2 (K + W_cov C + q)) - sum(v), and the
    constant leaves alpha unchanged: the [B, S, A] activations cost one fused add (or addmm) and
    one sigmoid, no tanh and no rescaling passes; in float32 on CPU they take one native pass
    each way (native_energies), with W_cov C and its gradients inside it, as does the weights'
    gradient from the context's. It keeps the (doubled) queries and coverage of every
    step; the activations, the largest term, are recomputed in the backward pass."""

    def __init__(self, T, keys, values, mask, v, w_cov=None, cell=None, coverage=None):
        B, A = keys.size(0), keys.size(2)
        self.native = native_energies.usable(keys)
        if self.native:
            keys, values = keys.contiguous(), values.contiguous()
        self.keys, self.values, self.blocked, self.v = keys, values, ~mask, v
        self.two_v = 2 * v
        self.w_cov, self.cell, self.coverage = w_cov, cell, coverage
        if self.native and cell is not None:
            self.w_cov_t = w_cov.t().contiguous()  # [n, A]: the native pass's layout
        self.doubled_queries = keys.new_empty(T, B, A)  # 2 q of every step
        self.hidden = None if self.native else torch.empty_like(keys)
        self.coverages = None if cell is None else keys.new_empty(T, *coverage.shape)

    def _sigmoids(self, t):
        """sigmoid(2 (K + W_cov C_t + q_t)) [B, S, A], in the one reused buffer."""
        h, doubled_query = self.hidden, self.doubled_queries[t].unsqueeze(1)
        if self.cell is None:
            torch.add(doubled_query, self.keys, alpha=2, out=h)
        else:
            A = h.size(-1)
            coverage = self.coverages[t].flatten(0, 1)
            keys = self.keys.reshape(-1, A)
            torch.addmm(keys, coverage, self.w_cov.t(), beta=2, alpha=2, out=h.view(-1, A))
            h.add_(doubled_query)
        return h.sigmoid_()

    def forward(self, t, q, query, out=None):
        """alpha [B, S] and c [B, D] (written to `out` if given) of step t, for the projected
        query q [B, A]; `query` is what the coverage model reads."""
        torch.mul(q, 2, out=self.doubled_queries[t])
        if self.cell is not None:
            self.coverages[t] = self.coverage
        if self.native:  # E + sum(v): the same softmax
            energy = native_energies.energies(
                self.keys, self.doubled_queries[t], self.two_v, q.new_empty(self.blocked.shape),
                *self._native_coverage(t),
            )  # fmt: skip
        else:
            energy = torch.matmul(self._sigmoids(t), self.two_v)
        alpha = torch.softmax(energy.masked_fill_(self.blocked, float("-inf")), dim=-1)
        into = None if out is None else out.unsqueeze(1)
        c = torch.bmm(alpha.unsqueeze(1), self.values, out=into)
        if self.cell is not None:
            self.coverage = self.cell.step(t, self.coverage, alpha, query)
        return alpha, c.squeeze(1)

    def backward(self, t, alpha, d_c, d_alpha, query):
        """(dq [B, A], d query from the coverage model or None) of step t, from d_c and any
        gradient d_alpha on the weights themselves; steps go backward from the last."""
        if t == self.doubled_queries.size(0) - 1:
            self.d_keys, self.d_v = torch.zeros_like(self.keys), torch.zeros_like(self.v)
            self.four_v = 4 * self.v
            if not self.native:  # reused: a fresh one faults its pages
                self.products = torch.empty_like(self.values)
            if self.cell is not None:
                self.d_coverage = torch.zeros_like(self.coverage)
                self.d_w_cov_t = self.w_cov.new_zeros(self.w_cov.t().shape)  # see grads()
        if self.native:
            d_alpha_c = native_energies.weights_grad(
                self.values, d_c.contiguous(), alpha.new_empty(alpha.shape)
            )
        else:
            products = torch.mul(self.values, d_c.unsqueeze(1), out=self.products)
            d_alpha_c = products.sum(-1)  # faster than bmm for this shape
        d_alpha = d_alpha_c if d_alpha is None else d_alpha_c + d_alpha
        d_query = None
        if self.cell is not None:
            coverage = self.coverages[t]
            self.d_coverage, d_alpha_cov, d_query = self.cell.backward(
                t, self.d_coverage, coverage, alpha, query
            )
            d_alpha = d_alpha + d_alpha_cov
        d_energy = alpha * (d_alpha - (alpha * d_alpha).sum(-1, keepdim=True))
        if self.native:
            dq, dv_rows = d_energy.new_empty(2, *self.doubled_queries[t].shape)
            coverage_grads = ()
            if self.cell is not None:  # d C_t accumulates onto the cell's part
                self.d_coverage = self.d_coverage.contiguous()
                coverage_grads = self.d_coverage, self.d_w_cov_t
            native_energies.energies_backward(
                self.keys, self.doubled_queries[t], self.four_v, d_energy.contiguous(),
                self.d_keys, dq, dv_rows, *self._native_coverage(t), *coverage_grads,
            )  # fmt: skip
            self.d_v.add_(dv_rows.sum(0), alpha=2)
            self.d_v -= d_energy.sum()
            return dq, d_query
        sigmoids = self._sigmoids(t)
        A = sigmoids.size(-1)
        # dE/dv = tanh = 2 sigmoid - 1;  dE/d(pre-activation) = 4 v sigmoid (1 - sigmoid)
        self.d_v.addmv_(sigmoids.view(-1, A).t(), d_energy.view(-1), alpha=2)
        self.d_v -= d_energy.sum()
        d_pre = sigmoid_backward_(self.four_v, sigmoids).mul_(d_energy.unsqueeze(2))
        self.d_keys += d_pre
        if self.cell is not None:
            self._coverage_backward(coverage, d_pre)
        return d_pre.sum(1), d_query

    def _native_coverage(self, t) -> tuple:
        """The native pass's coverage arguments at step t: (C_t, W_cov transposed) or none."""
        return () if self.cell is None else (self.coverages[t], self.w_cov_t)

    def _coverage_backward(self, coverage, d_pre):
        """d C and d W_cov of a step from d_pre, the gradient of its K + W_cov C [B, S, A]."""
        self.d_coverage = self.d_coverage + d_pre @ self.w_cov
        self.d_w_cov_t.addmm_(coverage.flatten(0, 1).t(), d_pre.view(-1, d_pre.size(-1)))

    def grads(self) -> tuple:
        """d keys, d v, d W_cov (None without coverage) and the coverage model's inputs'. d W_cov
        [A, n] is summed as its transpose: with n a few units, the [A, B S] x [B S, n] product
        runs several times slower per step than [n, B S] x [B S, A]."""
        if self.cell is None:
            return self.d_keys, self.d_v, None
        return self.d_keys, self.d_v, self.d_w_cov_t.t(), *self.cell.grads()


def sigmoid_backward_(grad: torch.Tensor, sigmoids: torch.Tensor) -> torch.Tensor:
    """grad * s (1 - s) written over the sigmoids s, `grad` broadcast to their shape."""
    return torch.ops.aten.sigmoid_backward.grad_input(grad, sigmoids, grad_input=sigmoids)


class Refeed:
    """Scheduled sampling inside a fused recurrence. After step t, `feed`
    (`sampling.MixedFeed.choose`) picks the rows whose input at step t + 1 is the model's own
    prediction, whose logits `logits_of(rows, tokens_t, *step values)` computes for those rows
    only; their input gates E y W^T + b are recomputed here. `tokens` [B, T] ends as what was
    fed. Backward splits the input gates' gradient: the reference's positions go to `x`, the
    replaced ones to the embedding table E and the projection (W, b) directly."""

    def __init__(self, feed, tokens: torch.Tensor, logits_of):
        self.feed, self.logits_of = feed, logits_of
        self.tokens = tokens.clone()
        self.replaced: list[tuple[int, torch.Tensor, torch.Tensor]] = []  # (t, rows, tokens)

    def after_step(self, t, x, table, weight, bias, *values) -> None:
        """Choose the inputs of step t + 1 from step t's `values`, rewriting x [B, T, G]."""
        if t + 1 >= x.size(1):
            return
        current = self.tokens[:, t]
        rows, own = self.feed.choose(
            self.tokens[:, t + 1], lambda rows: self.logits_of(rows, current, *values)
        )
        if len(rows):
            self.tokens[rows, t + 1] = own
            x[rows, t + 1] = torch.addmm(bias, table[own], weight.t())
            self.replaced.append((t + 1, rows, own))

    def backward(self, d_x, table, weight) -> tuple:
        """(d x with the replaced positions zeroed, d E, d W, d b of the replaced inputs)."""
        if not self.replaced:
            return d_x, None, None, None
        steps = torch.cat([rows.new_full(rows.shape, t) for t, rows, _ in self.replaced])
        rows = torch.cat([rows for _, rows, _ in self.replaced])
        own = torch.cat([own for _, _, own in self.replaced])
        d_own = d_x[rows, steps]  # [N, G]
        d_x.index_put_((rows, steps), d_own.new_zeros(()))  # the recurrence's own buffer
        d_table = torch.zeros_like(table).index_add_(0, own, d_own @ weight)
        return d_x, d_table, d_own.t() @ table[own], d_own.sum(0)


def refeed_grads(refeed: Refeed | None, d_x, table, weight) -> tuple:
    """A recurrence's gradients of x and its four scheduled-sampling arguments."""
    if refeed is None:
        return d_x, None, None, None, None
    d_x, *grads = refeed.backward(d_x, table, weight)
    return d_x, None, *grads


def refeed_inputs(refeed: Refeed | None, table, weight, bias) -> tuple:
    """The arguments a fused recurrence takes for scheduled sampling (all None without)."""
    return (None, None, None, None) if refeed is None else (refeed, table, weight, bias)


def coverage_inputs(attention, state) -> tuple | None:
    """What the fused recurrences take for `attention`'s coverage model, given the attention
    state at the first step: (W_cov, cell type, C_0, the cell's tensors...), (None, None, None)
    without coverage; None where they cannot run it (a state of the variant's own, a coverage
    model without a cell, coverage outside the energies' nonlinearity)."""
    if attention.coverage is None:
        return None if state else (None, None, None)
    if set(state) != {"coverage"} or attention.key_term_size() is None:
        return None
    fused = attention.coverage.fused_cell(state["coverage"])
    if fused is None:
        return None
    cell, tensors = fused
    return attention.coverage_proj.weight, cell, state["coverage"]["coverage"], *tensors


def attention_steps(T, keys, values, mask, v, w_cov, cell_type, coverage, cell_tensors):
    cell = None if cell_type is None else cell_type(*cell_tensors)
    return AttentionSteps(T, keys, values, mask, v, w_cov, cell, coverage)


def coverage_grads(steps: AttentionSteps) -> tuple:
    """The gradients of a recurrence's coverage inputs: W_cov, its type, C_0, its tensors."""
    _, _, d_w_cov, *cell_grads = steps.grads()
    return (d_w_cov, None, None, *cell_grads)


def gru_update_into(gx, gh, s, gates, gh_n, out) -> torch.Tensor:
    """functional.gru_update(s, gx, gh) without autograd, into buffers: r, z, n to `gates`
    [B, 3H] and gh_n to `gh_n` [B, H] (both kept for gru_update_into_backward), s' to `out`,
    which it returns. One native pass in float32 on CPU (native_gru)."""
    if native_gru.usable(gx, gh, s):
        return native_gru.update(gx, gh, s, gates, gh_n, out)
    H = s.size(1)
    rz = torch.add(gx[:, : 2 * H], gh[:, : 2 * H], out=gates[:, : 2 * H]).sigmoid_()
    r, z = rz[:, :H], rz[:, H:]
    gh_n.copy_(gh[:, 2 * H :])
    n = torch.addcmul(gx[:, 2 * H :], r, gh_n, out=gates[:, 2 * H :]).tanh_()
    return torch.addcmul(n, z, s - n, out=out)


def gru_update_into_backward(ds, s, gates, gh_n, d_gx, d_gh) -> torch.Tensor:
    """gru_update_into's backward pass for d s' = ds: writes d gx to `d_gx` and d gh to `d_gh`
    (both [B, 3H]) and returns the gradient into s through s' = n + z (s - n) directly, ds z."""
    if native_gru.usable(ds, s, d_gh):
        return native_gru.update_backward(ds, s, gates, gh_n, d_gx, d_gh)
    H = s.size(1)
    r, z, n = gates[:, :H], gates[:, H : 2 * H], gates[:, 2 * H :]
    d_pre_n = tanh_backward.grad_input(ds * (1 - z), n, grad_input=d_gx[:, 2 * H :])
    sigmoid_backward.grad_input(d_pre_n * gh_n, r, grad_input=d_gx[:, :H])
    sigmoid_backward.grad_input(ds * (s - n), z, grad_input=d_gx[:, H : 2 * H])
    d_gh[:, : 2 * H] = d_gx[:, : 2 * H]
    torch.mul(d_pre_n, r, out=d_gh[:, 2 * H :])
    return ds * z


class AdditiveGRURecurrence(torch.autograd.Function):
    """For t = 0..T-1, with s = s_t:

        q = W_q s + b_q;  alpha, c = AttentionSteps (E = v . tanh(K + W_cov C + q))
        [r, z, n] gates from x_t + W_c c and W_h s + b_h;  s_{t+1} = n + z (s - n)

    Returns (states s_0..s_{T-1} [B, T, H], contexts c_1..c_T [B, T, D], alphas [B, T, S]).
    W_sh stacks W_q (first A rows) over W_h, so s_t is projected with one matmul per step.
    With coverage: `w_cov`, the cell's type (LinguisticCell, NeuralCell), C_0 and the cell's
    tensors; the cell reads s_t, the attention's query. Without: None, None, None.
    Scheduled sampling: a `Refeed` (its logits read s_t and c_t), the embedding table and the
    input gates' projection of x; without: None four times (`refeed_inputs`).
    """

    @staticmethod
    def forward(
        ctx, x, s0, keys, values, mask, w_sh, b_sh, v, w_c, refeed, table, w_x, b_x,
        w_cov, cell, c0, *cell_in,
    ):  # fmt: skip
        B, T, _ = x.shape
        if refeed is not None:
            x = x.clone()
        H, A, S = s0.size(1), keys.size(2), keys.size(1)
        attend = attention_steps(T, keys, values, mask, v, w_cov, cell, c0, cell_in)
        # Time-major buffers: each step writes its results in place (out=), contiguous.
        states = x.new_empty(T + 1, B, H)  # s_0..s_T
        states[0] = s0
        contexts = x.new_empty(T, B, values.size(2))
        alphas = x.new_empty(B, T, S)
        gates = x.new_empty(T, B, 3 * H)  # r, z, n of every step
        gh_n = x.new_empty(T, B, H)  # W_hn s + b_hn, which the reset gate multiplies
        by_sh, by_c = StepLinear(w_sh, B), StepLinear(w_c, B)
        for t in range(T):
            s = states[t]
            proj = by_sh(s, b_sh)  # q and W_h s + b_h
            alpha, c = attend.forward(t, proj[:, :A], s, out=contexts[t])
            alphas[:, t] = alpha
            gx = by_c.plus(c, x[:, t])
            if refeed is not None:  # rewrites x[:, t + 1] only
                refeed.after_step(t, x, table, w_x, b_x, s, c)
            gru_update_into(gx, proj[:, A:], s, gates[t], gh_n[t], out=states[t + 1])
        states = states[:-1]
        ctx.attend, ctx.refeed = attend, refeed
        ctx.save_for_backward(s0, w_sh, w_c, states, contexts, alphas, gates, gh_n, table, w_x)
        return states.transpose(0, 1), contexts.transpose(0, 1), alphas

    @staticmethod
    @once_differentiable
    def backward(ctx, d_states, d_contexts, d_alphas):
        s0, w_sh, w_c, states, contexts, alphas, gates, gh_n, table, w_x = ctx.saved_tensors
        attend, values = ctx.attend, ctx.attend.values
        T, B, H = states.shape
        A = w_sh.size(0) - 3 * H
        if d_states is None:
            d_states = states.new_zeros(B, T, H)
        if d_contexts is None:
            d_contexts = contexts.new_zeros(B, T, contexts.size(2))
        # Time-major, written in place: [dq, d(W_h s + b_h)] and d x of every step
        d_proj = states.new_empty(T, B, w_sh.size(0))
        d_x = states.new_empty(T, B, 3 * H)
        d_c_all = states.new_empty(T, B, values.size(2))
        ds = torch.zeros_like(s0)  # gradient flowing into s_{t+1}
        by_c, by_sh = StepLinear(w_c.t(), B), StepLinear(w_sh.t(), B)
        for t in reversed(range(T)):
            s, d_gx, d_p = states[t], d_x[t], d_proj[t]
            d_s_direct = gru_update_into_backward(ds, s, gates[t], gh_n[t], d_gx, d_p[:, A:])
            d_c = by_c.plus(d_gx, d_contexts[:, t], out=d_c_all[t])
            d_alpha = None if d_alphas is None else d_alphas[:, t]  # a loss on the attention
            dq, d_query = attend.backward(t, alphas[:, t], d_c, d_alpha, s)
            d_p[:, :A] = dq
            ds = by_sh.plus(d_p, d_s_direct.add_(d_states[:, t]))
            if d_query is not None:
                ds += d_query
        # Weight gradients, once for all steps.
        d_proj_flat = d_proj.view(T * B, -1)
        d_w_sh = d_proj_flat.t() @ states.reshape(T * B, H)
        d_b_sh = d_proj_flat.sum(0)
        d_w_c = d_x.view(T * B, -1).t() @ contexts.view(T * B, -1)
        d_values = torch.bmm(alphas.transpose(1, 2), d_c_all.transpose(0, 1))
        d_keys, d_v = attend.grads()[:2]
        d_x, *d_refeed = refeed_grads(ctx.refeed, d_x.transpose(0, 1), table, w_x)
        return (
            d_x, ds, d_keys, d_values, None, d_w_sh, d_b_sh, d_v, d_w_c, *d_refeed,
            *coverage_grads(attend),
        )  # fmt: skip


class LuongGRURecurrence(torch.autograd.Function):
    """Luong et al.'s input-feeding decoder (one GRU layer, additive attention on the new state)
    for t = 0..T-1, with s = s_t and f = h~_{t-1}:

        [r, z, n] gates from x_t + W_f f and W_h s + b_h;  s' = n + z (s - n)
        q = W_q s' + b_q;  E = v . tanh(K + q);  alpha = softmax(E masked);  c = alpha V
        h~_t = tanh(W_cc c + W_cs s')

    Returns (h~_0..h~_{T-1} [B, T, H], alphas [B, T, S]). W_stack stacks W_q, W_cs and W_h, which
    all multiply s', so each step projects s' once (its W_h part is the next step's). Coverage
    as in AdditiveGRURecurrence; its cell reads s', the attention's query. Scheduled sampling
    as there; its logits read h~_t.
    """

    @staticmethod
    def forward(
        ctx, x, s0, f0, keys, values, mask, w_stack, b_stack, w_f, w_cc, v, refeed, table, w_x,
        b_x, *coverage,
    ):  # fmt: skip
        B, T, _ = x.shape
        if refeed is not None:
            x = x.clone()
        H, A, S = s0.size(1), keys.size(2), keys.size(1)
        w_cov, cell, c0, *cell_in = coverage
        attend = attention_steps(T, keys, values, mask, v, w_cov, cell, c0, cell_in)
        # Time-major buffers: each step writes its results in place (out=), contiguous.
        news = x.new_empty(T, B, H)  # s' of every step
        feeds = x.new_empty(T, B, H)  # h~ of every step
        contexts = x.new_empty(T, B, values.size(2))
        alphas = x.new_empty(B, T, S)
        gates = x.new_empty(T, B, 3 * H)  # r, z, n of every step
        gh_n = x.new_empty(T, B, H)  # W_hn s + b_hn, which the reset gate multiplies
        by_f, by_stack, by_cc = StepLinear(w_f, B), StepLinear(w_stack, B), StepLinear(w_cc, B)
        gh = torch.addmm(b_stack[A + H :], s0, w_stack[A + H :].t())
        s, f = s0, f0
        for t in range(T):
            gx = by_f.plus(f, x[:, t])
            s = gru_update_into(gx, gh, s, gates[t], gh_n[t], out=news[t])
            proj = by_stack(s, b_stack)  # [B, A + H + 3H]: q, W_cs s', next W_h s'
            alpha, c = attend.forward(t, proj[:, :A], s, out=contexts[t])
            alphas[:, t] = alpha
            f = torch.tanh(by_cc.plus(c, proj[:, A : A + H]), out=feeds[t])
            gh = proj[:, A + H :]
            if refeed is not None:
                refeed.after_step(t, x, table, w_x, b_x, f)
        ctx.attend, ctx.refeed = attend, refeed
        ctx.save_for_backward(
            s0, f0, w_stack, w_f, w_cc, news, feeds, contexts, alphas, gates, gh_n, table, w_x
        )
        return feeds.transpose(0, 1), alphas

    @staticmethod
    @once_differentiable
    def backward(ctx, d_feeds, d_alphas):
        s0, f0, w_stack, w_f, w_cc, news, feeds, contexts, alphas, gates, gh_n, table, w_x = (
            ctx.saved_tensors
        )
        attend = ctx.attend
        T, B, H = news.shape
        if d_feeds is None:
            d_feeds = feeds.new_zeros(B, T, H)
        A = w_stack.size(0) - 4 * H
        # Time-major, written in place: [dq, d(W_cs s'), d(next W_h s')] per step
        d_proj = news.new_empty(T, B, A + 4 * H)
        d_proj[T - 1, :, A + H :] = 0  # no step T
        d_x = news.new_empty(T, B, 3 * H)
        d_c_all = news.new_empty(T, B, attend.values.size(2))
        d_gh_0 = news.new_empty(B, 3 * H)  # step 0's d(W_h s_0 + b_h)
        d_f = torch.zeros_like(s0)  # gradient flowing into h~_t from step t + 1
        d_s_direct = torch.zeros_like(s0)  # into s'_t through step t + 1's z s term
        by_cc, by_stack, by_f = (StepLinear(w.t(), B) for w in (w_cc, w_stack, w_f))
        for t in reversed(range(T)):
            d_p = d_proj[t]
            # h~ = tanh(W_cc c + W_cs s')
            d_pre_c = tanh_backward.grad_input(
                d_feeds[:, t] + d_f, feeds[t], grad_input=d_p[:, A : A + H]
            )
            d_c = by_cc(d_pre_c, out=d_c_all[t])
            d_alpha = None if d_alphas is None else d_alphas[:, t]
            dq, d_query = attend.backward(t, alphas[:, t], d_c, d_alpha, news[t])
            d_p[:, :A] = dq
            ds = by_stack.plus(d_p, d_s_direct)  # d s'_t
            if d_query is not None:
                ds += d_query
            s, d_gh = (news[t - 1], d_proj[t - 1, :, A + H :]) if t > 0 else (s0, d_gh_0)
            d_s_direct = gru_update_into_backward(ds, s, gates[t], gh_n[t], d_x[t], d_gh)
            d_f = by_f(d_x[t])
        d_s0 = torch.addmm(d_s_direct, d_gh_0, w_stack[A + H :])
        d_keys, d_v = attend.grads()[:2]
        weight_grads = luong_weight_grads(
            s0, f0, news, feeds, contexts, d_proj, d_x, d_proj[..., A : A + H], d_gh_0, A
        )
        d_x, *d_refeed = refeed_grads(ctx.refeed, d_x.transpose(0, 1), table, w_x)
        d_values = torch.bmm(alphas.transpose(1, 2), d_c_all.transpose(0, 1))
        return (
            d_x, d_s0, d_f, d_keys, d_values, None,
            *weight_grads, d_v, *d_refeed, *coverage_grads(attend),
        )  # fmt: skip


def luong_weight_grads(s0, f0, news, feeds, contexts, d_proj, d_x, d_pre_c, d_gh_0, A):
    """LuongGRURecurrence's weight gradients, once for all steps (time-major [T, B, ...]
    tensors): d W_stack, d b_stack, d W_f, d W_cc. W_h s_0 + b_h came before the loop; d_gh_0
    is its gradient."""
    T, B, H = news.shape
    d_proj_flat = d_proj.reshape(T * B, -1)
    d_w_stack = d_proj_flat.t() @ news.reshape(T * B, H)
    d_b_stack = d_proj_flat.sum(0)
    d_w_stack[A + H :].addmm_(d_gh_0.t(), s0)
    d_b_stack[A + H :] += d_gh_0.sum(0)
    previous_feeds = torch.cat([f0.unsqueeze(0), feeds[:-1]])
    d_w_f = d_x.reshape(T * B, -1).t() @ previous_feeds.reshape(T * B, H)
    d_w_cc = d_pre_c.reshape(T * B, H).t() @ contexts.reshape(T * B, -1)
    return d_w_stack, d_b_stack, d_w_f, d_w_cc
