"""The paper's "No UNK" test subset: sentences with no unknown word on either side."""

from __future__ import annotations

import torch

from alignmt.special_tokens import UNK_ID


def no_unk_mask(src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """[B] True where neither the source ids [B, S] nor the reference ids [B, T] hold [UNK]
    (unknown = outside the model's vocabularies; padding is not [UNK])."""
    return ~((src == UNK_ID).any(dim=1) | (tgt == UNK_ID).any(dim=1))
