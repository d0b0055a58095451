"""`alignmt-evaluate ckpt=PATH [decoding=beam]`: the test metrics and result files of a checkpoint.

Writes to `run_dir`: metrics.json (BLEU, chrF, TER and ROUGE-1/2/L with their signatures, BLEU
on the paper's "No UNK" subset and its size, perplexity, BLEU per source-length bucket,
alignment error rate, decoding sentences/s and output tokens/s), hypotheses.txt,
bleu_by_length.{csv,png} and attention heatmaps (`heatmaps` chosen by length, plus the test
sentences `heatmap_sentences`).

`ckpt=[A,B,...]` evaluates the ensemble of several checkpoints (`alignmt.models.ensemble`).
`baseline=RUN_DIR_OR_FILE` adds, per metric, the baseline's score, the difference and the
p-values of paired significance tests (`alignmt.evaluation.significance`).

Two studies are options: `search_scores=true` sets each output against the reference under the
beam's own ranking score (search errors, truncated and empty outputs: test/search/..., and
search.csv per sentence; `sweep=beam_curse`), `prefix_dependence=true` runs the
prefix-dependence probe (test/prefix_dependence/...).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from alignmt.atomic import write_text
from alignmt.build import Restored, evaluator, restore
from alignmt.callbacks import ResultFiles
from alignmt.config import CONF_DIR, instantiate
from alignmt.console import quiet_known_noise
from alignmt.data.corpus import ParallelText
from alignmt.evaluation.module import EvaluationModule
from alignmt.evaluation.prefix_dependence import prefix_dependence_over
from alignmt.evaluation.results import update_metrics_file
from alignmt.evaluation.search import (
    SEARCH_CSV,
    reference_scores,
    search_metrics,
    search_outcomes,
    write_outcomes,
)
from alignmt.evaluation.significance import baseline_comparison, baseline_hypotheses

log = logging.getLogger(__name__)


def evaluate(cfg: DictConfig) -> dict:
    run_dir = Path(cfg.run_dir)
    restored = restore(cfg.ckpt, cfg.get("decoding"), cfg)
    if cfg.get("baseline"):  # a wrong baseline fails before decoding, not after
        restored.datamodule.prepare_data()
        baseline_hypotheses(cfg.baseline, len(restored.datamodule.text["test"]))
    write_text(run_dir / "evaluate.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    write_text(run_dir / "config.yaml", OmegaConf.to_yaml(restored.config))
    module = EvaluationModule(restored.model, evaluator(restored.translator, restored.datamodule))
    files = ResultFiles(str(run_dir), cfg.heatmaps, list(cfg.heatmap_sentences))
    trainer = instantiate(cfg.trainer, logger=False, callbacks=[files], enable_checkpointing=False)
    check_studies(cfg, restored, trainer.world_size)
    trainer.test(module, datamodule=restored.datamodule, verbose=False)
    results = module.test_results
    checkpoints = restored.checkpoints
    metrics = {
        **results.metrics,
        **results.details,
        "checkpoint": checkpoints[0] if len(checkpoints) == 1 else checkpoints,
    }
    metrics.update(study_metrics(cfg, run_dir, module.test_evaluation, restored))
    if cfg.get("baseline") and trainer.is_global_zero:
        metrics.update(compare(cfg, module, restored.datamodule.text["test"]))
    if trainer.is_global_zero:
        update_metrics_file(run_dir / "metrics.json", metrics)
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


def check_studies(cfg: DictConfig, restored: Restored, world_size: int) -> None:
    """The studies' options need one process and, for search scores, a ranking score."""
    if not (cfg.get("search_scores") or cfg.get("prefix_dependence")):
        return
    if world_size > 1:
        raise ValueError("search_scores and prefix_dependence run in one process: trainer=cpu")
    if cfg.get("search_scores") and not hasattr(restored.translator.search, "ranking_score"):
        raise ValueError(
            "search_scores=true scores references by the beam's ranking score: decoding=beam "
            "(decoding.beam_size=1 decoding.stopping=early is greedy search)"
        )


def study_metrics(cfg: DictConfig, run_dir: Path, evaluation, restored: Restored) -> dict:
    """`search_scores`: the search against the references (search.csv, test/search/...);
    `prefix_dependence`: the prefix-dependence probe (test/prefix_dependence/...)."""
    metrics = {}
    test_batches = restored.datamodule.test_dataloader
    if cfg.get("search_scores"):
        references = reference_scores(restored.model, restored.translator.search, test_batches())
        texts = restored.datamodule.text["test"].targets
        outcomes = search_outcomes(evaluation, references, texts)
        write_outcomes(run_dir / SEARCH_CSV, outcomes)
        metrics.update({f"test/search/{k}": v for k, v in search_metrics(outcomes).items()})
    if cfg.get("prefix_dependence"):
        summary = prefix_dependence_over(restored.model, test_batches()).summary()
        metrics.update({f"test/prefix_dependence/{k}": v for k, v in summary.items()})
    return metrics


def compare(cfg: DictConfig, module: EvaluationModule, text: ParallelText) -> dict:
    """Significance of the differences from `cfg.baseline` (conf/evaluate.yaml)."""
    options = cfg.significance
    hypotheses = [s.translation.text for s in module.test_evaluation.sentences]
    return baseline_comparison(
        hypotheses,
        cfg.baseline,
        text,
        list(options.methods),
        list(options.metrics),
        {"bootstrap": options.bootstrap_samples, "randomisation": options.randomisation_trials},
        options.seed,
    )


@hydra.main(config_path=str(CONF_DIR), config_name="evaluate", version_base="1.3")
def main(cfg: DictConfig) -> None:
    quiet_known_noise()
    evaluate(cfg)


if __name__ == "__main__":
    main()
