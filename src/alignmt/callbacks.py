"""What a run leaves behind: the resumable last checkpoint, result files, dashboard figures,
speed.

Each is a Lightning callback in the `callbacks` config group; they read what the task's
evaluation produced (`last_validation`, `test_evaluation`, `test_results`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Checkpoint

from alignmt.atomic import remove_leftovers
from alignmt.dashboards import (
    has_dashboard,
    log_artifacts,
    log_test_figures,
    log_validation_samples,
    summarise_best,
)
from alignmt.evaluation.results import spread_by_length, write_test_files
from alignmt.plots import plot_attention
from alignmt.report.sentences import SENTENCES_FILE, sentence_records, write_sentences

log = logging.getLogger(__name__)


class LastCheckpoint(Checkpoint):
    """`dirpath/last.ckpt` every `every_n_train_steps` training steps and after the last one,
    so a kill at any moment loses at most that many steps, and a run stopped at `max_steps`
    continues mid-epoch when resumed with more.

    A step that a validation follows is saved once that validation is over: Lightning resumes
    a checkpoint written at the end of such a step past the validation, which the
    uninterrupted run did (and whose best checkpoint it may have kept). Saved after it, the
    resumed run goes on with the next step, as the uninterrupted one does.
    """

    def __init__(self, dirpath: str, every_n_train_steps: int = 100):
        if every_n_train_steps < 1:
            raise ValueError(
                "callbacks.last_checkpoint.every_n_train_steps must be at least 1, "
                f"got {every_n_train_steps}"
            )
        self.path = Path(dirpath) / "last.ckpt"
        self.every_n_train_steps = every_n_train_steps
        self.saved_step: int | None = None  # the step of the state last.ckpt holds
        self._after_validation: int | None = None  # a step to save once validated

    def on_train_start(self, trainer: pl.Trainer, task) -> None:
        self.saved_step = trainer.global_step  # where this fit starts from is saved already
        if trainer.is_global_zero:  # the one process that writes checkpoints, not writing now
            for leftover in remove_leftovers(self.path.parent):
                log.info("removed %s, left by a run killed while writing it", leftover)

    def on_train_batch_end(self, trainer: pl.Trainer, task, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step == self.saved_step:  # accumulating gradients: no optimiser step yet
            return
        if step % self.every_n_train_steps and step != trainer.max_steps:
            return
        if validation_follows(trainer):
            self._after_validation = step
        else:
            self._save(trainer)

    def on_validation_end(self, trainer: pl.Trainer, task) -> None:
        if not trainer.sanity_checking and self._after_validation == trainer.global_step:
            self._save(trainer)

    def on_train_end(self, trainer: pl.Trainer, task) -> None:
        """Training stopped otherwise (`max_epochs`, early stopping): the final state."""
        if self.saved_step != trainer.global_step:
            self._save(trainer)

    def _save(self, trainer: pl.Trainer) -> None:
        trainer.save_checkpoint(self.path, weights_only=False)
        self.saved_step, self._after_validation = trainer.global_step, None


def validation_follows(trainer: pl.Trainer) -> bool:
    """Whether Lightning validates right after the training step that just ended: its own
    decision (the fit loop takes it again after `on_train_batch_end`)."""
    fit_loop = trainer.fit_loop
    return fit_loop.epoch_loop._should_check_val_fx(fit_loop._data_fetcher)


class ResultFiles(pl.Callback):
    """After testing: hypotheses.txt, bleu_by_length.{csv,png}, exposure.{csv,png}, attention
    heatmaps of `heatmaps` test sentences of increasing length (and of `heatmap_sentences`),
    every sentence with its attention in test_sentences.jsonl.gz (`sentences`: the report's
    attention explorer reads it), and the test metrics merged into metrics.json, in `out_dir`
    (on the main process)."""

    def __init__(
        self,
        out_dir: str,
        heatmaps: int = 4,
        heatmap_sentences: Sequence[int] = (),
        sentences: bool = True,
    ):
        self.out_dir = Path(out_dir)
        self.heatmaps = heatmaps
        self.heatmap_sentences = list(heatmap_sentences)
        self.sentences = sentences

    def on_test_end(self, trainer: pl.Trainer, task) -> None:
        if not trainer.is_global_zero or task.test_results is None:
            return
        evaluator, text = task.evaluator, task.evaluator.texts["test"]
        write_test_files(
            self.out_dir,
            task.test_evaluation,
            text,
            task.test_results,
            self.heatmaps,
            self.heatmap_sentences,
        )
        if self.sentences:
            translator = evaluator.translator
            records = sentence_records(
                task.test_evaluation,
                text,
                (translator.source_tokenizer, translator.target_tokenizer),
                evaluator.alignment_unit,
            )
            write_sentences(self.out_dir / SENTENCES_FILE, records)


class Dashboards(pl.Callback):
    """For wandb and TensorBoard, when either logs the run: after each validation, `samples`
    translations of increasing length (source, reference, hypothesis) with their heatmaps;
    after testing, the figures ResultFiles wrote (test heatmaps, BLEU by length, exposure;
    so this callback comes after it), and for wandb the tested checkpoint and the test
    outputs as artifacts (`artifacts`) and the best `val/bleu` as the run's summary."""

    def __init__(self, out_dir: str, samples: int = 4, artifacts: bool = True):
        self.out_dir = Path(out_dir)
        self.samples = samples
        self.artifacts = artifacts

    def on_fit_start(self, trainer: pl.Trainer, task) -> None:
        if trainer.is_global_zero:
            summarise_best(trainer.loggers)

    def on_test_end(self, trainer: pl.Trainer, task) -> None:
        if not trainer.is_global_zero or not has_dashboard(trainer.loggers):
            return
        out = self.out_dir
        figures = {
            f"test/attention/{int(p.stem.split('_')[1])}": p
            for p in sorted((out / "attention").glob("test_*.png"))
        }
        for name in ("bleu_by_length", "exposure"):
            if (out / f"{name}.png").is_file():
                figures[f"test/{name}"] = out / f"{name}.png"
        log_test_figures(trainer.loggers, trainer.global_step, figures)
        if self.artifacts:
            checkpoint = Path(trainer.ckpt_path) if trainer.ckpt_path else None
            outputs = [
                out / name for name in ("hypotheses.txt", SENTENCES_FILE, "bleu_by_length.csv")
            ]
            log_artifacts(trainer.loggers, checkpoint, outputs)

    def on_validation_end(self, trainer: pl.Trainer, task) -> None:
        evaluation = task.last_validation
        if trainer.sanity_checking or evaluation is None or not self.samples:
            return
        if not trainer.is_global_zero or not has_dashboard(trainer.loggers):
            return
        text = task.evaluator.texts["valid"]
        sentences = evaluation.sentences
        lengths = [len(text.sources[s.index].split()) for s in sentences]
        rows, images = [], []
        for s in (sentences[i] for i in spread_by_length(lengths, self.samples)):
            t = s.translation
            rows.append([text.sources[s.index], text.targets[s.index], t.text])
            if t.attention is not None:
                name = f"step{trainer.global_step:06d}_{s.index:05d}.png"
                images.append(
                    plot_attention(
                        t.attention,
                        t.source_labels,
                        t.target_labels,
                        self.out_dir / "attention" / "validation" / name,
                        title=f"validation sentence {s.index}, step {trainer.global_step}",
                    )
                )
        log_validation_samples(trainer.loggers, trainer.global_step, rows, images)


class TrainingSpeed(pl.Callback):
    """Target tokens per second over the training steps themselves (forward, backward,
    optimiser; not validation), logged per logging interval as `train/tokens_per_sec`;
    `tokens_per_sec` is the whole run's."""

    def __init__(self):
        self.tokens, self.seconds = 0, 0.0
        self._interval = (0, 0.0)
        self._started = 0.0

    @property
    def tokens_per_sec(self) -> float:
        return self.tokens / max(self.seconds, 1e-9)

    def on_train_batch_start(self, trainer, task, batch, batch_idx) -> None:
        self._started = time.perf_counter()

    def on_train_batch_end(self, trainer, task, outputs, batch, batch_idx) -> None:
        seconds = time.perf_counter() - self._started
        tokens = batch.num_target_tokens
        self.tokens += tokens
        self.seconds += seconds
        self._interval = (self._interval[0] + tokens, self._interval[1] + seconds)
        if trainer.global_step % trainer.log_every_n_steps == 0 and self._interval[1] > 0:
            task.log("train/tokens_per_sec", self._interval[0] / self._interval[1])
            self._interval = (0, 0.0)
