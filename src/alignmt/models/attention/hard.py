"""Hard attention (Xu et al. 2015): one source position per step instead of a weighted average.

Training samples the position from the attention distribution of any score. Two estimators
train the choice: REINFORCE (Xu et al.'s stochastic hard attention: the log-likelihood of the
target sentence rewards the positions sampled, against a moving-average baseline, with an
entropy bonus) and the straight-through Gumbel-softmax (Jang et al. 2017; Maddison et al. 2017).
Evaluation and search attend to the most probable position.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import nn

from alignmt.models.attention.additive import AdditiveAttention
from alignmt.models.attention.base import Attention, AttentionState
from alignmt.special_tokens import PAD_ID

ESTIMATORS = ("reinforce", "gumbel")
REWARDS = ("sentence", "per_token")
_TINY = 1e-30


def masked_log(probs: torch.Tensor) -> torch.Tensor:
    """log p with -inf where p = 0, and gradients that stay finite (0) there."""
    return torch.where(probs > 0, probs.clamp_min(_TINY).log(), -math.inf)


def entropy(probs: torch.Tensor) -> torch.Tensor:
    """-sum p log p over the last dim, 0 log 0 = 0 (with a finite gradient)."""
    return -(probs * torch.where(probs > 0, probs.clamp_min(_TINY).log(), 0.0)).sum(-1)


def one_hot_like(choice: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return F.one_hot(choice, like.size(-1)).to(like.dtype)


def gumbel_straight_through(
    probs: torch.Tensor, temperature: float, noise: torch.Tensor
) -> torch.Tensor:
    """The one-hot of argmax(log p + g) in the forward pass; in the backward pass, the gradient
    of the relaxed sample softmax((log p + g) / temperature). `noise` g: Gumbel(0, 1) draws."""
    relaxed = torch.softmax((masked_log(probs) + noise) / temperature, dim=-1)
    hard = one_hot_like(relaxed.argmax(-1), relaxed)
    return hard + (relaxed - relaxed.detach())  # exactly the one-hot: x - x = 0


class Reinforce(nn.Module):
    """The score-function estimator of a module's discrete choices.

    The module `record`s the log-probability and the entropy of the distribution of every
    choice it samples in a forward pass; the training task then adds `loss(reward, mask)`:

        -sum_{b,t} (R_b - baseline) log pi(a_bt) / N  -  entropy_weight sum_{b,t} H_bt / N

    over the N real target positions, R_b the log-likelihood of sentence b (no gradient), so
    that its gradient is Xu et al.'s (eq. 12) for a loss that is the mean per-token NLL. The
    baseline is a moving average of the batches' mean reward (decay `baseline_decay`, started
    at the first batch's), kept as a buffer so that a resumed run continues it.
    `reward="per_token"` divides R_b by the sentence's length: where lengths vary, the
    sentence log-likelihood mostly measures the length, not the choices, and its advantages
    are tens of nats where the NLL's gradient is one token's.
    """

    def __init__(
        self, entropy_weight: float = 0.0, baseline_decay: float = 0.9, reward: str = "sentence"
    ):
        super().__init__()
        if reward not in REWARDS:
            raise ValueError(f"model.attention.reward must be one of {REWARDS}, got {reward!r}")
        self.entropy_weight = entropy_weight
        self.baseline_decay = baseline_decay
        self.reward = reward
        self.register_buffer("baseline", torch.zeros(()))
        self.register_buffer("baseline_started", torch.zeros((), dtype=torch.bool))
        self._log_probs: list[torch.Tensor] = []
        self._entropies: list[torch.Tensor] = []

    def reset(self) -> None:
        self._log_probs, self._entropies = [], []

    def record(self, log_probs: torch.Tensor, entropies: torch.Tensor) -> None:
        """This step's (or these steps') choices: [B, T] each."""
        self._log_probs.append(log_probs)
        self._entropies.append(entropies)

    def loss(self, reward: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """The surrogate loss for rewards [B] and real target positions mask [B, T]; the
        recorded choices are used once and forgotten."""
        if not self._log_probs:
            raise RuntimeError("no sampled choices recorded: was the forward pass in training?")
        log_probs, entropies = torch.cat(self._log_probs, 1), torch.cat(self._entropies, 1)
        self.reset()
        if log_probs.shape != mask.shape:
            raise RuntimeError(f"{log_probs.shape} choices recorded for targets {mask.shape}")
        reward = reward.detach().float()
        if self.reward == "per_token":
            reward = reward / mask.sum(1).clamp_min(1)
        if not self.baseline_started:
            self.baseline.fill_(reward.mean())
            self.baseline_started.fill_(True)
        advantage = reward - self.baseline
        weights = mask.to(log_probs.dtype)
        count = weights.sum().clamp_min(1)
        score = (advantage.unsqueeze(1) * log_probs * weights).sum() / count
        mean_entropy = (entropies * weights).sum() / count
        with torch.no_grad():
            decay = self.baseline_decay
            self.baseline.mul_(decay).add_((1 - decay) * reward.mean())
        logs = {
            "reinforce/baseline": float(self.baseline),
            "attention_entropy": mean_entropy.detach(),
        }
        return -score - self.entropy_weight * mean_entropy, logs


class HardAttention(Attention):
    """Attends to one source position: training samples it from the distribution of `score`
    (any attention variant; Bahdanau's additive one by default), evaluation takes the most
    probable one. The weights are the one-hot of that position (their gradient, for
    `estimator="gumbel"`, that of the relaxed sample), so context, coverage and searches work
    as for soft attention.

    `estimator="reinforce"`: each sample's log-probability goes to `self.choices` (a
    `Reinforce`), whose loss the training task adds. `estimator="gumbel"`: straight-through
    Gumbel-softmax at temperature max(min_temperature, temperature exp(-anneal_rate k)) after
    k training batches (counted in a buffer, so a resumed run continues the schedule).
    `soft_probability`: in training, each sentence attends softly (to the expected position,
    the distribution itself) with this probability, and samples otherwise: Xu et al.'s
    variance reduction (0.5 in their paper); its soft sentences add no REINFORCE term.
    `reward`: REINFORCE's reward, the sentence's log-likelihood or that per token (`Reinforce`).
    """

    def __init__(
        self,
        query_size: int,
        key_size: int,
        score: Callable[..., Attention] | None = None,
        estimator: str = "reinforce",
        entropy_weight: float = 0.0,
        baseline_decay: float = 0.9,
        temperature: float = 1.0,
        min_temperature: float = 0.5,
        anneal_rate: float = 0.0,
        soft_probability: float = 0.0,
        reward: str = "sentence",
    ):
        super().__init__(query_size, key_size)
        if not 0 <= soft_probability <= 1:
            raise ValueError(
                f"model.attention.soft_probability must be in [0, 1], got {soft_probability}"
            )
        if estimator not in ESTIMATORS:
            raise ValueError(
                f"model.attention.estimator must be one of {ESTIMATORS}, got {estimator!r}"
            )
        if not 0 < min_temperature <= temperature:
            raise ValueError(
                "model.attention needs 0 < min_temperature <= temperature, got "
                f"{min_temperature} and {temperature}"
            )
        self.scorer = (score or AdditiveAttention)(query_size=query_size, key_size=key_size)
        self.estimator = estimator
        reinforce = estimator == "reinforce"
        self.choices = Reinforce(entropy_weight, baseline_decay, reward) if reinforce else None
        self.initial_temperature = temperature
        self.min_temperature = min_temperature
        self.anneal_rate = anneal_rate
        self.soft_probability = soft_probability
        self._soft_rows: torch.Tensor | None = None  # [B]: this batch's softly attending rows
        self.register_buffer("batches", torch.zeros((), dtype=torch.long))

    # The score and its hooks are the wrapped variant's.
    def precompute(self, values):
        return self.scorer.precompute(values)

    def score(self, query, keys, state):
        return self.scorer.score(query, keys, state)

    def window(self, query, mask, state):
        return self.scorer.window(query, mask, state)

    def next_state(self, state, steps: int):
        return self.scorer.next_state(state, steps)

    def key_term_size(self):
        return self.scorer.key_term_size()

    def paper_init_(self) -> None:
        self.scorer.paper_init_()

    def start_state(self, values, mask) -> AttentionState:
        """A new batch: in training, forget unused samples and count it for the schedule."""
        if self.training:
            self.batches += 1
            if self.choices is not None:
                self.choices.reset()
            self._soft_rows = None
            if self.soft_probability:
                rows = torch.rand(values.size(0), device=values.device)
                self._soft_rows = rows < self.soft_probability
        return self.scorer.start_state(values, mask)

    @property
    def temperature(self) -> float:
        decayed = self.initial_temperature * math.exp(-self.anneal_rate * int(self.batches))
        return max(self.min_temperature, decayed)

    def weights(self, query, keys, mask, state) -> torch.Tensor:
        probs = super().weights(query, keys, mask, state)  # [B, T, S]
        probs = probs / probs.sum(-1, keepdim=True).clamp_min(_TINY)  # local-p's do not sum to 1
        if not self.training:
            return one_hot_like(probs.argmax(-1), probs)
        if self.choices is None:
            noise = -torch.empty_like(probs).exponential_().log()
            return self._soft_where(probs, gumbel_straight_through(probs, self.temperature, noise))
        with torch.no_grad():
            choice = torch.multinomial(probs.flatten(0, 1).float(), 1).view(probs.shape[:2])
        log_chosen = probs.gather(-1, choice.unsqueeze(-1)).squeeze(-1).log()
        if self._soft_rows is not None:  # a soft sentence samples nothing to reward
            log_chosen = torch.where(self._soft_rows[:, None], 0.0, log_chosen)
        self.choices.record(log_chosen, entropy(probs))
        return self._soft_where(probs, one_hot_like(choice, probs))

    def _soft_where(self, probs: torch.Tensor, sampled: torch.Tensor) -> torch.Tensor:
        """The distribution itself for this batch's softly attending sentences."""
        if self._soft_rows is None:
            return sampled
        if len(self._soft_rows) != len(probs):
            raise RuntimeError(
                f"hard attention drew soft rows for {len(self._soft_rows)} sentences at the "
                f"start of the batch, and attends for {len(probs)}"
            )
        return torch.where(self._soft_rows[:, None, None], probs, sampled)


def reinforce_estimators(model: nn.Module) -> list[Reinforce]:
    """The model's modules that sample discrete choices trained by REINFORCE."""
    return [module for module in model.modules() if isinstance(module, Reinforce)]


@torch.no_grad()
def sentence_log_likelihood(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(y | x) of every sentence [B] from logits [B, T, V] and targets [B, T]."""
    per_token = F.cross_entropy(
        logits.flatten(0, 1).float(), targets.flatten(), ignore_index=PAD_ID, reduction="none"
    )
    return -per_token.view(targets.shape).sum(1)


def reinforce_loss(
    estimators: Iterable[Reinforce], reward: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, dict]:
    """The sum of every estimator's surrogate loss, and their logs."""
    total, logs = reward.new_zeros(()), {}
    for estimator in estimators:
        loss, values = estimator.loss(reward, mask)
        total = total + loss
        logs.update(values)
    return total, logs
