"""Beam search, batched over sentences and beams, with GNMT's length and coverage penalties."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import torch

from alignmt.decoding.hypothesis import (
    Hypothesis,
    OutputRules,
    banned_tokens,
    check_lengths,
    max_output_lengths,
)
from alignmt.decoding.precision import check_precision, model_at
from alignmt.decoding.top_words import TopWords, step_words
from alignmt.models.seq2seq import DecoderState, Memory, Seq2Seq, reorder_state
from alignmt.models.step_linear import packed_weights
from alignmt.special_tokens import BOS_ID, UNK_ID

# GNMT's log(min(coverage, 1)) is -inf for a source word no attention weight reaches (outside
# every window of local attention, or weights that underflowed): one such word makes every
# hypothesis -inf and leaves the ranking to chance. Coverage is floored at the smallest positive
# float32 instead: every coverage float32 can hold keeps its exact GNMT term, and a word never
# attended costs more than any attended one, yet log P and lp still rank the hypotheses.
COVERAGE_FLOOR = 2.0**-149


class BeamSearch:
    """Keeps the `beam_size` most probable unfinished prefixes of every sentence and ranks
    finished hypotheses by Wu et al. (2016)'s

        s(Y, X) = log P(Y|X) / lp(Y) + cp(X; Y)
        lp(Y)   = ((5 + |Y|) / 6) ** length_penalty          |Y| counts the final [EOS]
        cp(X;Y) = coverage_penalty * sum_j log(max(min(sum_i alpha_ij, 1), COVERAGE_FLOOR))

    over the source positions j (its [EOS] included) and output positions i; both penalties at
    0 rank by log P. The `nbest` best finished hypotheses of each sentence are returned, best
    first (on ties, the one finished first).

    Every step extends each live prefix by every word. The `beam_size` most probable
    extensions other than [EOS] stay live (all have the same length, so lp does not reorder
    them), and the [EOS] extension of every live prefix is a finished candidate, kept if its s
    ranks among the `nbest` best so far, whatever its rank by log P.

    `stopping="exact"`: a live prefix y can at best finish with s = log P(y) / lp(cap + 1), since
    log P <= 0 only falls as words are added, lp grows with length up to the cap (lp = 1 when
    length_penalty = 0) and cp <= 0. A sentence stops once no live prefix's bound exceeds its
    worst kept hypothesis, so stopping never changes the result: the `nbest` best [EOS]
    extensions the beam makes up to the cap. `stopping="early"` is the usual heuristic instead:
    an [EOS] extension counts only among the `beam_size` most probable extensions, and a
    sentence stops at `beam_size` finished hypotheses; with `beam_size=1` it is greedy search.
    With exact stopping, `beam_size=1` returns the best ending along the path of the most
    probable words other than [EOS]: greedy search's path, whose best ending greedy search can
    step past, since it stops only where [EOS] is the most probable word.

    The beams of all sentences share one batch dimension (sentence-major, `beam_size` rows
    each): the encoder runs once, its memory is expanded once, and the decoder state, whatever
    it holds, is reordered by index after every step; stopped sentences leave the batch. Where
    the model's beams can share memory (`beams_share_memory`), it is not expanded at all.
    Output lengths: at most `max_length` words when given, else `max_length_ratio * source
    words + max_length_offset`; [EOS] only from `min_length` words on (unless the cap comes
    first). [PAD] and [BOS] are never generated, nor [UNK] with `forbid_unk` (the paper's
    "No UNK" evaluation), which a call can also ask for alone; where [UNK] never was among a
    sentence's K best extensions, forbidding it changes nothing there (ties aside), and its
    hypotheses say so (`same_without_unk`). `precision="bfloat16"` runs a bfloat16 copy of the
    model (decoding/precision.py).
    """

    def __init__(
        self,
        beam_size: int = 5,
        nbest: int = 1,
        length_penalty: float = 0.0,
        coverage_penalty: float = 0.0,
        max_length_ratio: float = 2.0,
        max_length_offset: int = 10,
        max_length: int | None = None,
        min_length: int = 0,
        forbid_unk: bool = False,
        stopping: str = "exact",
        precision: str = "float32",
    ):
        if beam_size < 1:
            raise ValueError(f"beam_size must be at least 1, got {beam_size}")
        if not 1 <= nbest <= beam_size:
            raise ValueError(f"nbest must be between 1 and beam_size={beam_size}, got {nbest}")
        if length_penalty < 0 or coverage_penalty < 0:  # the stopping bound assumes both >= 0
            raise ValueError(
                f"penalties must be at least 0, got length_penalty={length_penalty}, "
                f"coverage_penalty={coverage_penalty}"
            )
        if stopping not in ("exact", "early"):
            raise ValueError(f"stopping must be 'exact' or 'early', got {stopping!r}")
        check_lengths(min_length, max_length)
        check_precision(precision)
        self.precision = precision
        self.beam_size = beam_size
        self.nbest = nbest
        self.length_penalty = length_penalty
        self.coverage_penalty = coverage_penalty
        self.max_length_ratio = max_length_ratio
        self.max_length_offset = max_length_offset
        self.max_length = max_length
        self.min_length = min_length
        self.forbid_unk = forbid_unk
        self.stopping = stopping

    def lp(self, lengths: torch.Tensor) -> torch.Tensor:
        """GNMT's length penalty of outputs of `lengths` tokens ([EOS] included)."""
        return ((5 + lengths.double()) / 6) ** self.length_penalty

    def ranking_score(
        self,
        log_prob: torch.Tensor,
        lengths: torch.Tensor,
        coverage: torch.Tensor | None,
        src_lengths: torch.Tensor,
    ) -> torch.Tensor:
        """s(Y, X) of finished hypotheses, in float64: log P [N], lengths [N] with [EOS],
        coverage sum_i alpha_ij [N, S] (unused without coverage penalty), src_lengths [N]."""
        score = log_prob.double() / self.lp(lengths)
        if self.coverage_penalty == 0:
            return score
        per_word = coverage.double().clamp(min=COVERAGE_FLOOR, max=1.0).log()
        real = torch.arange(coverage.size(1), device=coverage.device) < src_lengths.unsqueeze(1)
        return score + self.coverage_penalty * per_word.where(real, 0.0).sum(dim=1)

    @torch.inference_mode()
    def __call__(
        self,
        model: Seq2Seq,
        src: torch.Tensor,
        src_lengths: torch.Tensor,
        *,
        forbid_unk: bool | None = None,
    ) -> list[list[Hypothesis]]:
        if self.coverage_penalty and not model.has_attention:
            raise ValueError("coverage_penalty needs a model with attention")
        banned = banned_tokens(self.forbid_unk if forbid_unk is None else forbid_unk)
        with packed_weights():  # the weights are fixed for the search: packed once
            return self._search(model_at(self.precision, model), src, src_lengths, banned)

    def _search(self, model, src, src_lengths, banned) -> list[list[Hypothesis]]:
        beams = _Beams.start(self, model, src, src_lengths)
        rules = OutputRules(beams.limits, self.min_length, banned)
        for t in range(int(beams.limits.max()) + 1):
            logits, beams.state, alpha = model.step(beams.prev, beams.memory, beams.state)
            caps = None
            if rules.some_at_cap(t):
                caps = beams.limits[beams.sentences].repeat_interleave(self.beam_size)
            beams.attend(alpha)
            k = min(self.beam_size, logits.size(1))
            best = step_words(logits.float(), k, rules, t, caps, eos_apart=True)
            top, origins, words, ends = beams.extend(best)
            if UNK_ID not in banned:  # (where it is, it is never among the finite extensions)
                beams.extensions.append((beams.sentences, words, top))
            if ends is not None:  # else no prefix could end at this step
                self._finish(beams, t, ends, top)
            running = self._running(beams, top)
            stopped = int(running.numel() - running.sum())
            if stopped == running.numel():
                break
            beams.advance(running, stopped, top, words, origins)
        return beams.nbest_lists()

    def _finish(self, beams: _Beams, t: int, ends: torch.Tensor, top: torch.Tensor) -> None:
        """Keeps the [EOS] extensions `ends` [n, K] of step `t` that rank among each sentence's
        `nbest` best finished hypotheses (with early stopping, only those among the K most
        probable extensions, `top` [n, K] being the others' best)."""
        K, N, sentences = self.beam_size, self.nbest, beams.sentences
        admit = ends.isfinite()
        if self.stopping == "early":  # only among the K most probable extensions
            admit &= ends >= torch.cat([top, ends], dim=1).topk(K, dim=1).values[:, -1:]
        beams.n_finished[sentences] += admit.sum(dim=1)
        if not bool(admit.any()):
            return
        beams.finished_any = True
        n = sentences.numel()
        score = self.ranking_score(
            ends.view(-1),
            torch.full((n * K,), t + 1, dtype=torch.long, device=ends.device),
            beams.coverage,
            beams.src_lengths[sentences].repeat_interleave(K),
        ).view(n, K)
        # Stable, so that on ties the hypothesis kept before stays ahead.
        merged, order = torch.cat(
            [beams.kept[sentences], score.where(admit, -math.inf)], dim=1
        ).sort(dim=1, descending=True, stable=True)
        order = order[:, :N]
        new, before = order >= N, order.clamp(max=N - 1)  # new: finished at this step
        rows_now = torch.arange(n, device=ends.device).unsqueeze(1) * K + order - N
        beams.kept[sentences] = merged[:, :N]
        kept_step, kept_row = beams.kept_step[sentences], beams.kept_row[sentences]
        beams.kept_step[sentences] = kept_step.gather(1, before).masked_fill(new, t)
        beams.kept_row[sentences] = kept_row.gather(1, before).where(~new, rows_now)

    def _running(self, beams: _Beams, top: torch.Tensor) -> torch.Tensor:
        """Which active sentences go on, given their live prefixes' log P `top` [n, K]."""
        sentences = beams.sentences
        if not beams.finished_any:  # as below, with nothing kept and nothing finished
            return top[:, 0].isfinite()
        if self.stopping == "exact":  # no live prefix can still beat the worst kept
            return top[:, 0].double() / beams.longest_lp[sentences] > beams.kept[sentences, -1]
        return (beams.n_finished[sentences] < self.beam_size) & top[:, 0].isfinite()


@dataclass
class _Beams:
    """One call's search state. The beams of all sentences share one batch dimension
    (sentence-major, K rows each) of memory, decoder state, `prev` and `coverage`; `scores`
    [n, K] holds each live prefix's cumulative log P (-inf: dead), `sentences` the active
    sentences. History, written once per step and never copied: every row's attention, and
    for each row of the next step the word it adds and the row it extends; hypotheses are read
    back from it at the end, following those links. `kept` holds each sentence's `nbest` best
    finished hypotheses' s (best first), `kept_step` and `kept_row` the step and row of the
    prefix whose [EOS] extension each one is."""

    K: int
    memory: Memory
    shared_memory: bool  # one row of memory per sentence (`beams_share_memory`), else K
    state: DecoderState
    limits: torch.Tensor  # [B] output caps
    src_lengths: torch.Tensor  # [B]
    longest_lp: torch.Tensor  # [B] lp of the longest output each sentence allows
    sentences: torch.Tensor
    scores: torch.Tensor
    coverage: torch.Tensor | None  # [n * K, S] sum of attention, with a coverage penalty
    prev: torch.Tensor
    kept: torch.Tensor
    kept_step: torch.Tensor
    kept_row: torch.Tensor
    n_finished: torch.Tensor
    finished_any: bool  # whether any hypothesis was kept (n_finished and kept are not all 0, -inf)
    alphas: list[torch.Tensor] = field(default_factory=list)
    # each step's active sentences and their K best extensions' words and log P [n, K]
    extensions: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = field(default_factory=list)
    words_at: list[torch.Tensor] = field(default_factory=list)
    parents_at: list[torch.Tensor] = field(default_factory=list)

    @classmethod
    def start(cls, search: BeamSearch, model: Seq2Seq, src, src_lengths) -> _Beams:
        (B, S), K, N, device = src.shape, search.beam_size, search.nbest, src.device
        memory, state = model.start(src, src_lengths)
        rows = torch.arange(B, device=device).repeat_interleave(K)
        limits = max_output_lengths(
            src_lengths, search.max_length_ratio, search.max_length_offset, search.max_length
        ).to(device)
        # All beams start equal, so only the first one is live at the first step.
        scores = torch.full((B, K), -math.inf, device=device)
        scores[:, 0] = 0.0
        ranks_coverage = model.has_attention and search.coverage_penalty > 0
        return cls(
            K=K,
            memory=memory if model.beams_share_memory else memory.index_select(rows),
            shared_memory=model.beams_share_memory,
            state=reorder_state(state, rows),
            limits=limits,
            src_lengths=src_lengths.to(device),
            longest_lp=search.lp(limits + 1),
            sentences=torch.arange(B, device=device),
            scores=scores,
            coverage=torch.zeros(B * K, S, device=device) if ranks_coverage else None,
            prev=torch.full((B * K,), BOS_ID, dtype=torch.long, device=device),
            kept=torch.full((B, N), -math.inf, dtype=torch.float64, device=device),
            kept_step=torch.zeros(B, N, dtype=torch.long, device=device),
            kept_row=torch.zeros(B, N, dtype=torch.long, device=device),
            n_finished=torch.zeros(B, dtype=torch.long, device=device),
            finished_any=False,
        )

    def attend(self, alpha: torch.Tensor | None) -> None:
        """Records this step's attention [n * K, S] (models with attention), and sums it where
        the coverage penalty ranks by it."""
        if alpha is None:
            return
        alpha = alpha.float()
        self.alphas.append(alpha)
        if self.coverage is not None:
            self.coverage = self.coverage + alpha

    def extend(self, top: TopWords):
        """Every live prefix extended by every word: the K most probable extensions other than
        [EOS] of each sentence (log P [n, K], the rows they extend and their words, [n, K]),
        and every live prefix's [EOS] extension [n, K] (None where no prefix may end), from
        each live prefix's k best words `top` (log P [n * K, k]). A prefix's score adds the
        same to each of its extensions, so the sentence's K best are among its prefixes' K best
        words each: two small selections instead of one over K * V extensions per sentence."""
        n, K, rows = self.sentences.numel(), self.K, self.scores.view(-1, 1)  # [n * K, 1]
        ends = None if top.eos is None else (top.eos.unsqueeze(1) + rows).view(n, K)
        k = top.log_probs.size(1)
        best, at = (top.log_probs + rows).view(n, K * k).topk(K, dim=1)
        origins = (torch.arange(n, device=rows.device) * K).unsqueeze(1) + at // k
        return best, origins, top.words.view(n, K * k).gather(1, at), ends

    def advance(self, running, stopped: int, top, words, origins) -> None:
        """The next step's live prefixes: those of the running sentences. A stopped
        sentence's prefixes die, so it finishes nothing more; its rows leave the batch at
        once where the memory is one row per sentence, else once stopped sentences are a
        quarter of it, since copying K rows of memory per sentence costs about as much as a
        step. `stopped` counts the sentences `running` [n] stops."""
        n, K = self.sentences.numel(), self.K
        self.scores = top.where(running.unsqueeze(1), -math.inf) if stopped else top
        if stopped and (self.shared_memory or 4 * stopped >= n):
            keep = running.nonzero().squeeze(1)
            self.sentences, self.scores = self.sentences[keep], self.scores[keep]
            words, origins = words[keep], origins[keep]
            keep_rows = (keep.unsqueeze(1) * K + torch.arange(K, device=keep.device)).view(-1)
            self.memory = self.memory.index_select(keep if self.shared_memory else keep_rows)
        index = origins.view(-1)
        self.state = reorder_state(self.state, index)
        self.prev = words.view(-1)
        self.words_at.append(self.prev)
        self.parents_at.append(index)
        if self.coverage is not None:
            self.coverage = self.coverage[index]

    def unk_chosen(self) -> torch.Tensor:
        """[B] whether [UNK] was ever among a sentence's K best extensions with a finite log P,
        from the extensions of every step, a run of steps with the same sentences at once."""
        chosen = torch.zeros(len(self.src_lengths), dtype=torch.bool, device=self.kept.device)
        runs = itertools.groupby(self.extensions, key=lambda step: id(step[0]))
        for _, run in runs:
            sentences, words, top = zip(*run, strict=True)
            unk = (torch.stack(words) == UNK_ID) & torch.stack(top).isfinite()  # [steps, n, K]
            chosen[sentences[0]] |= unk.any(dim=2).any(dim=0)
        return chosen

    def nbest_lists(self) -> list[list[Hypothesis]]:
        """The kept hypotheses, read back from the history: from the row whose [EOS] extension
        each one is, back one step at a time to the first word."""
        kept, alphas, words_at, parents_at = self.kept, self.alphas, self.words_at, self.parents_at
        sentence, rank = kept.isfinite().nonzero(as_tuple=True)
        steps, cursor = self.kept_step[sentence, rank], self.kept_row[sentence, rank].clone()
        T = int(steps.max()) + 1 if len(steps) else 0
        tokens = torch.zeros(len(steps), T, dtype=torch.long, device=kept.device)
        attention = None
        if alphas:
            attention = torch.zeros(len(steps), T, alphas[0].size(1), device=kept.device)
        for t in range(T - 1, -1, -1):  # cursor: the row of step t each hypothesis went through
            at = (steps >= t).nonzero().squeeze(1)
            if attention is not None:
                attention[at, t] = alphas[t][cursor[at]]
            if t > 0:
                tokens[at, t - 1] = words_at[t - 1][cursor[at]]
                cursor[at] = parents_at[t - 1][cursor[at]]
        out: list[list[Hypothesis]] = [[] for _ in range(len(kept))]
        tokens, attention = tokens.cpu(), None if attention is None else attention.cpu()
        lengths, scores = self.src_lengths.tolist(), kept[sentence, rank].tolist()
        same_without_unk = (~self.unk_chosen()).tolist()
        for h, (b, t) in enumerate(zip(sentence.tolist(), steps.tolist(), strict=True)):
            alpha = None if attention is None else attention[h, : t + 1, : lengths[b]]
            hypothesis = Hypothesis(tokens[h, :t].tolist(), scores[h], alpha, same_without_unk[b])
            out[b].append(hypothesis)
        return out
