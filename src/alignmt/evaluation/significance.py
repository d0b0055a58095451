"""Is system A's score different from baseline B's by more than chance? Paired tests over the
same test sentences: paired bootstrap resampling (Koehn 2004) and approximate randomisation
(Riezler and Maxwell 2005), as sacrebleu defines them.

Both resample sacrebleu's per-sentence sufficient statistics with sacrebleu's draws (a seeded
`numpy.random.default_rng`: `choice` for the bootstrap, `integers(2)` for randomisation, the
same draws for every metric), so a seed gives sacrebleu's resamples. One departure: a
resampled difference *as large as* the observed one counts against A (the usual definition,
p = (resamples at least as extreme + 1) / (resamples + 1)), where sacrebleu counts only larger
ones. Ties are not rare: TER's randomised differences are whole edits over one reference
length, and outputs that differ in a single sentence tie at every trial. sacrebleu then
reports p = 1/(n + 1), its smallest, even for two identical systems; here p = 1. Where no
resample ties the observed difference, the two agree exactly.

The hypotheses are scored as everywhere in alignmt.evaluation: detokenised, [UNK] as one token,
against one or more references.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from alignmt.config import instantiate
from alignmt.data.corpus import ParallelText, read_lines
from alignmt.evaluation.bleu import Streams, check_parallel, scoring_text
from alignmt.evaluation.metrics import sacrebleu_metric

METHODS = ("bootstrap", "randomisation")
DEFAULT_SAMPLES = {"bootstrap": 1000, "randomisation": 10000}  # sacrebleu's defaults
DEFAULT_SEED = 12345  # sacrebleu's default (SACREBLEU_SEED)


@dataclass(frozen=True)
class PairedResult:
    """One metric's comparison of system A with baseline B."""

    metric: str  # bleu, chrf or ter (lower TER is better)
    method: str  # bootstrap or randomisation
    score_a: float
    score_b: float
    p_value: float  # two-sided: a difference this large (either way) by chance
    samples: int  # bootstrap resamples or randomisation trials
    seed: int

    @property
    def difference(self) -> float:
        return self.score_a - self.score_b


def paired_significance(
    hypotheses_a: Sequence[str],
    hypotheses_b: Sequence[str],
    references: Sequence[str],
    method: str = "bootstrap",
    n: int | None = None,
    seed: int = DEFAULT_SEED,
    metrics: Sequence[str] = ("bleu", "chrf"),
    extra_references: Streams = (),
    tokenize: str = "13a",
) -> dict[str, PairedResult]:
    """Each metric's scores of A and B and the p-value of their difference, by `method`
    ("bootstrap" or "randomisation") with `n` resamples or trials (default: sacrebleu's,
    1000 and 10000). `extra_references`: further reference sets, one line per sentence."""
    if method not in METHODS:
        raise ValueError(f"unknown significance method {method!r}; expected one of {METHODS}")
    n = n or DEFAULT_SAMPLES[method]
    streams = check_parallel(list(hypotheses_a), list(references), extra_references)
    check_parallel(list(hypotheses_b), list(references))
    a = scoring_text(list(hypotheses_a), streams, tokenize)
    b = scoring_text(list(hypotheses_b), streams, tokenize)
    rng = np.random.default_rng(seed)
    if method == "bootstrap":
        draws = rng.choice(len(a), size=(n, len(a)), replace=True)
    else:
        draws = rng.integers(2, size=(n, len(a)), dtype=bool)
    results = {}
    for name in metrics:
        metric = sacrebleu_metric(name, tokenize)
        stats_a = metric._extract_corpus_statistics(a, streams)
        stats_b = metric._extract_corpus_statistics(b, streams)
        score_a = metric._aggregate_and_compute(stats_a).score
        score_b = metric._aggregate_and_compute(stats_b).score
        test = _bootstrap if method == "bootstrap" else _randomisation
        samples = test(metric, stats_a, stats_b, draws)
        p = _p_value(samples, abs(score_a - score_b))
        results[name] = PairedResult(name, method, score_a, score_b, p, n, seed)
    return results


def _bootstrap(metric, stats_a, stats_b, draws: np.ndarray) -> np.ndarray:
    """The resampled differences |A* - B*|, centred on their mean: their spread under the
    hypothesis of no difference (Koehn's test, as Moses and sacrebleu run it)."""
    stats_a = np.asarray(stats_a, dtype=np.float32)
    stats_b = np.asarray(stats_b, dtype=np.float32)
    score = metric._compute_score_from_stats
    differences = np.array(
        [abs(score(stats_a[i].sum(0)).score - score(stats_b[i].sum(0)).score) for i in draws]
    )
    return differences - differences.mean()


def _randomisation(metric, stats_a, stats_b, draws: np.ndarray) -> np.ndarray:
    """|A' - B'| for pseudo-systems that swap each sentence's outputs where a trial says so."""
    stats_a, stats_b = np.asarray(stats_a), np.asarray(stats_b)
    swapped_a = draws @ stats_b + ~draws @ stats_a
    swapped_b = ~draws @ stats_b + draws @ stats_a
    score = metric._aggregate_and_compute
    return np.array(
        [
            abs(score(x[None]).score - score(y[None]).score)
            for x, y in zip(swapped_a, swapped_b, strict=True)
        ]
    )


def _p_value(samples: np.ndarray, observed: float) -> float:
    """(resamples at least as extreme + 1) / (resamples + 1)."""
    return (int(np.sum(samples >= observed)) + 1) / (len(samples) + 1)


def baseline_hypotheses(baseline: str | Path, sentences: int) -> tuple[Path, list[str]]:
    """A baseline's test hypotheses: a run directory's hypotheses.txt, or a file of them
    (one line per test sentence, in test order)."""
    path = Path(baseline).expanduser()
    if path.is_dir():
        path = path / "hypotheses.txt"
    if not path.is_file():
        raise FileNotFoundError(
            f"baseline={baseline}: no hypotheses file {path} (a run directory that was "
            "tested, or a file with one translation per test sentence)"
        )
    lines = read_lines(path)
    if len(lines) != sentences:
        raise ValueError(
            f"baseline={baseline}: {path} has {len(lines)} lines, the test set {sentences} "
            "sentences; the baseline must be decoded on the same test set"
        )
    return path, lines


def baseline_comparison(
    hypotheses: Sequence[str],
    baseline: str | Path,
    text: ParallelText,
    methods: Sequence[str] = METHODS,
    metrics: Sequence[str] = ("bleu", "chrf"),
    samples: Mapping[str, int] | None = None,
    seed: int = DEFAULT_SEED,
) -> dict:
    """metrics.json entries comparing `hypotheses` with a baseline on the test `text`:
    `test/<metric>_baseline`, `test/<metric>_difference` (this minus the baseline) and
    `test/<metric>_p_<method>` for every method, and what they were computed with."""
    path, base = baseline_hypotheses(baseline, len(text))
    entries: dict = {}
    for method in methods:
        n = (samples or {}).get(method) or DEFAULT_SAMPLES[method]
        compared = paired_significance(
            hypotheses,
            base,
            text.targets,
            method,
            n,
            seed,
            metrics,
            text.extra_references,
        )
        for name, result in compared.items():
            entries[f"test/{name}_baseline"] = result.score_b
            entries[f"test/{name}_difference"] = result.difference
            entries[f"test/{name}_p_{method}"] = result.p_value
        entries[f"significance_{method}"] = f"n:{n}|seed:{seed}"
    entries["baseline"] = str(path)
    entries["significance_note"] = SIGNIFICANCE_NOTE
    return entries


SIGNIFICANCE_NOTE = (
    "paired, two-sided, against the baseline's hypotheses of the same test set: sacrebleu's "
    "paired bootstrap resampling and approximate randomisation, counting resampled "
    "differences at least as large as the observed one (p = 1 for identical outputs)"
)


def references_of_run(run_dir: str | Path) -> tuple[list[str], list[list[str]]]:
    """A run's test references (first set, further sets), from the corpus its config.yaml
    names: what `paired_significance` needs to compare two runs' hypotheses.txt."""
    config = OmegaConf.load(Path(run_dir) / "config.yaml")
    text = instantiate(config.data.corpus).load("test")
    return list(text.targets), [list(refs) for refs in text.extra_references]
