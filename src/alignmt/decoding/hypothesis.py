"""What every search returns: token ids, a score and the attention behind each output word."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from alignmt.special_tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID


@dataclass
class Hypothesis:
    tokens: list[int]  # output ids, without [EOS]
    score: float  # log-probability (beam search: the ranking score)
    attention: torch.Tensor | None = None  # [len(tokens) + 1, source length with [EOS]]

    @classmethod
    def from_batch(
        cls,
        tokens: torch.Tensor,
        scores: torch.Tensor,
        attention: torch.Tensor | None,
        src_lengths: torch.Tensor,
    ) -> list[list[Hypothesis]]:
        """Split [B, T] outputs into one single-best list per sentence (cut after [EOS])."""
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
            out.append([cls(tokens[b, :end].tolist(), scores[b], alpha)])
        return out


def max_output_lengths(src_lengths: torch.Tensor, ratio: float, offset: int) -> torch.Tensor:
    """Per-sentence cap on output words: ratio * source words + offset (at least 1)."""
    words = src_lengths.cpu().double() - 1  # source lengths count the final [EOS]
    return (words * ratio + offset).ceil().clamp(min=1).long()


def banned_tokens(forbid_unk: bool) -> list[int]:
    """Ids a search never outputs: [PAD] and [BOS], which are not words, and [UNK] if asked."""
    return [PAD_ID, BOS_ID, UNK_ID] if forbid_unk else [PAD_ID, BOS_ID]
