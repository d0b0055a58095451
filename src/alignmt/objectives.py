"""Training objectives: what the task minimises on a batch (`objective` config group).

An objective returns the loss, the decoder output it computed it from (the task adds its
attention terms: coverage loss, supervised attention) and values to log. It is a module of
the task, so parameters it owns (a learned baseline) are trained with the model's.

Sequence-level objectives score whole outputs by a sentence-level reward of their text
(`alignmt.evaluation.rewards`): MIXER (Ranzato et al. 2016) and minimum risk training (Shen
et al. 2016). Both are meant to fine-tune a model trained by maximum likelihood
(`init_from=PATH`); neither scores the reference alone, so they return no decoder output.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from alignmt.data.batching import Batch
from alignmt.decoding import BeamSearch
from alignmt.decoding.hypothesis import max_output_lengths
from alignmt.evaluation.rewards import sequence_rewards
from alignmt.loss import Workspace, linear_cross_entropy, token_cross_entropy
from alignmt.models.attention.hard import reinforce_estimators
from alignmt.models.fused_recurrence import runs_fused
from alignmt.models.seq2seq import DecoderOutput, ReadoutInputs, Seq2Seq
from alignmt.rollout import Rollout, rollout
from alignmt.special_tokens import BOS_ID, EOS_ID, PAD_ID


class Objective(nn.Module):
    # Whether the decoder output returned is the teacher-forced pass over the reference, which
    # the task's attention terms (coverage loss) read.
    scores_reference = True

    def attach(self, model: Seq2Seq) -> None:
        """Called once with the model before training: an objective sizes its own parameters
        (a baseline on the decoder's features) here."""

    def forward(self, task, batch: Batch) -> tuple[torch.Tensor, DecoderOutput, dict[str, float]]:
        """(loss, the decoder output behind it, values to log as train/<name>)."""
        raise NotImplementedError


class MaximumLikelihood(Objective):
    """Token-level cross-entropy of the reference, with optional label smoothing, under
    teacher forcing or the task's scheduled-sampling schedule.

    On CPU the output layer runs inside the loss where the readout ends in a linear layer
    (`alignmt.loss.linear_cross_entropy`, with a buffer reused from step to step); the decoder
    output returned then has no logits. Where the task reads them (the REINFORCE reward of a
    sampled attention), the logits are computed as usual."""

    def __init__(self, label_smoothing: float = 0.0):
        super().__init__()
        self.label_smoothing = label_smoothing
        self.workspace = Workspace()
        self.fuses_output_layer = True

    def attach(self, model: Seq2Seq) -> None:
        self.fuses_output_layer = not reinforce_estimators(model)  # their reward reads logits

    def train(self, mode: bool = True):
        if not mode:  # validation or test: the loss's buffer is training's alone
            self.workspace.clear()
        return super().train(mode)

    def forward(self, task, batch):
        feed = task.sampling.feed(task.global_step)
        inputs = batch.src, batch.src_lengths, batch.tgt_in, feed, batch.src_copy
        targets = batch.output_targets.flatten()  # extended ids where the model copies
        model = task.model
        out = model.readout_inputs(*inputs) if self.fuses_output_layer else model(*inputs)
        if isinstance(out, ReadoutInputs):
            if runs_fused(out.inputs):
                loss = linear_cross_entropy(
                    out.inputs.flatten(0, 1),
                    out.layer,
                    targets,
                    ignore_index=PAD_ID,
                    label_smoothing=self.label_smoothing,
                    workspace=self.workspace,
                )
                return loss, DecoderOutput(None, out.attention), {}
            out = DecoderOutput(out.layer(out.inputs), out.attention)
        loss = token_cross_entropy(
            out.logits.flatten(0, 1).float(),
            targets,
            ignore_index=PAD_ID,
            label_smoothing=self.label_smoothing,
        )
        return loss, out, {}


def feature_size(model: Seq2Seq) -> int:
    """The size of the decoder's readout features, read off one step on a one-word source
    (without gradients, dropout or drawing from the global random generator)."""
    device = next(model.parameters()).device
    src = torch.tensor([[EOS_ID]], device=device)
    training = model.training
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        model.eval()
        memory, state = model.start(src, torch.tensor([1]))
        features, _, _ = model.decoder.step(torch.tensor([BOS_ID], device=device), memory, state)
        model.train(training)
    return features.size(-1)


def output_rewards(task, reward, outputs: torch.Tensor, references: torch.Tensor) -> torch.Tensor:
    """[N] the reward of each output (ids [N, T]) against its reference (ids [N, T']), on the
    text the task's translator writes."""
    translator = task.evaluator.translator
    values = sequence_rewards(
        reward,
        outputs.tolist(),
        references.tolist(),
        translator.target_vocab,
        translator.target_tokenizer,
    )
    return torch.tensor(values, dtype=torch.float32, device=outputs.device)


def mixer_loss(
    run: Rollout, rewards: torch.Tensor, baselines: torch.Tensor
) -> tuple[torch.Tensor, dict[str, float]]:
    """Cross-entropy of the reference tokens fed, REINFORCE on the tokens drawn, both per token
    of the rollout, plus the baseline's mean squared error.

    A drawn token's log-probability is weighted by its sentence's reward minus the baseline's
    estimate at its step (`baselines` [B, T], which must not carry gradients into the model);
    the estimate is trained towards the reward and is no part of the REINFORCE weight's
    gradient."""
    sampled, forced = run.sampled, run.forced
    advantage = (rewards.unsqueeze(1) - baselines).detach()
    cross_entropy = -(run.log_probs * forced).sum()
    reinforce = -(advantage * run.log_probs * sampled).sum()
    tokens = run.mask.sum().clamp(min=1)
    drawn = sampled.sum().clamp(min=1)
    squared = ((baselines - rewards.unsqueeze(1)) ** 2 * sampled).sum() / drawn
    logs = {
        "reward": float(rewards.mean()),
        "cross_entropy": float(cross_entropy.detach() / forced.sum().clamp(min=1)),
        "baseline_mse": float(squared.detach()),
        "sampled_share": float(sampled.sum() / tokens),
    }
    return (cross_entropy + reinforce) / tokens + squared, logs


class MIXER(Objective):
    """Ranzato et al. (2016)'s mixed incremental cross-entropy REINFORCE.

    Each sentence of n reference tokens ([EOS] included) is fed its first n - delta reference
    tokens under cross-entropy; from there the model draws its own continuation until [EOS]
    (or the length cap), and REINFORCE weights each drawn token by the sentence's reward (of
    the whole output: the reference prefix and the drawn rest) minus a learned baseline: a
    linear regressor on the decoder's features at that step, trained by squared error on
    features that carry no gradient back into the model. delta grows by `delta_increment`
    every `increment_every` training steps from `delta_start`; once it reaches n the whole
    sentence is drawn (plain REINFORCE).
    """

    scores_reference = False

    def __init__(
        self,
        reward,
        delta_start: int = 2,
        delta_increment: int = 2,
        increment_every: int = 100,
        max_length_ratio: float = 2.0,
        max_length_offset: int = 10,
    ):
        super().__init__()
        if delta_start < 0 or delta_increment < 0 or increment_every < 1:
            raise ValueError(
                "objective: delta_start and delta_increment must be at least 0 and "
                f"increment_every at least 1, got {delta_start}, {delta_increment}, "
                f"{increment_every}"
            )
        self.reward = reward
        self.delta_start = delta_start
        self.delta_increment = delta_increment
        self.increment_every = increment_every
        self.max_length_ratio = max_length_ratio
        self.max_length_offset = max_length_offset
        self.baseline: nn.Linear | None = None

    def attach(self, model: Seq2Seq) -> None:
        self.baseline = nn.Linear(feature_size(model), 1)

    def delta(self, step: int) -> int:
        """Reference tokens left to the model's own draws at training step `step`."""
        return self.delta_start + self.delta_increment * (step // self.increment_every)

    def forward(self, task, batch):
        if self.baseline is None:
            raise RuntimeError("MIXER's baseline is sized by attach(model) before training")
        delta = self.delta(task.global_step)
        lengths = (batch.tgt_out != PAD_ID).sum(1)
        keep = (lengths - delta).clamp(min=0)
        caps = max_output_lengths(batch.src_lengths, self.max_length_ratio, self.max_length_offset)
        run = rollout(task.model, batch.src, batch.src_lengths, batch.tgt_out, keep, caps)
        rewards = output_rewards(task, self.reward, run.tokens, batch.tgt_out)
        baselines = self.baseline(run.features.detach().float()).squeeze(-1)
        loss, logs = mixer_loss(run, rewards, baselines)
        return loss, None, {**logs, "delta": float(delta)}


def expected_risk(
    log_probs: torch.Tensor, risks: torch.Tensor, mask: torch.Tensor, sharpness: float
) -> torch.Tensor:
    """Shen et al. (2016)'s risk, averaged over sentences: sum_y Q(y) risk(y) over each
    sentence's candidates, Q(y) = P(y|x)^sharpness renormalised over the candidate set.

    log_probs, risks, mask: [B, K], K candidates per sentence of which `mask` marks the real
    ones (every sentence has at least one)."""
    scaled = (sharpness * log_probs).masked_fill(~mask, -math.inf)
    q = torch.softmax(scaled, dim=1)
    return (q * risks.masked_fill(~mask, 0.0)).sum(1).mean()


CANDIDATE_SOURCES = ("sample", "beam")


class MinimumRiskTraining(Objective):
    """Shen et al. (2016): minimise the expected risk 1 - reward(y, reference) over a set of
    candidate outputs of each sentence, under the model's probabilities renormalised over the
    set with sharpness alpha (Q(y) proportional to P(y|x)^alpha).

    Candidates are `candidates` draws from the model (`source: sample`; duplicates removed,
    as in the paper) or the beam's `candidates`-best list (`source: beam`), drawn without
    gradients; with `include_reference` the reference joins the set (the paper's choice).
    Their log P(y|x) is then the teacher-forced sum of token log-probabilities, through which
    the gradient flows.
    """

    scores_reference = False

    def __init__(
        self,
        reward,
        candidates: int = 20,
        sharpness: float = 5e-3,
        include_reference: bool = True,
        source: str = "sample",
        max_length_ratio: float = 2.0,
        max_length_offset: int = 10,
    ):
        super().__init__()
        if source not in CANDIDATE_SOURCES:
            raise ValueError(f"objective.source must be one of {CANDIDATE_SOURCES}, got {source!r}")
        if candidates < 1 or sharpness <= 0:
            raise ValueError(
                f"objective: candidates must be at least 1 and sharpness above 0, got "
                f"{candidates} and {sharpness}"
            )
        self.reward = reward
        self.candidates = candidates
        self.sharpness = sharpness
        self.include_reference = include_reference
        self.source = source
        self.max_length_ratio = max_length_ratio
        self.max_length_offset = max_length_offset

    def candidate_sets(self, model: Seq2Seq, batch: Batch) -> list[list[tuple[int, ...]]]:
        """Each sentence's distinct candidates as word ids (without [EOS]), in the order found."""
        with torch.no_grad():
            found = self._beam(model, batch) if self.source == "beam" else self._draws(model, batch)
        if self.include_reference:
            for b, reference in enumerate(batch.tgt_out.tolist()):
                found[b].append(words_of(reference))
        return [list(dict.fromkeys(c)) for c in found]

    def _beam(self, model: Seq2Seq, batch: Batch) -> list[list[tuple[int, ...]]]:
        search = BeamSearch(
            beam_size=self.candidates,
            nbest=self.candidates,
            max_length_ratio=self.max_length_ratio,
            max_length_offset=self.max_length_offset,
        )
        nbest = search(model, batch.src, batch.src_lengths)
        return [[tuple(h.tokens) for h in hypotheses] for hypotheses in nbest]

    def _draws(self, model: Seq2Seq, batch: Batch) -> list[list[tuple[int, ...]]]:
        K, B = self.candidates, len(batch)
        rows = torch.arange(B).repeat_interleave(K)
        caps = max_output_lengths(
            batch.src_lengths[rows], self.max_length_ratio, self.max_length_offset
        )
        nothing = batch.tgt_out[rows.to(batch.src.device), :0]  # no reference token is fed
        keep = torch.zeros(B * K, dtype=torch.long)
        run = rollout(model, batch.src, batch.src_lengths, nothing, keep, caps, sources=rows)
        drawn = [words_of(row) for row in run.tokens.tolist()]
        return [drawn[b * K : (b + 1) * K] for b in range(B)]

    def forward(self, task, batch):
        sets = self.candidate_sets(task.model, batch)
        device = batch.src.device
        owner = torch.tensor([b for b, c in enumerate(sets) for _ in c], device=device)
        slot = torch.tensor([k for c in sets for k in range(len(c))], device=device)
        tgt_in, tgt_out = padded_sequences([y for c in sets for y in c], device)
        log_probs = sequence_log_probs(
            task.model, batch.src, batch.src_lengths, owner, tgt_in, tgt_out
        )
        rewards = output_rewards(task, self.reward, tgt_out, batch.tgt_out[owner])

        def grid(values: torch.Tensor) -> torch.Tensor:  # [B, most candidates]
            empty = values.new_zeros(len(sets), int(slot.max()) + 1)
            return empty.index_put((owner, slot), values)

        mask = grid(torch.ones_like(rewards)).bool()
        risk = expected_risk(grid(log_probs), grid(1.0 - rewards), mask, self.sharpness)
        logs = {
            "risk": float(risk.detach()),
            "reward": float(rewards.mean()),
            "candidates": len(slot) / len(sets),
        }
        return risk, None, logs


def words_of(ids: list[int]) -> tuple[int, ...]:
    """The words of an output or reference: its ids up to [EOS], without [PAD]."""
    words = ids[: ids.index(EOS_ID)] if EOS_ID in ids else ids
    return tuple(i for i in words if i != PAD_ID)


def padded_sequences(
    sequences: list[tuple[int, ...]], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Decoder input ([BOS] y) and targets (y [EOS]) of word-id sequences, [PAD]ded: [N, T]."""
    T = max(len(y) for y in sequences) + 1
    tgt_in = torch.full((len(sequences), T), PAD_ID, dtype=torch.long)
    tgt_out = torch.full((len(sequences), T), PAD_ID, dtype=torch.long)
    for i, y in enumerate(sequences):
        tgt_in[i, : len(y) + 1] = torch.tensor([BOS_ID, *y], dtype=torch.long)
        tgt_out[i, : len(y) + 1] = torch.tensor([*y, EOS_ID], dtype=torch.long)
    return tgt_in.to(device), tgt_out.to(device)


def sequence_log_probs(
    model: Seq2Seq,
    src: torch.Tensor,
    src_lengths: torch.Tensor,
    sources: torch.Tensor,
    tgt_in: torch.Tensor,
    tgt_out: torch.Tensor,
) -> torch.Tensor:
    """[N] log P(y|x) of each target (`tgt_out`, [EOS] included) given its source, row
    `sources[n]` of `src` (each source is encoded once for all its targets): the
    teacher-forced sum of its tokens' log-probabilities."""
    encoded = model.encoder(src, src_lengths).index_select(sources.to(src.device))
    logits = model.decode(encoded, tgt_in).logits.float()
    tokens = torch.log_softmax(logits, dim=-1).gather(2, tgt_out.unsqueeze(2)).squeeze(2)
    return tokens.masked_fill(tgt_out == PAD_ID, 0.0).sum(1)
