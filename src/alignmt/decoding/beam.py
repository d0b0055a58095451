"""Beam search, batched over sentences and beams, with GNMT's length and coverage penalties."""

from __future__ import annotations

import math

import torch

from alignmt.decoding.hypothesis import (
    Hypothesis,
    banned_tokens,
    check_lengths,
    constrain,
    max_output_lengths,
)
from alignmt.models.seq2seq import Seq2Seq, reorder_state
from alignmt.special_tokens import BOS_ID, EOS_ID

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
    it holds, is reordered by index after every step; stopped sentences leave the batch.
    Output lengths: at most `max_length` words when given, else `max_length_ratio * source
    words + max_length_offset`; [EOS] only from `min_length` words on (unless the cap comes
    first). [PAD] and [BOS] are never generated, nor [UNK] with `forbid_unk` (the paper's
    "No UNK" evaluation), which a call can also ask for alone.
    """

    # Forbidding [UNK] can change outputs that hold none (other beams survive).
    unk_free_outputs_are_final = False

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
        (B, S), K, N, device = src.shape, self.beam_size, self.nbest, src.device
        if self.coverage_penalty and not model.has_attention:
            raise ValueError("coverage_penalty needs a model with attention")
        banned = banned_tokens(self.forbid_unk if forbid_unk is None else forbid_unk)
        memory, state = model.start(src, src_lengths)
        rows = torch.arange(B, device=device).repeat_interleave(K)
        memory, state = memory.index_select(rows), reorder_state(state, rows)
        limits = max_output_lengths(
            src_lengths, self.max_length_ratio, self.max_length_offset, self.max_length
        ).to(device)
        src_lengths = src_lengths.to(device)
        longest_lp = self.lp(limits + 1)  # lp of the longest output each sentence allows

        sentences = torch.arange(B, device=device)  # the active sentences
        # Cumulative log P of each live prefix; all beams start equal, so only the first one
        # is live at the first step.
        scores = torch.full((B, K), -math.inf, device=device)
        scores[:, 0] = 0.0
        coverage = torch.zeros(B * K, S, device=device) if model.has_attention else None
        prev = torch.full((B * K,), BOS_ID, dtype=torch.long, device=device)
        # History, written once per step and never copied: every row's attention, and for each
        # row of the next step the word it adds and the row it extends. Hypotheses are read
        # back from it at the end, following those links.
        alphas, words_at, parents_at = [], [], []
        # Each sentence's `nbest` best finished hypotheses: s (best first), and the step and
        # row of the prefix whose [EOS] extension each one is.
        kept = torch.full((B, N), -math.inf, dtype=torch.float64, device=device)
        kept_step = torch.zeros(B, N, dtype=torch.long, device=device)
        kept_row = torch.zeros(B, N, dtype=torch.long, device=device)
        n_finished = torch.zeros(B, dtype=torch.long, device=device)

        for t in range(int(limits.max()) + 1):
            logits, state, alpha = model.step(prev, memory, state)
            caps = limits[sentences].repeat_interleave(K)
            log_probs = torch.log_softmax(logits.float(), dim=-1)
            log_probs = constrain(log_probs, t, caps, self.min_length, banned)
            if coverage is not None:
                alpha = alpha.float()
                alphas.append(alpha)
                coverage = coverage + alpha

            n, V = sentences.numel(), log_probs.size(1)
            extended = scores.view(-1, 1) + log_probs  # [n * K, V]
            ends = extended[:, EOS_ID].clone()  # every live prefix's [EOS] extension
            extended[:, EOS_ID] = -math.inf
            top, top_ids = extended.view(n, K * V).topk(K, dim=1)  # next step's live prefixes
            origins = (torch.arange(n, device=device) * K).unsqueeze(1) + top_ids // V
            words = top_ids % V

            ends = ends.view(n, K)
            admit = ends.isfinite()
            if self.stopping == "early":  # only among the K most probable extensions
                admit &= ends >= torch.cat([top, ends], dim=1).topk(K, dim=1).values[:, -1:]
            n_finished[sentences] += admit.sum(dim=1)
            if bool(admit.any()):
                score = self.ranking_score(
                    ends.view(-1),
                    torch.full_like(caps, t + 1),
                    coverage,
                    src_lengths[sentences].repeat_interleave(K),
                ).view(n, K)
                # Stable, so that on ties the hypothesis kept before stays ahead.
                merged, order = torch.cat(
                    [kept[sentences], score.where(admit, -math.inf)], dim=1
                ).sort(dim=1, descending=True, stable=True)
                order = order[:, :N]
                new, before = order >= N, order.clamp(max=N - 1)  # new: finished at this step
                rows_now = torch.arange(n, device=device).unsqueeze(1) * K + order - N
                kept[sentences] = merged[:, :N]
                kept_step[sentences] = kept_step[sentences].gather(1, before).masked_fill(new, t)
                kept_row[sentences] = kept_row[sentences].gather(1, before).where(~new, rows_now)

            if self.stopping == "exact":  # no live prefix can still beat the worst kept
                running = top[:, 0].double() / longest_lp[sentences] > kept[sentences, -1]
            else:
                running = (n_finished[sentences] < K) & top[:, 0].isfinite()
            if not bool(running.any()):
                break
            # A stopped sentence's prefixes die, so it finishes nothing more; its rows leave
            # the batch once stopped sentences are a quarter of it, since copying the memory
            # costs about as much as a step.
            scores = top.where(running.unsqueeze(1), -math.inf)
            if 4 * int((~running).sum()) >= n:
                keep = running.nonzero().squeeze(1)
                sentences, scores, words, origins = (
                    sentences[keep],
                    scores[keep],
                    words[keep],
                    origins[keep],
                )
                keep_rows = (keep.unsqueeze(1) * K + torch.arange(K, device=device)).view(-1)
                memory = memory.index_select(keep_rows)
            index = origins.view(-1)
            state = reorder_state(state, index)
            prev = words.view(-1)
            words_at.append(prev)
            parents_at.append(index)
            if coverage is not None:
                coverage = coverage[index]
        return self._nbest_lists(
            kept, kept_step, kept_row, alphas, words_at, parents_at, src_lengths
        )

    @staticmethod
    def _nbest_lists(
        kept, kept_step, kept_row, alphas, words_at, parents_at, src_lengths
    ) -> list[list[Hypothesis]]:
        """The kept hypotheses, read back from the history: from the row whose [EOS] extension
        each one is, back one step at a time to the first word."""
        sentence, rank = kept.isfinite().nonzero(as_tuple=True)
        steps, cursor = kept_step[sentence, rank], kept_row[sentence, rank].clone()
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
        lengths, scores = src_lengths.tolist(), kept[sentence, rank].tolist()
        for h, (b, t) in enumerate(zip(sentence.tolist(), steps.tolist(), strict=True)):
            alpha = None if attention is None else attention[h, : t + 1, : lengths[b]]
            out[b].append(Hypothesis(tokens[h, :t].tolist(), scores[h], alpha))
        return out
