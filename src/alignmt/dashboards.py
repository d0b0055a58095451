"""Sample translations and attention heatmaps for the experiment dashboards (wandb,
TensorBoard) after every validation; scalars reach them through Lightning's logging."""

from __future__ import annotations

from pathlib import Path

from matplotlib.image import imread
from pytorch_lightning.loggers import Logger, TensorBoardLogger, WandbLogger

COLUMNS = ["source", "reference", "hypothesis"]
DASHBOARDS = (WandbLogger, TensorBoardLogger)


def has_dashboard(loggers: list[Logger]) -> bool:
    return any(isinstance(logger, DASHBOARDS) for logger in loggers)


def log_validation_samples(
    loggers: list[Logger], step: int, rows: list[list[str]], images: list[Path]
) -> None:
    """rows: [source, reference, hypothesis] per sample; images: heatmap PNG files."""
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            logger.log_table("val/samples", columns=COLUMNS, data=rows, step=step)
            if images:
                logger.log_image("val/attention", [str(p) for p in images], step=step)
        elif isinstance(logger, TensorBoardLogger):
            table = "| " + " | ".join(COLUMNS) + " |\n|---|---|---|\n"
            table += "".join("| " + " | ".join(row) + " |\n" for row in rows)
            logger.experiment.add_text("val/samples", table, step)
            for i, path in enumerate(images):
                image = imread(path)[..., :3]
                logger.experiment.add_image(f"val/attention/{i}", image, step, dataformats="HWC")
