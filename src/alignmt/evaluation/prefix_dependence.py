"""Does the decoder's next-token distribution depend on what the prefix says, beyond its length?

Huszár (2015) argues that scheduled sampling's objective is improper: trained on prefixes that
are partly its own, a model may be pushed towards next-token distributions that ignore the
prefix. This probe measures the dependence directly. Each sentence i is paired with another
sentence j of its batch; at every prefix length t (1 <= t < both target lengths) the model's
next-token distribution after i's own prefix, p(. | x_i, y_i[:t]), is compared with

  * the swapped prefix: j's prefix of the same length, p(. | x_i, y_j[:t]) (same source);
  * the perturbed source: i's prefix with j's source, p(. | x_j, y_i[:t]);

by total variation (1/2 sum |p - q|, in [0, 1]) and KL(p || q) in nats. A model that reads
the prefix only through its length shows exactly 0 for the swap; the source perturbation is
the scale to read it against. Positions where the two prefixes (or sources) are equal say
nothing about their content and are left out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from alignmt.data.batching import Batch
from alignmt.special_tokens import PAD_ID

KINDS = ("prefix", "source")


@dataclass
class PrefixDependence:
    """Sums of total variation and KL over the compared positions, per kind of change."""

    positions: dict[str, int]
    total_variation: dict[str, float]
    kl: dict[str, float]

    @classmethod
    def zero(cls) -> PrefixDependence:
        return cls({k: 0 for k in KINDS}, {k: 0.0 for k in KINDS}, {k: 0.0 for k in KINDS})

    def __add__(self, other: PrefixDependence) -> PrefixDependence:
        def add(a: dict, b: dict) -> dict:
            return {k: a[k] + b[k] for k in KINDS}

        return PrefixDependence(
            add(self.positions, other.positions),
            add(self.total_variation, other.total_variation),
            add(self.kl, other.kl),
        )

    def summary(self) -> dict[str, float]:
        """Means per compared position (NaN where nothing was compared), and the counts."""
        out = {}
        for kind in KINDS:
            n = self.positions[kind]
            out[f"{kind}_tv"] = self.total_variation[kind] / n if n else float("nan")
            out[f"{kind}_kl"] = self.kl[kind] / n if n else float("nan")
            out[f"{kind}_positions"] = n
        return out


def distribution_change(
    log_p: torch.Tensor, log_q: torch.Tensor, mask: torch.Tensor
) -> tuple[int, float, float]:
    """(positions, summed total variation, summed KL(p || q)) over the positions `mask` marks;
    log_p, log_q [..., V] are log-distributions."""
    p = log_p.exp()
    tv = 0.5 * (p - log_q.exp()).abs().sum(-1)
    kl = (p * (log_p - log_q)).sum(-1)
    return int(mask.sum()), float(tv[mask].sum()), float(kl[mask].sum())


def _log_distributions(model, src, src_lengths, tgt_in) -> torch.Tensor:
    return torch.log_softmax(model(src, src_lengths, tgt_in).logits.float(), dim=-1)


@torch.no_grad()
def prefix_dependence(model, batch: Batch, partner: torch.Tensor | None = None) -> PrefixDependence:
    """The probe on one batch. `partner[i]` is the sentence i is compared with (by default
    the next one in the batch, the last with the first); a batch of one compares nothing."""
    B = len(batch)
    if B < 2:
        return PrefixDependence.zero()
    device = batch.tgt_in.device
    if partner is None:
        partner = torch.arange(1, B + 1, device=device) % B
    partner = partner.to(device)
    src, lengths, tgt_in = batch.src, batch.src_lengths, batch.tgt_in
    own = _log_distributions(model, src, lengths, tgt_in)
    swapped = _log_distributions(model, src, lengths, tgt_in[partner])
    moved = _log_distributions(model, src[partner], lengths[partner.cpu()], tgt_in)

    n = (tgt_in != PAD_ID).sum(1)  # [BOS] and the words: prefixes of length 0 .. n - 1
    T = tgt_in.size(1)
    t = torch.arange(T, device=device)
    common = (t >= 1) & (t.unsqueeze(0) < torch.minimum(n, n[partner]).unsqueeze(1))  # [B, T]
    # Prefix t is tgt_in[:, 1 : t + 1]: the two differ at t once they have differed anywhere.
    differs = (tgt_in != tgt_in[partner]) & (t >= 1)
    prefix_differs = differs.cumsum(1) > 0
    source_differs = (src != src[partner]).any(1, keepdim=True)
    result = PrefixDependence.zero()
    for kind, other, mask in (
        ("prefix", swapped, common & prefix_differs),
        ("source", moved, common & source_differs),
    ):
        count, tv, kl = distribution_change(own, other, mask)
        result.positions[kind], result.total_variation[kind], result.kl[kind] = count, tv, kl
    return result


def prefix_dependence_over(model, batches: Iterable[Batch]) -> PrefixDependence:
    """The probe summed over batches (e.g. a split's evaluation loader), in eval mode."""
    training = model.training
    model.eval()
    total = PrefixDependence.zero()
    try:
        for batch in batches:
            total = total + prefix_dependence(model, batch)
    finally:
        model.train(training)
    return total
