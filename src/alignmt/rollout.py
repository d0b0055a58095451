"""Sampling outputs from the model for sequence-level training (MIXER, minimum risk training).

A rollout feeds each sentence the first `keep` tokens of its reference (teacher forcing), then
draws every next token from the model's distribution until [EOS] or the sentence's length cap,
where [EOS] is forced, as the searches do. It runs the decoder's `step`, so it works for every
architecture, and keeps the autograd graph of the log-probabilities it draws (REINFORCE needs
it; run it under `torch.no_grad()` to only draw candidates).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from alignmt.decoding.hypothesis import banned_tokens
from alignmt.models.seq2seq import Seq2Seq
from alignmt.special_tokens import BOS_ID, EOS_ID, PAD_ID


@dataclass
class Rollout:
    """Step t of sentence b holds the token written at t (the reference's, or drawn)."""

    tokens: torch.Tensor  # [B, T] ending in [EOS], [PAD] after it
    log_probs: torch.Tensor  # [B, T] log p of each token given what came before
    features: torch.Tensor  # [B, T, F] the decoder's readout features at each step
    forced: torch.Tensor  # [B, T] True where the token is the reference's
    mask: torch.Tensor  # [B, T] True up to and including [EOS]

    @property
    def sampled(self) -> torch.Tensor:
        """[B, T] True where the token was drawn from the model."""
        return self.mask & ~self.forced


def rollout(
    model: Seq2Seq,
    src: torch.Tensor,
    src_lengths: torch.Tensor,
    reference: torch.Tensor,
    keep: torch.Tensor,
    caps: torch.Tensor,
) -> Rollout:
    """`reference` [B, T_ref] (y_1 .. y_n [EOS], padded); `keep` [B]: reference tokens fed
    before sampling starts (at most the reference's length); `caps` [B]: words allowed before
    [EOS] is forced on sampled steps (`decoding.hypothesis.max_output_lengths`, the searches'
    rule). Never draws [PAD] or [BOS]."""
    device = src.device
    memory, state = model.start(src, src_lengths)
    keep, caps = keep.to(device), caps.to(device)
    steps = int(torch.maximum(keep, caps).max()) + 1
    prev = torch.full((src.size(0),), BOS_ID, dtype=torch.long, device=device)
    alive = torch.ones(src.size(0), dtype=torch.bool, device=device)
    banned = banned_tokens(forbid_unk=False)
    tokens, log_probs, features, forced, mask = [], [], [], [], []
    for t in range(steps):
        feature, state, _ = model.decoder.step(prev, memory, state)
        scores = torch.log_softmax(model.decoder.readout(feature).float(), dim=-1)
        allowed = scores.detach().clone()
        allowed[:, banned] = -math.inf
        at_cap = t >= caps
        allowed[at_cap] = torch.where(
            torch.arange(allowed.size(1), device=device) == EOS_ID, 0.0, -math.inf
        )
        drawn = torch.multinomial(allowed.exp(), 1).squeeze(1)
        is_forced = t < keep
        fed = reference[:, t] if t < reference.size(1) else drawn  # keep <= reference length
        token = torch.where(is_forced, fed, drawn)
        token = token.masked_fill(~alive, PAD_ID)
        tokens.append(token)
        log_probs.append(scores.gather(1, token.unsqueeze(1)).squeeze(1))
        features.append(feature)
        forced.append(is_forced & alive)
        mask.append(alive)
        alive = alive & (token != EOS_ID)
        if not bool(alive.any()):
            break
        prev = token.masked_fill(~alive, EOS_ID)  # finished rows run on, unread
    return Rollout(
        torch.stack(tokens, 1),
        torch.stack(log_probs, 1),
        torch.stack(features, 1),
        torch.stack(forced, 1),
        torch.stack(mask, 1),
    )
