"""`alignmt-train`: train, pick the best checkpoint on validation BLEU, test it.

With no arguments it runs the quickstart: RNNsearch on the embedded toy corpus, on the CPU.
"""

from __future__ import annotations

import logging
import time
import traceback
import warnings
from pathlib import Path

import hydra
import pytorch_lightning as pl
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.callbacks import ModelCheckpoint

from alignmt.atomic import write_text
from alignmt.build import build, finish_loggers
from alignmt.callbacks import LastCheckpoint, TrainingSpeed
from alignmt.checkpoint import check_checkpoint, latest_checkpoint
from alignmt.config import CONF_DIR
from alignmt.console import print_run_summary, quiet_known_noise
from alignmt.evaluation.results import update_metrics_file
from alignmt.report import run_report

log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> dict:
    """Runs one experiment and returns its metrics (also written to run_dir/metrics.json)."""
    run_dir = Path(cfg.run_dir)
    resume = cfg.ckpt_path or latest_checkpoint(run_dir)  # re-running a run_dir continues it
    resume = check_checkpoint(resume) if resume else None  # a bad file fails before any work
    write_text(run_dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    built = build(cfg)
    trainer = built.trainer()
    # With no checkpoint to resume from, Lightning looks for one itself and says so; we did.
    warnings.filterwarnings("ignore", message=r".*fit\(ckpt_path=(None|\"last\")\)")
    try:
        started = time.perf_counter()
        trainer.fit(
            built.task,
            datamodule=built.datamodule,
            ckpt_path=resume,
            weights_only=True,
        )
        train_seconds = time.perf_counter() - started
        if not any(isinstance(c, LastCheckpoint) for c in trainer.callbacks):
            # callbacks.last_checkpoint=null: the final state all the same (Lightning resumes
            # a checkpoint written after fit with a new epoch)
            trainer.save_checkpoint(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
        best = best_checkpoint(trainer)
        trainer.test(
            built.task,
            datamodule=built.datamodule,
            ckpt_path=check_checkpoint(best) if best else None,
            weights_only=True,
            verbose=False,
        )
    finally:
        finish_loggers()
    metrics = {
        **built.task.test_results.metrics,
        **built.task.test_results.details,
        "val/best_bleu": best_score(trainer),
        "best_checkpoint": best,
        "train_seconds": round(train_seconds, 1),
        "train_tokens_per_sec": training_speed(trainer),
        "train_steps": trainer.global_step,
    }
    if trainer.is_global_zero:
        update_metrics_file(run_dir / "metrics.json", metrics)
        log.info(
            "test BLEU %.2f  chrF %.2f  (%s)  run directory: %s",
            metrics["test/bleu"],
            metrics["test/chrf"],
            metrics["bleu_signature"],
            run_dir,
        )
        report = run_report(run_dir)  # report.html: this run's tables, charts, explorer
        print_run_summary(run_dir, metrics, built.task.test_results.by_length, report)
    return metrics


def _best_callback(trainer: pl.Trainer):
    chosen = (c for c in trainer.checkpoint_callbacks if isinstance(c, ModelCheckpoint))
    return next((c for c in chosen if c.monitor), None)


def best_checkpoint(trainer: pl.Trainer) -> str | None:
    callback = _best_callback(trainer)
    return (callback.best_model_path or None) if callback else None


def best_score(trainer: pl.Trainer) -> float | None:
    callback = _best_callback(trainer)
    if callback is None or callback.best_model_score is None:
        return None
    return float(callback.best_model_score)


def training_speed(trainer: pl.Trainer) -> float | None:
    speed = next((c for c in trainer.callbacks if isinstance(c, TrainingSpeed)), None)
    return None if speed is None else speed.tokens_per_sec


@hydra.main(config_path=str(CONF_DIR), config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    """Returns `optimized_metric` for sweepers. In a multirun a failed job is recorded in its
    run directory (error.txt, no metrics.json) and the sweep goes on."""
    quiet_known_noise()
    try:
        metrics = train(cfg)
    except Exception:
        if HydraConfig.get().mode != RunMode.MULTIRUN:
            raise
        log.exception("this run failed; the sweep goes on")
        write_text(Path(cfg.run_dir) / "error.txt", traceback.format_exc())
        return float("nan")
    return metrics.get(cfg.get("optimized_metric") or "", None)


if __name__ == "__main__":
    main()
