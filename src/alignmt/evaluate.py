"""`alignmt-evaluate ckpt=PATH [decoding=beam]`: the test metrics and result files of a checkpoint.

Writes to `run_dir`: metrics.json (BLEU and chrF with their signatures, BLEU on the paper's
"No UNK" subset and its size, perplexity, BLEU per source-length bucket, alignment error rate,
decoding sentences/s and output tokens/s), hypotheses.txt, bleu_by_length.{csv,png} and
attention heatmaps (`heatmaps` chosen by length, plus the test sentences `heatmap_sentences`).
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from alignmt.checkpoint import load_checkpoint
from alignmt.config import CONF_DIR, instantiate
from alignmt.runtime import keep_freed_memory
from alignmt.task import TranslationTask

log = logging.getLogger(__name__)


def evaluate(cfg: DictConfig) -> dict:
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    restored = load_checkpoint(cfg.ckpt)
    OmegaConf.save(cfg, run_dir / "evaluate.yaml", resolve=True)
    OmegaConf.save(restored.config, run_dir / "config.yaml")
    search = instantiate(cfg.decoding if cfg.get("decoding") else restored.config.decoding)
    task = TranslationTask(
        restored.model,
        optimizer=None,
        search=search,
        heatmaps=cfg.heatmaps,
        heatmap_sentences=list(cfg.heatmap_sentences),
        unk_replace=cfg.unk_replace,
        unk_dictionary=cfg.unk_dictionary,
        out_dir=str(run_dir),
        run_config=OmegaConf.to_container(restored.config),
    )
    trainer = instantiate(cfg.trainer, logger=False, callbacks=[])
    trainer.test(task, datamodule=restored.datamodule, verbose=False)
    metrics = {**task.test_metrics, "checkpoint": str(cfg.ckpt)}
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    log.info(
        "test BLEU %.2f  No-UNK BLEU %.2f (%d sentences)  chrF %.2f  %.1f sentences/s  -> %s",
        metrics["test/bleu"],
        metrics.get("test/bleu_no_unk", math.nan),
        metrics["no_unk_sentences"],
        metrics["test/chrf"],
        metrics["test/decode_sentences_per_sec"],
        run_dir,
    )
    return metrics


@hydra.main(config_path=str(CONF_DIR), config_name="evaluate", version_base="1.3")
def main(cfg: DictConfig) -> None:
    keep_freed_memory()
    evaluate(cfg)


if __name__ == "__main__":
    main()
