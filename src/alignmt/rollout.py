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
from alignmt.models.seq2seq import Seq2Seq, reorder_state
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


def draw(scores: torch.Tensor, at_cap: torch.Tensor) -> torch.Tensor:
    """One token per row from log-probabilities `scores` [N, V]: never [PAD] or [BOS], only
    [EOS] where `at_cap`."""
    allowed = scores.detach().clone()
    allowed[:, banned_tokens(forbid_unk=False)] = -math.inf
    only_eos = torch.full_like(allowed[0], -math.inf)
    only_eos[EOS_ID] = 0.0
    allowed[at_cap] = only_eos
    return torch.multinomial(allowed.exp(), 1).squeeze(1)


def rollout(
    model: Seq2Seq,
    src: torch.Tensor,
    src_lengths: torch.Tensor,
    reference: torch.Tensor,
    keep: torch.Tensor,
    caps: torch.Tensor,
    sources: torch.Tensor | None = None,
) -> Rollout:
    """`reference` [B, T_ref] (y_1 .. y_n [EOS], padded); `keep` [B]: reference tokens fed
    before sampling starts (at most the reference's length); `caps` [B]: words allowed before
    [EOS] is forced on sampled steps (`decoding.hypothesis.max_output_lengths`, the searches'
    rule). Never draws [PAD] or [BOS]. Finished sentences leave the batch, as in greedy search.
    `sources` [B]: the row of `src` each output reads (several draws of one sentence encode it
    once); default: row b for output b."""
    memory, state = model.start(src, src_lengths)
    if sources is not None:
        sources = sources.to(src.device)
        memory, state = memory.index_select(sources), reorder_state(state, sources)
    B, device = reference.size(0), src.device
    keep, caps = keep.to(device), caps.to(device)
    active = torch.arange(B, device=device)  # the rows still writing
    prev = torch.full((B,), BOS_ID, dtype=torch.long, device=device)
    columns: list[tuple] = []  # per step: rows, tokens, log-probs, features, forced
    for t in range(int(torch.maximum(keep, caps).max()) + 1):
        feature, state, _ = model.decoder.step(prev, memory, state)
        scores = torch.log_softmax(model.decoder.readout(feature).float(), dim=-1)
        drawn = draw(scores, t >= caps[active])
        forced = t < keep[active]
        fed = reference[active, t] if t < reference.size(1) else drawn  # keep <= its length
        token = torch.where(forced, fed, drawn)
        columns.append((active, token, scores.gather(1, token.unsqueeze(1)).squeeze(1)))
        columns[-1] += (feature, forced)
        running = token != EOS_ID
        if not bool(running.all()):
            if not bool(running.any()):
                break
            rows = running.nonzero().squeeze(1)
            active, token = active[rows], token[rows]
            memory, state = memory.index_select(rows), reorder_state(state, rows)
        prev = token
    return assemble(columns, B)


def assemble(columns: list[tuple], B: int) -> Rollout:
    """The per-step values of the rows still writing, as [B, T] tensors ([PAD] after [EOS])."""
    tokens, log_probs, features, forced, mask = [], [], [], [], []
    for rows, token, log_p, feature, is_forced in columns:
        index = (rows,)
        tokens.append(token.new_full((B,), PAD_ID).index_put(index, token))
        log_probs.append(log_p.new_zeros(B).index_put(index, log_p))
        features.append(feature.new_zeros(B, feature.size(1)).index_put(index, feature))
        forced.append(is_forced.new_zeros(B).index_put(index, is_forced))
        mask.append(torch.zeros(B, dtype=torch.bool, device=rows.device).index_fill(0, rows, True))
    return Rollout(*(torch.stack(x, 1) for x in (tokens, log_probs, features, forced, mask)))
