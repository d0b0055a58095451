"""Beam search, batched over sentences and beams, with GNMT's length and coverage penalties."""

from __future__ import annotations

import math

import torch

from alignmt.decoding.hypothesis import Hypothesis, banned_tokens, max_output_lengths
from alignmt.models.seq2seq import Seq2Seq, reorder_state
from alignmt.special_tokens import BOS_ID, EOS_ID


class BeamSearch:
    """Keeps the `beam_size` most probable prefixes of every sentence.

    The beams of all sentences share one batch dimension (sentence-major, `beam_size` rows
    each): the encoder runs once, its memory is expanded once, and the decoder state, whatever
    it holds, is reordered by index after every step. A sentence leaves the active batch once
    it has `beam_size` finished hypotheses or reaches its length limit
    (`max_length_ratio * source words + max_length_offset`, where only [EOS] is allowed).

    Each step ranks the `2 * beam_size` best extensions by log-probability: an [EOS] among the
    first `beam_size` finishes a hypothesis, and the first `beam_size` others continue.
    Finished hypotheses are ranked by Wu et al. (2016)'s

        s(Y, X) = log P(Y|X) / lp(Y) + cp(X; Y)
        lp(Y)   = ((5 + |Y|) / 6) ** length_penalty          |Y| counts the final [EOS]
        cp(X;Y) = coverage_penalty * sum_j log(min(sum_i alpha_ij, 1))

    over the source positions j (its [EOS] included) and output positions i. Both penalties at
    0 give plain beam search, and `beam_size=1` gives exactly greedy search. The `nbest` best
    finished hypotheses of each sentence are returned, best first. [PAD] and [BOS] are never
    generated, nor [UNK] with `forbid_unk` (the paper's "No UNK" evaluation).
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
        forbid_unk: bool = False,
    ):
        if beam_size < 1:
            raise ValueError(f"beam_size must be at least 1, got {beam_size}")
        if not 1 <= nbest <= beam_size:
            raise ValueError(f"nbest must be between 1 and beam_size={beam_size}, got {nbest}")
        self.beam_size = beam_size
        self.nbest = nbest
        self.length_penalty = length_penalty
        self.coverage_penalty = coverage_penalty
        self.max_length_ratio = max_length_ratio
        self.max_length_offset = max_length_offset
        self.forbid_unk = forbid_unk

    def ranking_score(
        self,
        log_prob: torch.Tensor,
        length: int,
        attention: torch.Tensor | None,
        src_lengths: torch.Tensor,
    ) -> torch.Tensor:
        """s(Y, X) of finished hypotheses of `length` tokens; attention [N, length, S]."""
        score = log_prob / ((5 + length) / 6) ** self.length_penalty
        if self.coverage_penalty == 0:
            return score
        coverage = attention.sum(dim=1).clamp(max=1.0).log()  # [N, S]
        real = torch.arange(coverage.size(1), device=coverage.device) < src_lengths.unsqueeze(1)
        return score + self.coverage_penalty * coverage.where(real, 0.0).sum(dim=1)

    @torch.inference_mode()
    def __call__(
        self,
        model: Seq2Seq,
        src: torch.Tensor,
        src_lengths: torch.Tensor,
        *,
        forbid_unk: bool | None = None,
    ) -> list[list[Hypothesis]]:
        (B, S), K, device = src.shape, self.beam_size, src.device
        if self.coverage_penalty and not model.has_attention:
            raise ValueError("coverage_penalty needs a model with attention")
        banned = banned_tokens(self.forbid_unk if forbid_unk is None else forbid_unk)
        memory, state = model.start(src, src_lengths)
        rows = torch.arange(B, device=device).repeat_interleave(K)
        memory, state = memory.index_select(rows), reorder_state(state, rows)
        limits = max_output_lengths(src_lengths, self.max_length_ratio, self.max_length_offset)
        limits, src_lengths = limits.to(device), src_lengths.to(device)

        sentences = torch.arange(B, device=device)  # the active sentences
        # Cumulative log P of each live hypothesis; all beams start equal, so only the first
        # one is live at the first step.
        scores = torch.full((B, K), -math.inf, device=device)
        scores[:, 0] = 0.0
        tokens = torch.empty(B * K, 0, dtype=torch.long, device=device)
        attention = torch.empty(B * K, 0, S, device=device) if model.has_attention else None
        prev = torch.full((B * K,), BOS_ID, dtype=torch.long, device=device)
        n_finished = torch.zeros(B, dtype=torch.long, device=device)
        finished = []  # per step: sentence ids, tokens, scores, attention
        rank = torch.arange(2 * K, device=device)

        for t in range(int(limits.max()) + 1):
            logits, state, alpha = model.step(prev, memory, state)
            log_probs = torch.log_softmax(logits.float(), dim=-1)
            log_probs[:, banned] = -math.inf
            at_limit = (limits[sentences] <= t).repeat_interleave(K)
            if bool(at_limit.any()):
                only_eos = torch.ones_like(log_probs, dtype=torch.bool)
                only_eos[:, EOS_ID] = False
                log_probs = log_probs.masked_fill(only_eos & at_limit.unsqueeze(1), -math.inf)
            if attention is not None:  # [rows, steps so far, S]
                attention = torch.cat([attention, alpha.float().unsqueeze(1)], dim=1)

            n, V = sentences.numel(), log_probs.size(1)
            candidates = (scores.view(-1, 1) + log_probs).view(n, K * V)
            top_scores, top_ids = candidates.topk(2 * K, dim=1)  # [n, 2K], best first
            origins = (torch.arange(n, device=device) * K).unsqueeze(1) + top_ids // V
            words = top_ids % V
            is_eos = words == EOS_ID

            finish = is_eos & (rank < K) & top_scores.isfinite()
            if bool(finish.any()):
                local, column = finish.nonzero(as_tuple=True)
                ids, ended = sentences[local], origins[local, column]
                ended_attention = None if attention is None else attention[ended]
                score = self.ranking_score(
                    top_scores[local, column], t + 1, ended_attention, src_lengths[ids]
                )
                finished.append((ids, tokens[ended], score, ended_attention))
                n_finished.index_add_(0, ids, torch.ones_like(ids))

            # The first K extensions that are not [EOS] continue (a stable sort keeps order).
            live = torch.sort(is_eos.to(torch.uint8), dim=1, stable=True).indices[:, :K]
            scores, words = top_scores.gather(1, live), words.gather(1, live)
            origins = origins.gather(1, live)
            running = (n_finished[sentences] < K) & (limits[sentences] > t)
            if not bool(running.all()):
                if not bool(running.any()):
                    break
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
            tokens = torch.cat([tokens[index], prev.unsqueeze(1)], dim=1)
            if attention is not None:
                attention = attention[index]
        return self._nbest_lists(finished, B, src_lengths)

    def _nbest_lists(self, finished, batch_size: int, src_lengths) -> list[list[Hypothesis]]:
        """Every sentence's finished hypotheses, best first, cut to `nbest`."""
        lengths = src_lengths.tolist()
        out: list[list[Hypothesis]] = [[] for _ in range(batch_size)]
        for ids, tokens, scores, attention in finished:
            ids, tokens, scores = ids.tolist(), tokens.tolist(), scores.tolist()
            attention = None if attention is None else attention.cpu()
            for k, b in enumerate(ids):
                alpha = None if attention is None else attention[k, :, : lengths[b]]
                out[b].append(Hypothesis(tokens[k], scores[k], alpha))
        for hypotheses in out:
            hypotheses.sort(key=lambda h: -h.score)  # stable: earlier finished first on ties
            del hypotheses[self.nbest :]
        return out
