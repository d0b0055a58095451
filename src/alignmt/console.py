"""What a run prints on the console: the libraries' known noise filtered where it comes from
(nothing else), a model summary without the FLOPs column Lightning cannot fill for this
model, and the end-of-run summary (BLEU by length, where the report and the run are)."""

from __future__ import annotations

import logging
import math
import warnings
from pathlib import Path

from pytorch_lightning.callbacks import ModelSummary as LightningModelSummary
from pytorch_lightning.utilities.model_summary import get_human_readable_count
from rich.console import Console
from rich.table import Table

# Lightning's rank-zero messages go through one of these loggers (the last imported sets it).
RANK_ZERO_LOGGERS = (
    "pytorch_lightning.utilities.rank_zero",
    "lightning_fabric.utilities.rank_zero",
    "lightning_utilities.core.rank_zero",
)
NOISE = (
    # pytorch_lightning/trainer/connectors/logger_connector: an advertisement on every run
    "💡 Tip: For seamless cloud logging",
    # callback_connector, when ModelSummary below stands in for Lightning's own
    "Trainer already configured with model summary callbacks",
)
# torch 2.13 deprecates LeafSpec, which pytorch_lightning/utilities/_pytree.py still builds.
LEAFSPEC = r"`isinstance\(treespec, LeafSpec\)` is deprecated"


class _DropNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(NOISE)


_DROP_NOISE = _DropNoise()


def quiet_known_noise() -> None:
    """Drop the messages in `NOISE` and torch's LeafSpec deprecation warning raised inside
    Lightning; every other message and warning still shows."""
    for name in RANK_ZERO_LOGGERS:
        logger = logging.getLogger(name)
        if _DROP_NOISE not in logger.filters:
            logger.addFilter(_DROP_NOISE)
    warnings.filterwarnings("ignore", message=LEAFSPEC, category=FutureWarning)


class ModelSummary(LightningModelSummary):
    """Lightning's summary table (name, type, parameters, mode) without FLOPs, which it counts
    only from an example input this model does not have, so it would print 0. `enabled`
    follows `trainer.enable_model_summary`."""

    def __init__(self, max_depth: int = 1, enabled: bool = True):
        super().__init__(max_depth=max_depth if enabled else 0)

    @staticmethod
    def summarize(summary_data, total_parameters, trainable_parameters, model_size, *_, **__):
        columns = dict(summary_data)
        table = Table(header_style="bold magenta")
        names = [c for c in columns if c in ("Name", "Type", "Params", "Mode")]
        for name in names:
            table.add_column(name, justify="right" if name == "Params" else "left")
        for row in zip(*(columns[name] for name in names), strict=True):
            table.add_row(*row)
        console = Console()
        console.print(table)
        frozen = total_parameters - trainable_parameters
        console.print(
            f"[bold]{get_human_readable_count(trainable_parameters)}[/] trainable parameters"
            + (f", {get_human_readable_count(frozen)} frozen" if frozen else "")
            + f" ({model_size:.1f} MB)"
        )


def _score(value) -> str:
    return (
        "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.2f}"
    )


def bucket_table(by_length: list[dict], bleu: float, unit: str | None) -> Table:
    """Test BLEU per source-length bucket, and over the whole test set."""
    table = Table(
        title="test BLEU by source length",
        title_justify="left",
        caption=f"length: {unit or 'source words'}",
        caption_justify="left",
        min_width=48,
    )
    table.add_column("length")
    table.add_column("sentences", justify="right")
    table.add_column("BLEU", justify="right")
    for row in by_length:
        table.add_row(row["bucket"], str(row["sentences"]), _score(row["bleu"]))
    total = sum(row["sentences"] for row in by_length)
    table.add_row("all", str(total), _score(bleu), style="bold", end_section=True)
    return table


def print_run_summary(
    run_dir: Path, metrics: dict, by_length: list[dict], report: Path | None, console=None
) -> None:
    """The end of `alignmt-train`: the bucket table, the headline scores, the paths."""
    console = console or Console()
    unit = metrics.get("bleu_by_length_unit")
    console.print(bucket_table(by_length, metrics.get("test/bleu"), unit))
    scores = [f"chrF {_score(metrics.get('test/chrf'))}"]
    if metrics.get("test/aer") is not None:
        scores.append(f"AER {_score(metrics['test/aer'])}")
    if metrics.get("val/best_bleu") is not None:
        scores.append(f"best validation BLEU {_score(metrics['val/best_bleu'])}")
    if metrics.get("train_steps") is not None:
        scores.append(f"{metrics['train_steps']} steps in {metrics.get('train_seconds', 0):.0f} s")
    console.print(" · ".join(scores))
    console.print(
        f"BLEU signature: {metrics.get('bleu_signature', '–')}", style="dim", soft_wrap=True
    )
    if report is not None:
        console.print(f"report:        {report}", soft_wrap=True)
    console.print(f"run directory: {run_dir}", soft_wrap=True)
