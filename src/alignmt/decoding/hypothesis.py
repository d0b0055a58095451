"""What every search returns: token ids, a score and the attention behind each output word."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from alignmt.special_tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID


@dataclass
class Hypothesis:
    tokens: list[int]  # output ids, without [EOS]
    score: float  # log-probability (beam search: the ranking score)
    attention: torch.Tensor | None = None  # [len(tokens) + 1, source length with [EOS]]
    # The search would return this same output with [UNK] forbidden (the "No UNK" evaluation
    # need not search again).
    same_without_unk: bool = False

    @classmethod
    def from_batch(
        cls,
        tokens: torch.Tensor,
        scores: torch.Tensor,
        attention: torch.Tensor | None,
        src_lengths: torch.Tensor,
    ) -> list[list[Hypothesis]]:
        """Split [B, T] outputs into one single-best list per sentence (cut after [EOS]), each
        the same without [UNK] if it holds none: the argmax at each step was another word."""
        tokens, scores = tokens.cpu(), scores.cpu().tolist()
        is_eos = tokens == EOS_ID
        has_eos = is_eos.any(dim=1)
        ends = torch.where(has_eos, is_eos.int().argmax(dim=1), tokens.size(1)).tolist()
        attention = attention.cpu() if attention is not None else None
        out = []
        for b, end in enumerate(ends):
            alpha = None
            if attention is not None:
                alpha = attention[b, : end + 1, : int(src_lengths[b])]
            ids = tokens[b, :end].tolist()
            out.append([cls(ids, scores[b], alpha, same_without_unk=UNK_ID not in ids)])
        return out


def max_output_lengths(
    src_lengths: torch.Tensor, ratio: float, offset: int, max_length: int | None = None
) -> torch.Tensor:
    """Per-sentence cap on output words: `max_length` for every sentence when given (a length
    fixed in advance, whatever the source), else ratio * source words + offset (at least 1)."""
    if max_length is not None:
        return torch.full(src_lengths.shape, max_length, dtype=torch.long)
    words = src_lengths.cpu().double() - 1  # source lengths count the final [EOS]
    return (words * ratio + offset).ceil().clamp(min=1).long()


def check_lengths(min_length: int, max_length: int | None) -> None:
    """Refuses length options no output could meet (a cap of 0 words leaves only [EOS])."""
    if min_length < 0:
        raise ValueError(f"min_length must be at least 0, got {min_length}")
    if max_length is not None and max_length < 1:
        raise ValueError(f"max_length must be at least 1 or None, got {max_length}")


def banned_tokens(forbid_unk: bool) -> list[int]:
    """Ids a search never outputs: [PAD] and [BOS], which are not words, and [UNK] if asked."""
    return [PAD_ID, BOS_ID, UNK_ID] if forbid_unk else [PAD_ID, BOS_ID]


class OutputRules:
    """What each output position may hold, for one search over sentences with output caps
    `limits` [B]: never the `banned` ids; [EOS] not before `min_length` words; only [EOS] once a
    row reaches its cap, where [EOS] is allowed even before `min_length`, so the cap always
    wins. Made once per search, so that a step before any cap costs one masking pass."""

    def __init__(self, limits: torch.Tensor, min_length: int, banned: list[int]):
        self.min_length = min_length
        self.banned = torch.tensor(banned, device=limits.device)
        self.banned_and_eos = torch.tensor([*banned, EOS_ID], device=limits.device)
        self.first_cap = int(limits.min()) if limits.numel() else 0

    def some_at_cap(self, step: int) -> bool:
        """Whether some row may have reached its cap at output position `step` (0-based);
        only then does `constrain_` need the rows' caps."""
        return step >= self.first_cap

    def may_end(self, step: int, caps: torch.Tensor | None) -> bool:
        """Whether some row may choose [EOS] at `step` after `constrain_(..., step, caps)`: not
        before `min_length` while no row is at its cap."""
        return caps is not None or step >= self.min_length

    def ruled_out(self, step: int) -> torch.Tensor:
        """The ids output position `step` may not hold in rows not at their caps."""
        return self.banned_and_eos if step < self.min_length else self.banned

    def constrain_(
        self, log_probs: torch.Tensor, step: int, caps: torch.Tensor | None
    ) -> torch.Tensor:
        """Rules out, in place, what output position `step` may not hold in rows whose caps are
        `caps` [rows] (None where `some_at_cap(step)` is false)."""
        early = step < self.min_length
        if caps is None:
            return log_probs.index_fill_(1, self.ruled_out(step), -math.inf)
        log_probs.index_fill_(1, self.banned, -math.inf)
        at_cap = caps <= step
        if early:
            log_probs[:, EOS_ID].masked_fill_(~at_cap, -math.inf)
        if bool(at_cap.any()):
            words = torch.ones(log_probs.size(1), dtype=torch.bool, device=log_probs.device)
            words[EOS_ID] = False
            log_probs.masked_fill_(at_cap.unsqueeze(1) & words, -math.inf)
        return log_probs
