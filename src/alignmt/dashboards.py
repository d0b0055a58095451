"""What the experiment dashboards (wandb, TensorBoard) get besides the scalars that reach them
through Lightning's logging: sample translations and heatmaps after every validation, the
test figures (heatmaps, BLEU by length, exposure), the best validation scores as wandb's run
summary, and the tested checkpoint and the test outputs as wandb artifacts."""

from __future__ import annotations

from pathlib import Path

from matplotlib.image import imread
from pytorch_lightning.loggers import Logger, TensorBoardLogger, WandbLogger

COLUMNS = ["source", "reference", "hypothesis"]
DASHBOARDS = (WandbLogger, TensorBoardLogger)
# wandb's run summary keeps the best value of these, not the last one.
BEST = {"val/bleu": "max", "val/loss": "min"}


def has_dashboard(loggers: list[Logger]) -> bool:
    return any(isinstance(logger, DASHBOARDS) for logger in loggers)


def _rgb(path: Path):
    return imread(path)[..., :3]


def log_validation_samples(
    loggers: list[Logger], step: int, rows: list[list[str]], images: list[Path]
) -> None:
    """rows: [source, reference, hypothesis] per sample; images: heatmap PNG files."""
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            logger.log_table("val/samples", columns=COLUMNS, data=rows, step=step)
            for i, path in enumerate(images):  # one key each: wandb lines up equal sizes only
                logger.log_image(f"val/attention/{i}", [str(path)], step=step)
        elif isinstance(logger, TensorBoardLogger):
            table = "| " + " | ".join(COLUMNS) + " |\n|---|---|---|\n"
            table += "".join("| " + " | ".join(row) + " |\n" for row in rows)
            logger.experiment.add_text("val/samples", table, step)
            for i, path in enumerate(images):
                logger.experiment.add_image(
                    f"val/attention/{i}", _rgb(path), step, dataformats="HWC"
                )


def log_test_figures(loggers: list[Logger], step: int, figures: dict[str, Path]) -> None:
    """figures: tag (`test/attention/17`, `test/bleu_by_length`, ...) -> PNG file."""
    for logger in loggers:
        for tag, path in figures.items():
            if isinstance(logger, WandbLogger):
                logger.log_image(tag, [str(path)], step=step, caption=[path.stem])
            elif isinstance(logger, TensorBoardLogger):
                logger.experiment.add_image(tag, _rgb(path), step, dataformats="HWC")
        if isinstance(logger, TensorBoardLogger):
            logger.experiment.flush()


def summarise_best(loggers: list[Logger]) -> None:
    """wandb's summary of `val/bleu` is its best value (and of `val/loss` its lowest), on
    Lightning's step axis."""
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            for metric, summary in BEST.items():
                logger.experiment.define_metric(
                    metric, step_metric="trainer/global_step", step_sync=True, summary=summary
                )


def log_artifacts(loggers: list[Logger], checkpoint: Path | None, outputs: list[Path]) -> None:
    """The tested checkpoint as a `model` artifact (alias `best`) and the test outputs as a
    `predictions` artifact of the wandb run (offline runs keep them until `wandb sync`)."""
    import wandb

    for logger in loggers:
        if not isinstance(logger, WandbLogger):
            continue
        run = logger.experiment
        if checkpoint is not None and checkpoint.is_file():
            model = wandb.Artifact(
                f"model-{run.id}", type="model", metadata={"file": checkpoint.name}
            )
            model.add_file(str(checkpoint), name="model.ckpt")
            run.log_artifact(model, aliases=["best"])
        present = [p for p in outputs if p.is_file()]
        if present:
            predictions = wandb.Artifact(f"predictions-{run.id}", type="predictions")
            for path in present:
                predictions.add_file(str(path), name=path.name)
            run.log_artifact(predictions)
