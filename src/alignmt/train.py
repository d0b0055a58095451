"""`alignmt-train`: train, pick the best checkpoint on validation BLEU, test it.

With no arguments it runs the quickstart: RNNsearch on the embedded toy corpus, on the CPU.
"""

from __future__ import annotations

import json
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

from alignmt.config import CONF_DIR, instantiate
from alignmt.runs import build_callbacks, build_loggers, finish_loggers, save_config
from alignmt.runtime import keep_freed_memory

log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> dict:
    """Runs one experiment and returns its metrics (also written to run_dir/metrics.json)."""
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(cfg, run_dir)
    pl.seed_everything(cfg.seed, workers=True)

    datamodule = instantiate(cfg.data, seed=cfg.seed)
    datamodule.prepare_data()
    datamodule.setup("fit")
    model = instantiate(
        cfg.model,
        src_vocab_size=len(datamodule.source_vocab),
        tgt_vocab_size=len(datamodule.target_vocab),
    )
    make_task = instantiate(cfg.task, _partial_=True)
    task = make_task(
        model=model,
        optimizer=instantiate(cfg.optim),
        search=instantiate(cfg.decoding),
        sampling=instantiate(cfg.sampling),
        out_dir=str(run_dir),
        run_config=OmegaConf.to_container(cfg, resolve=True),
    )
    loggers = build_loggers(cfg)
    checkpoint, callbacks = build_callbacks(cfg, run_dir)
    trainer: pl.Trainer = instantiate(cfg.trainer, logger=loggers, callbacks=callbacks)
    # Without ckpt_path, Lightning resumes from the run directory's own last or interrupted
    # checkpoint if there is one (re-running a run_dir continues it); no need to warn.
    warnings.filterwarnings("ignore", message=r".*fit\(ckpt_path=(None|\"last\")\)")
    try:
        started = time.perf_counter()
        trainer.fit(task, datamodule=datamodule, ckpt_path=cfg.ckpt_path)
        train_seconds = time.perf_counter() - started
        trainer.save_checkpoint(run_dir / "checkpoints" / "last.ckpt")  # the final state, always
        best = checkpoint.best_model_path or None
        trainer.test(task, datamodule=datamodule, ckpt_path=best, verbose=False)
    finally:
        finish_loggers(loggers)
    metrics = {
        **task.test_metrics,
        "val/best_bleu": None
        if checkpoint.best_model_score is None
        else float(checkpoint.best_model_score),
        "best_checkpoint": best,
        "train_seconds": round(train_seconds, 1),
        "train_tokens_per_sec": task.train_tokens / max(task.train_seconds, 1e-9),
        "train_steps": trainer.global_step,
    }
    if trainer.is_global_zero:
        (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        log.info("run directory: %s", run_dir)
        log.info(
            "test BLEU %.2f  chrF %.2f  (%s)",
            metrics["test/bleu"],
            metrics["test/chrf"],
            metrics["bleu_signature"],
        )
    return metrics


@hydra.main(config_path=str(CONF_DIR), config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    """Returns `optimized_metric` for sweepers. In a multirun a failed job is recorded in its
    run directory (error.txt, no metrics.json) and the sweep goes on."""
    keep_freed_memory()
    try:
        metrics = train(cfg)
    except Exception:
        if HydraConfig.get().mode != RunMode.MULTIRUN:
            raise
        log.exception("this run failed; the sweep goes on")
        (Path(cfg.run_dir) / "error.txt").write_text(traceback.format_exc())
        return float("nan")
    return metrics.get(cfg.get("optimized_metric") or "", None)


if __name__ == "__main__":
    main()
