"""Training objectives: what the task minimises on a batch (`objective` config group).

An objective returns the loss, the decoder output it computed it from (the task adds its
attention terms: coverage loss, supervised attention) and values to log. It is a module of
the task, so parameters it owns (a learned baseline) are trained with the model's.
"""

from __future__ import annotations

import torch
from torch import nn

from alignmt.data.batching import Batch
from alignmt.loss import token_cross_entropy
from alignmt.models.seq2seq import DecoderOutput
from alignmt.special_tokens import PAD_ID


class Objective(nn.Module):
    def forward(self, task, batch: Batch) -> tuple[torch.Tensor, DecoderOutput, dict[str, float]]:
        """(loss, the decoder output behind it, values to log as train/<name>)."""
        raise NotImplementedError


class MaximumLikelihood(Objective):
    """Token-level cross-entropy of the reference, with optional label smoothing, under
    teacher forcing or the task's scheduled-sampling schedule."""

    def __init__(self, label_smoothing: float = 0.0):
        super().__init__()
        self.label_smoothing = label_smoothing

    def forward(self, task, batch):
        feed = task.sampling.feed(task.global_step)
        out = task.model(batch.src, batch.src_lengths, batch.tgt_in, feed, batch.src_copy)
        loss = token_cross_entropy(
            out.logits.flatten(0, 1).float(),
            batch.output_targets.flatten(),  # extended ids where the model copies
            ignore_index=PAD_ID,
            label_smoothing=self.label_smoothing,
        )
        return loss, out, {}
