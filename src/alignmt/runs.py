"""What every run directory gets: its resolved config, loggers, checkpoints, a progress bar."""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.callbacks import (
    Callback,
    LearningRateMonitor,
    ModelCheckpoint,
    OnExceptionCheckpoint,
    RichProgressBar,
)
from pytorch_lightning.loggers import Logger

from alignmt.config import instantiate


def save_config(cfg: DictConfig, run_dir: Path) -> None:
    """The fully resolved config, so a run can be read (and repeated) without Hydra's defaults."""
    OmegaConf.save(cfg, run_dir / "config.yaml", resolve=True)


def build_loggers(cfg: DictConfig) -> list[Logger]:
    """One logger per entry of the `logger` group (`logger=csv`, `logger=[csv,wandb]`)."""
    return [instantiate(node) for node in (cfg.get("logger") or {}).values()]


def finish_loggers(loggers: list[Logger]) -> None:
    """Always close wandb runs, also after an error, so runs of a multirun never share one."""
    if "wandb" in sys.modules:
        import wandb

        if wandb.run is not None:
            wandb.finish()


def build_callbacks(cfg: DictConfig, run_dir: Path) -> tuple[ModelCheckpoint, list[Callback]]:
    checkpoints = run_dir / "checkpoints"
    best = ModelCheckpoint(
        dirpath=checkpoints,
        filename="best-step{step:06d}",  # no '=' in the name: it must pass as a Hydra override
        auto_insert_metric_name=False,
        monitor="val/bleu",
        mode="max",
        save_top_k=1,
        save_last=True,
    )
    callbacks: list[Callback] = [best, OnExceptionCheckpoint(checkpoints, filename="interrupted")]
    if cfg.trainer.get("enable_progress_bar", True):
        callbacks.append(RichProgressBar(leave=True))
    if cfg.get("logger"):
        callbacks.append(LearningRateMonitor(logging_interval="step"))
    return best, callbacks
