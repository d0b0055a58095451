"""Supervised attention (Liu et al. 2016; Mi et al. 2016): attention pulled toward gold
alignments where a corpus has them (`task.alignment_loss_weight`)."""

from __future__ import annotations

import torch

# The smallest weight whose log is taken: a gold link to a position the attention cannot reach
# (outside a local window, not chosen by hard attention) costs -log of it, with no gradient.
WEIGHT_FLOOR = 1e-12


def alignment_loss(
    weights: torch.Tensor | None, gold: torch.Tensor, target_mask: torch.Tensor
) -> torch.Tensor:
    """The cross-entropy -sum_j a_ij log alpha_ij between each target word's gold alignment
    row, normalised to sum to 1 (a_ij = 1 / |links of i| on its links), and its attention
    alpha_i: the cross-entropy distance among the losses of Liu et al. 2016 and Mi et al. 2016.
    Averaged over the target words that have a gold link; here words without one (and [EOS])
    are not supervised.

    weights, gold [B, T, S] (gold: 1 on links), target_mask [B, T]."""
    if weights is None:
        raise ValueError("task.alignment_loss_weight needs a model with attention")
    links = gold.sum(-1)  # [B, T]
    supervised = (links > 0) & target_mask
    if not bool(supervised.any()):
        return weights.sum() * 0.0
    target = gold / links.clamp_min(1).unsqueeze(-1)
    cross_entropy = -(target * weights.float().clamp_min(WEIGHT_FLOOR).log()).sum(-1)
    return cross_entropy.masked_select(supervised).mean()
