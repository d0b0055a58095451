"""Run directories into one pandas table: what each run varied, its seed, its metrics.

What a run varied is read from its Hydra overrides (`.hydra/overrides.yaml`); runs made
through the compose API have none, and then the differences between the runs' resolved
`config.yaml` files stand in for them. Paths that belong to one run (its directory, caches,
loggers' folders, Hydra's own settings) are never a difference between runs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

CONFIG_FILE = "config.yaml"
EVALUATE_FILE = "evaluate.yaml"  # an evaluation run's own settings (decoding, checkpoint)
# What of an evaluation's settings describes the run; its trainer is only how it decoded.
EVALUATION_KEYS = ("ckpt", "decoding", "unk_replace", "unk_dictionary")
OVERRIDES_FILE = Path(".hydra") / "overrides.yaml"
SEED = "seed"
DEFAULT = "(default)"  # a setting a run left as its config had it
RUN_SPECIFIC_NAMES = {"run_dir", "ckpt_path", "cache_dir", "save_dir", "dirpath", "out_dir"}
RUN_SPECIFIC_NAMES |= {"default_root_dir", "group", "name"}
METRIC_PATTERNS = (
    "test/bleu",
    "test/chrf",
    "test/bleu_len_*",
    "test/bleu_no_unk",
    "test/aer",
    "test/exposure/*",
    "test/ppl",
    "val/best_bleu",
)


@dataclass
class Run:
    path: Path
    config: dict  # the resolved config (and an evaluation's settings), flattened: "a.b" -> value
    overrides: dict | None  # Hydra overrides, "key" -> "value"; None for a run without .hydra/
    metrics: dict = field(default_factory=dict)  # metrics.json; empty for a failed run

    @property
    def status(self) -> str:
        return "ok" if self.metrics else "failed"

    @property
    def is_evaluation(self) -> bool:
        return (self.path / EVALUATE_FILE).is_file()

    @property
    def seed(self):
        return self.config.get(SEED)


def natural_key(path: Path) -> list:
    """Sort `sweep/2` before `sweep/10`."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(path))]


def find_runs(paths: list[Path]) -> list[Path]:
    """Every directory at or below `paths` that holds a `config.yaml` (Hydra's copy under
    `.hydra/` excepted), in natural order."""
    runs = set()
    for path in map(Path, paths):
        if (path / CONFIG_FILE).is_file():
            runs.add(path)
        runs.update(p.parent for p in path.rglob(CONFIG_FILE) if p.parent.name != ".hydra")
    return sorted(runs, key=natural_key)


def flatten(node, prefix: str = "") -> dict:
    """Nested dicts as dotted keys; lists stay whole (as JSON text, so they compare)."""
    if not isinstance(node, dict):
        return {prefix: json.dumps(node) if isinstance(node, list) else node}
    flat = {}
    for key, value in node.items():
        flat.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def parse_overrides(lines: list[str]) -> dict:
    """Hydra override strings as key -> value: `+a=1` sets `a`, `~a` removes it."""
    parsed = {}
    for line in lines:
        key, _, value = str(line).partition("=")
        if key.startswith("~"):
            key, value = key[1:], "(removed)"
        parsed[key.lstrip("+")] = value
    return parsed


def _read_metrics(path: Path) -> dict:
    if not (path / "metrics.json").is_file():
        return {}
    try:
        return json.loads((path / "metrics.json").read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path / 'metrics.json'}: line {e.lineno}: {e.msg}") from None


def load_run(path: Path) -> Run:
    """A run directory. An evaluation's decoding settings (evaluate.yaml) replace its training
    config's; `ckpt` is the checkpoint a run tested (a training run's best)."""
    try:
        config = OmegaConf.to_container(OmegaConf.load(path / CONFIG_FILE))
        if (path / EVALUATE_FILE).is_file():
            evaluation = OmegaConf.to_container(OmegaConf.load(path / EVALUATE_FILE))
            config.update(
                {k: evaluation[k] for k in EVALUATION_KEYS if evaluation.get(k) is not None}
            )
    except Exception as e:
        raise ValueError(f"{path / CONFIG_FILE}: not a readable run config ({e})") from None
    overrides = None
    if (path / OVERRIDES_FILE).is_file():
        overrides = parse_overrides(OmegaConf.to_container(OmegaConf.load(path / OVERRIDES_FILE)))
    metrics = _read_metrics(path)
    config.setdefault("ckpt", metrics.get("best_checkpoint"))
    return Run(path, flatten(config), overrides, metrics)


def run_specific(key: str, value, run: Run) -> bool:
    """Settings that name one run's own places, or Hydra's: never a difference between runs."""
    if key.startswith("hydra.") or key.split(".")[-1] in RUN_SPECIFIC_NAMES:
        return True
    own = [str(run.path), str(run.path.resolve()), str(run.config.get("run_dir"))]
    return isinstance(value, str) and any(place in value for place in own)


def varied_settings(runs: list[Run]) -> list[dict]:
    """Per run, the settings whose values are not the same in every run: from the Hydra
    overrides where every run has them and all are training runs or all evaluations, from
    the resolved configs otherwise (a node whose class differs is one setting,
    `decoding=BeamSearch`, with only those of its keys that vary among runs of the class)."""
    same_kind = len({run.is_evaluation for run in runs}) == 1
    if same_kind and all(run.overrides is not None for run in runs):
        settings = [run.overrides for run in runs]
    else:
        settings = [run.config for run in runs]
    settings = [
        {k: v for k, v in s.items() if not run_specific(k, v, run)}
        for s, run in zip(settings, runs, strict=True)
    ]
    keys = list(dict.fromkeys(k for s in settings for k in s))
    varied = [k for k in keys if len(_distinct(settings, [k])) > 1]
    targets = [k for k in varied if k.endswith("._target_")]
    for target in targets:
        node = target.removesuffix("_target_")
        varied = [
            k
            for k in varied
            if k == target
            or not k.startswith(node)
            or len(_distinct(settings, [target, k])) > len(_distinct(settings, [target]))
        ]
    names = {k: k.removesuffix("._target_") for k in varied}
    return [{names[k]: short(s.get(k, DEFAULT)) for k in varied} for s in settings]


def _distinct(settings: list[dict], keys: list[str]) -> set[str]:
    """The distinct combinations of `keys` among the runs' settings."""
    return {json.dumps([s.get(k, DEFAULT) for k in keys], default=str) for s in settings}


def short(value):
    """`alignmt.models.attention.DotAttention` -> `DotAttention`: class paths by their name."""
    if isinstance(value, str) and re.fullmatch(r"(alignmt|torch|pytorch_lightning)(\.\w+)+", value):
        return value.rsplit(".", 1)[-1]
    return value


def metric_columns(runs: list[Run], patterns=METRIC_PATTERNS) -> list[str]:
    """The scalar metrics the runs report, in the order of `patterns` (buckets by length)."""
    present = list(
        dict.fromkeys(k for run in runs for k, v in run.metrics.items() if _is_number(v))
    )
    columns = []
    for pattern in patterns:
        matches = [k for k in present if fnmatch(k, pattern) and k not in columns]
        columns += sorted(matches, key=lambda k: [int(n) for n in re.findall(r"\d+", k)] or [0])
    return columns


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def runs_frame(runs: list[Run], metrics: list[str], keys: list[str] | None = None) -> pd.DataFrame:
    """One row per run: `run`, `status`, the settings (the varied ones, or `keys` read from
    the configs), `seed`, then `metrics` (NaN where a run has none)."""
    if keys is None:
        settings = varied_settings(runs)
    else:
        settings = [{k: short(run.config.get(k)) for k in keys} for run in runs]
    rows = []
    for run, setting in zip(runs, settings, strict=True):
        row = {"run": str(run.path), "status": run.status, **setting}
        row.setdefault(SEED, run.seed)
        row.update({m: run.metrics.get(m) for m in metrics})
        rows.append(row)
    frame = pd.DataFrame(rows)
    frame[metrics] = frame[metrics].apply(pd.to_numeric, errors="coerce")
    return frame


def setting_columns(frame: pd.DataFrame, metrics: list[str]) -> list[str]:
    return [c for c in frame.columns if c not in {"run", "status", SEED, *metrics}]


def summarise(frame: pd.DataFrame, by: list[str], metrics: list[str]) -> pd.DataFrame:
    """One row per combination of `by` (seeds merged): `runs` ("3/3", "2/3 failed"), `seeds`,
    and per metric its mean, `std` (over seeds, n-1) and `n` over the runs that finished."""
    keyed = frame.assign(**{c: frame[c].astype(str) for c in by})
    groups = keyed.groupby(by or (lambda _: "all"), sort=False, dropna=False)
    ok = keyed[keyed["status"] == "ok"]
    stats = ok.groupby(by or (lambda _: "all"), sort=False, dropna=False)[metrics].agg(
        ["mean", "std", "count"]
    )
    stats.columns = [
        m if s == "mean" else f"{m} {'n' if s == 'count' else s}" for m, s in stats.columns
    ]
    summary = groups.agg(
        runs=(
            "status",
            lambda s: f"{(s == 'ok').sum()}/{len(s)}" + ("" if (s == "ok").all() else " failed"),
        ),
        seeds=(SEED, lambda s: ",".join(map(str, s))),
        members=("run", list),
    )
    summary = summary.join(stats).reset_index()
    if not by:
        summary = summary.drop(columns="index")
    return summary
