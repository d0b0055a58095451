"""Greedy search, batched: one decoder step per output position for the whole batch."""

from __future__ import annotations

import torch

from alignmt.decoding.hypothesis import (
    Hypothesis,
    OutputRules,
    banned_tokens,
    check_lengths,
    max_output_lengths,
)
from alignmt.decoding.precision import check_precision, model_at
from alignmt.decoding.top_words import step_words
from alignmt.models.seq2seq import Seq2Seq, reorder_state
from alignmt.models.step_linear import packed_weights
from alignmt.special_tokens import BOS_ID, EOS_ID, PAD_ID


class GreedySearch:
    """Picks the most probable word at every step. A sentence stops at [EOS] or at its cap:
    `max_length` words when given, else `max_length_ratio * source words + max_length_offset`.
    [EOS] is not chosen before `min_length` words (unless the cap comes first); min_length =
    max_length fixes every output's length. Finished sentences leave the active batch so the
    remaining steps run on fewer rows. [PAD] and [BOS] are never generated, nor [UNK] with
    `forbid_unk` (the paper's "No UNK" evaluation), which a call can also ask for alone.
    `precision="bfloat16"` runs a bfloat16 copy of the model (decoding/precision.py)."""

    def __init__(
        self,
        max_length_ratio: float = 2.0,
        max_length_offset: int = 10,
        max_length: int | None = None,
        min_length: int = 0,
        forbid_unk: bool = False,
        precision: str = "float32",
    ):
        check_lengths(min_length, max_length)
        check_precision(precision)
        self.precision = precision
        self.max_length_ratio = max_length_ratio
        self.max_length_offset = max_length_offset
        self.max_length = max_length
        self.min_length = min_length
        self.forbid_unk = forbid_unk

    @torch.inference_mode()
    def __call__(
        self,
        model: Seq2Seq,
        src: torch.Tensor,
        src_lengths: torch.Tensor,
        *,
        forbid_unk: bool | None = None,
    ) -> list[list[Hypothesis]]:
        banned = banned_tokens(self.forbid_unk if forbid_unk is None else forbid_unk)
        with packed_weights():  # the weights are fixed for the search: packed once
            return self._search(model_at(self.precision, model), src, src_lengths, banned)

    def _search(self, model, src, src_lengths, banned) -> list[list[Hypothesis]]:
        B, S = src.shape
        device = src.device
        memory, state = model.start(src, src_lengths)
        limits = max_output_lengths(
            src_lengths, self.max_length_ratio, self.max_length_offset, self.max_length
        ).to(device)
        T = int(limits.max()) + 1  # + [EOS]
        rules = OutputRules(limits, self.min_length, banned)
        tokens = torch.full((B, T), PAD_ID, dtype=torch.long, device=device)
        attention = torch.zeros(B, T, S, device=device) if model.has_attention else None
        scores = torch.zeros(B, device=device)
        active = None  # the rows still running; None: every row (no indexing)
        every_row = []  # each step's words and attention while every row runs, written at the end
        prev = torch.full((B,), BOS_ID, dtype=torch.long, device=device)
        for t in range(T):
            logits, state, alpha = model.step(prev, memory, state)
            caps = None
            if rules.some_at_cap(t):
                caps = limits if active is None else limits[active]
            top = step_words(logits.float(), 1, rules, t, caps, eos_apart=False)
            chosen, best = top.log_probs[:, 0], top.words[:, 0]
            if active is None:
                scores += chosen
                every_row.append((best, alpha))
            else:
                tokens[active, t] = best
                scores[active] += chosen
                if attention is not None:
                    attention[active, t, : alpha.size(1)] = alpha.float()
            if rules.may_end(t, caps):
                running = best != EOS_ID
                if not bool(running.all()):
                    if not bool(running.any()):
                        break
                    keep = running.nonzero().squeeze(1)
                    active = keep if active is None else active[keep]
                    best = best[keep]
                    memory, state = memory.index_select(keep), reorder_state(state, keep)
            prev = best
        if every_row:
            words, alphas = zip(*every_row, strict=True)
            tokens[:, : len(words)] = torch.stack(words, dim=1)
            if attention is not None:
                alphas = torch.stack(alphas, dim=1)
                attention[:, : len(words), : alphas.size(2)] = alphas
        return Hypothesis.from_batch(tokens, scores, attention, src_lengths)
