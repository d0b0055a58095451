"""Test metrics from an `Evaluation`, and the files of a run directory (hypotheses, BLEU by
length, the exposure probe, heatmaps, metrics.json)."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from alignmt.atomic import write_text
from alignmt.data.corpus import ParallelText
from alignmt.evaluation.alignment import alignment_error_rate, hard_alignment, parse_pharaoh
from alignmt.evaluation.bleu import corpus_scores
from alignmt.evaluation.by_length import (
    bleu_by_length,
    bucket_metric_key,
    write_bleu_by_length_csv,
)
from alignmt.evaluation.evaluator import Evaluation
from alignmt.evaluation.exposure import ExposureCurves, exposure_curves
from alignmt.evaluation.source_coverage import source_coverage_errors
from alignmt.plots import plot_attention, plot_bleu_by_length, plot_exposure

log = logging.getLogger(__name__)


@dataclass
class TestResults:
    metrics: dict  # test/... scalars
    details: dict  # signatures and counts for metrics.json
    by_length: list[dict] = field(default_factory=list)  # rows of bleu_by_length
    exposure: ExposureCurves | None = None


def spread_by_length(lengths: Sequence[int], k: int) -> list[int]:
    """k positions whose lengths spread over the range: the quantiles (q + 1/2) / k."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    k = min(k, len(order))
    return [order[int((q + 0.5) / k * len(order))] for q in range(k)]


def test_results(evaluation: Evaluation, text: ParallelText) -> TestResults:
    """Every test metric, over all sentences (from every process), in split order."""
    outputs = evaluation.sentences
    hypotheses = [o.translation.text for o in outputs]
    if len(hypotheses) != len(text):
        raise RuntimeError(f"decoded {len(hypotheses)} of {len(text)} test sentences")
    scores = corpus_scores(hypotheses, list(text.targets))
    rows = bleu_by_length(hypotheses, list(text.targets), [len(s.split()) for s in text.sources])
    metrics = {
        "test/bleu": scores["bleu"],
        "test/chrf": scores["chrf"],
        "test/loss": evaluation.loss,
        "test/ppl": math.exp(min(evaluation.loss, 100)),
    }
    for row in rows:
        if row["bleu"] is not None:
            metrics[f"test/{bucket_metric_key(row['lo'], row['hi'])}"] = row["bleu"]
    no_unk = [o for o in outputs if o.no_unk is not None]
    if no_unk:
        references = [text.targets[o.index] for o in no_unk]
        hyps = [o.no_unk.text for o in no_unk]
        metrics["test/bleu_no_unk"] = corpus_scores(hyps, references)["bleu"]
    exposure = None
    if outputs[0].exposure is not None:
        exposure = exposure_curves(*zip(*(o.exposure for o in outputs), strict=True))
        metrics.update({f"test/exposure/{k}": v for k, v in exposure.summary().items()})
    if outputs[0].translation.attention is not None:  # source words skipped or repeated
        attention = (o.translation.attention[:-1, :-1] for o in outputs)
        metrics.update({f"test/{k}": v for k, v in source_coverage_errors(attention).items()})
    if evaluation.decode_seconds > 0:  # this process's decoding time (all decode at once)
        output_tokens = sum(len(o.translation.tokens) for o in outputs)
        metrics["test/decode_sentences_per_sec"] = len(outputs) / evaluation.decode_seconds
        metrics["test/decode_tokens_per_sec"] = output_tokens / evaluation.decode_seconds
    if text.alignments is not None and outputs[0].forced_attention is not None:
        gold = [parse_pharaoh(a) for a in text.alignments]
        for method in ("argmax", "threshold"):
            predicted = [hard_alignment(o.forced_attention, method) for o in outputs]
            key = "test/aer" if method == "argmax" else f"test/aer_{method}"
            metrics[key] = alignment_error_rate(predicted, gold)
    details = {
        "bleu_signature": scores["bleu_signature"],
        "chrf_signature": scores["chrf_signature"],
        "test_sentences": len(hypotheses),
        "no_unk_sentences": len(no_unk),
    }
    return TestResults(metrics, details, rows, exposure)


def write_test_files(
    out: Path,
    evaluation: Evaluation,
    text: ParallelText,
    results: TestResults,
    heatmaps: int = 4,
    heatmap_sentences: Sequence[int] = (),
) -> None:
    """The run directory's test files; the metrics are merged into its metrics.json."""
    outputs = evaluation.sentences
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "hypotheses.txt", "".join(o.translation.text + "\n" for o in outputs))
    write_bleu_by_length_csv(results.by_length, out / "bleu_by_length.csv")
    plot_bleu_by_length({"test": results.by_length}, out / "bleu_by_length.png")
    if results.exposure is not None:
        results.exposure.write_csv(out / "exposure.csv")
        plot_exposure(results.exposure, out / "exposure.png")
    chosen = set(spread_by_length([len(s.split()) for s in text.sources], heatmaps))
    for i in heatmap_sentences:
        if 0 <= i < len(outputs):
            chosen.add(i)
        else:
            log.warning("no heatmap for test sentence %d: the test set has %d", i, len(outputs))
    for i in sorted(chosen):
        t = outputs[i].translation
        if t.attention is not None:
            plot_attention(
                t.attention,
                t.source_labels,
                t.target_labels,
                out / "attention" / f"test_{i:05d}.png",
                title=f"test sentence {i}",
            )
    update_metrics_file(out / "metrics.json", {**results.metrics, **results.details})


def update_metrics_file(path: Path, values: dict) -> None:
    """Merge `values` into a run's metrics.json (written atomically: never half a file)."""
    previous = json.loads(path.read_text()) if path.exists() else {}
    write_text(path, json.dumps({**previous, **values}, indent=2) + "\n")
