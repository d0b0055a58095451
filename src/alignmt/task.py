"""The LightningModule that trains: loss, scheduled sampling, optimisation, checkpoint contents."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable

import numpy as np
import torch
from pytorch_lightning.trainer.states import TrainerFn

from alignmt.data.batching import Batch
from alignmt.evaluation.evaluator import Evaluator
from alignmt.evaluation.module import EvaluationModule
from alignmt.models.attention.hard import (
    reinforce_estimators,
    reinforce_loss,
    sentence_log_likelihood,
)
from alignmt.models.attention.supervision import alignment_loss
from alignmt.models.coverage import coverage_loss
from alignmt.models.seq2seq import Seq2Seq
from alignmt.objectives import MaximumLikelihood, Objective
from alignmt.sampling import Schedule, TeacherForcing
from alignmt.special_tokens import PAD_ID

log = logging.getLogger(__name__)


class TranslationTask(EvaluationModule):
    """Trains a `Seq2Seq` model on an objective (`objective`: token-level NLL by default, with
    scheduled sampling if configured) plus the attention terms: optionally See et al.'s
    coverage loss and supervised attention (`alignment_loss_weight`, against the gold
    alignments the training batches then carry), and the REINFORCE term of every choice the
    model samples (hard attention), rewarded with each sentence's log-likelihood. Validation
    and test are `EvaluationModule`'s (the best checkpoint is chosen on `val/bleu`); files and
    dashboards are callbacks' work.

    Checkpoints carry the vocabularies, the learnt tokenisers and the torch, numpy and Python
    random states of every process, so a resumed run draws the same dropout masks and
    sampling coins as an uninterrupted one (under DDP each process draws its own: its batches
    differ in shape).
    """

    def __init__(
        self,
        model: Seq2Seq,
        optimizer: Callable[..., torch.optim.Optimizer],
        evaluator: Evaluator,
        lr_scheduler: Callable | None = None,
        lr_scheduler_interval: str = "epoch",
        lr_scheduler_monitor: str = "val/bleu",
        objective: Objective | None = None,
        sampling: Schedule | None = None,
        coverage_loss_weight: float = 0.0,
        alignment_loss_weight: float = 0.0,
        run_config: dict | None = None,
    ):
        super().__init__(model, evaluator)
        # Only plain values go into checkpoints (torch.load with weights_only=True).
        self.save_hyperparameters({"config": run_config or {}})
        self.optimizer_factory = optimizer
        self.scheduler_factory = lr_scheduler
        self.scheduler_interval = lr_scheduler_interval
        self.scheduler_monitor = lr_scheduler_monitor
        self.objective = objective or MaximumLikelihood()
        self.objective.attach(model)
        self.sampling = sampling or TeacherForcing()
        self.coverage_loss_weight = coverage_loss_weight
        self.alignment_loss_weight = alignment_loss_weight
        self.estimators = reinforce_estimators(model)
        terms = {
            "task.coverage_loss_weight": coverage_loss_weight,
            "task.alignment_loss_weight": alignment_loss_weight,
            "a sampled attention's REINFORCE term": self.estimators,
        }
        for name, used in terms.items():
            if used and not self.objective.scores_reference:
                raise ValueError(
                    f"{name} reads the attention of a teacher-forced pass over the reference, "
                    f"which {type(self.objective).__name__} does not make: use objective=mle"
                )

    def setup(self, stage: str) -> None:
        if self.alignment_loss_weight and stage == "fit":
            self.trainer.datamodule.carry_gold_alignments()

    def configure_optimizers(self):
        optimizer = self.optimizer_factory(self.parameters())
        if self.scheduler_factory is None:
            return optimizer
        scheduler = {
            "scheduler": self.scheduler_factory(optimizer),
            "interval": self.scheduler_interval,
            "monitor": self.scheduler_monitor,
        }
        return {"optimizer": optimizer, "lr_scheduler": scheduler}

    # -------------------------------------------------------------- training
    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        loss, out, logs = self.objective(self, batch)
        terms, term_logs = self.attention_terms(batch, out)
        for name, value in {**logs, **term_logs}.items():
            self.log(f"train/{name}", value, batch_size=len(batch))
        loss = loss + terms
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"training loss is {loss.item()} at step {self.global_step}: lower optim.lr, "
                "set trainer.gradient_clip_val, or check the data for degenerate pairs"
            )
        ratio = self.sampling.ratio(self.global_step)
        self.log("train/teacher_forcing_ratio", ratio, batch_size=len(batch))
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch))
        return loss

    def attention_terms(self, batch: Batch, out) -> tuple[torch.Tensor, dict]:
        """What the task adds to the objective's loss for the attention, and its logs."""
        total, logs = torch.zeros((), device=batch.src.device), {}
        if out is None:  # a sequence-level objective (the constructor refused the terms)
            return total, logs
        mask = batch.tgt_out != PAD_ID
        if self.coverage_loss_weight:
            logs["coverage_loss"] = coverage_loss(out.attention, mask)
            total = total + self.coverage_loss_weight * logs["coverage_loss"]
        if self.alignment_loss_weight:
            if batch.alignment is None:
                raise ValueError(
                    "task.alignment_loss_weight needs training batches with gold alignments "
                    "(the data module adds them when the task is set up for fitting)"
                )
            logs["alignment_loss"] = alignment_loss(out.attention, batch.alignment, mask)
            total = total + self.alignment_loss_weight * logs["alignment_loss"]
        if self.estimators:
            reward = sentence_log_likelihood(out.logits, batch.output_targets)
            score_function, reinforce_logs = reinforce_loss(self.estimators, reward, mask)
            logs.update(reinforce_logs)
            total = total + score_function
        return total, logs

    # ----------------------------------------------------------- checkpoints
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        translator, dm = self.evaluator.translator, self.trainer.datamodule
        checkpoint["vocabularies"] = {
            "source": translator.source_vocab.itos,
            "target": translator.target_vocab.itos,
        }
        checkpoint["tokenizers"] = dm.tokenizer_state()  # learnt ones (SentencePiece), as bytes
        checkpoint["random_state"] = every_process(random_state())

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if "random_state" in checkpoint and self.trainer.state.fn == TrainerFn.FITTING:
            states = checkpoint["random_state"]
            states = states if isinstance(states, list) else [states]  # one process's, as before
            if len(states) != self.trainer.world_size:
                log.warning(
                    "the checkpoint holds the random states of %d processes, this run has %d: "
                    "dropout and sampling draws will differ from those of an uninterrupted run",
                    len(states),
                    self.trainer.world_size,
                )
            set_random_state(states[self.global_rank % len(states)])


def every_process(value) -> list:
    """`value` of every process, by global rank (all of them must call this)."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return [value]
    gathered = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(gathered, value)
    return gathered


def random_state() -> dict:
    """The torch, numpy and Python generators' states as plain values (weights_only loads)."""
    version, keys, position, has_gauss, gauss = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "numpy": [version, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, gauss],
        "python": random.getstate(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else [],
    }


def set_random_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    version, keys, position, has_gauss, gauss = state["numpy"]
    np.random.set_state((version, keys.numpy().astype(np.uint32), position, has_gauss, gauss))
    python = state["python"]
    random.setstate((python[0], tuple(python[1]), python[2]))
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
