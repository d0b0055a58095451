"""Sweeps: Optuna trials, a failing job that does not stop the others, experiment configs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from alignmt.config import instantiate
from alignmt.report import collect, find_runs, report
from tests.conftest import TINY_DATA, TINY_MODEL, compose_config

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    *TINY_DATA,
    *TINY_MODEL,
    "trainer.max_steps=2",
    "trainer.val_check_interval=2",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "callbacks.result_files.heatmaps=0",
    "data.corpus.test_per_bucket=1",
    "data.corpus.valid_per_bucket=1",
]


def sweep(cache_dir, sweep_dir, *overrides):
    command = [
        sys.executable,
        "-m",
        "alignmt.train",
        *overrides,
        *TINY,
        f"data.corpus.cache_dir={cache_dir}",
        f"hydra.sweep.dir={sweep_dir}",
    ]
    return subprocess.run(command, capture_output=True, text=True, check=True)


def test_optuna_sweeper_runs_trials_and_reports_the_best(cache_dir, tmp_path):
    sweep(cache_dir, tmp_path, "sweep=optuna", "hydra.sweeper.n_trials=2")
    runs = find_runs([tmp_path])
    assert len(runs) == 2
    for run in runs:
        metrics = json.loads((run / "metrics.json").read_text())
        assert "val/best_bleu" in metrics
    assert "best_value" in (tmp_path / "optimization_results.yaml").read_text()


def test_a_failing_job_is_recorded_and_the_sweep_goes_on(cache_dir, tmp_path):
    sweep(cache_dir, tmp_path, "-m", "optim.lr=-1,0.001")
    runs = find_runs([tmp_path])
    assert len(runs) == 2
    rows = {row["run"]: row for row in collect(runs, ["optim.lr"], ["test/bleu"])}
    failed, ok = rows[str(tmp_path / "0")], rows[str(tmp_path / "1")]
    assert (
        failed["status"] == "failed"
        and "Invalid learning rate" in (tmp_path / "0" / "error.txt").read_text()
    )
    assert ok["status"] == "ok" and ok["test/bleu"] is not None


EXPERIMENTS = sorted(
    str(p.relative_to(ROOT / "experiments").with_suffix(""))
    for p in (ROOT / "experiments").rglob("*.yaml")
    if not p.name.startswith("_")  # shared pieces, included by the experiments
)
SWEEPS = sorted(p.stem for p in (ROOT / "sweeps").glob("*.yaml"))


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_config_composes_and_builds(name):
    cfg = compose_config("train", [f"experiment={name}", "run_dir=unused"])
    model = instantiate(cfg.model, src_vocab_size=50, tgt_vocab_size=50)
    task = instantiate(cfg.task, _partial_=True)(
        model=model, optimizer=instantiate(cfg.optim), evaluator=None
    )
    task.configure_optimizers()
    instantiate(cfg.data, seed=cfg.seed)  # corpora load their data only when set up


@pytest.mark.parametrize("name", [s for s in SWEEPS if s != "beam_size"])
def test_every_training_sweep_composes(name):
    cfg = compose_config("train", [f"sweep={name}", "run_dir=unused"])
    assert cfg.model._target_.startswith("alignmt.models.")


def test_beam_size_sweep_over_an_evaluation(trained_run, tmp_path):
    _, metrics = trained_run
    subprocess.run(
        [
            sys.executable,
            "-m",
            "alignmt.evaluate",
            f"ckpt={metrics['best_checkpoint']}",
            "sweep=beam_size",
            "decoding.beam_size=1,3",  # the command line narrows the sweep
            "decoding.length_penalty=0.0",
            "heatmaps=0",
            "trainer.enable_progress_bar=false",
            f"hydra.sweep.dir={tmp_path}",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = collect(find_runs([tmp_path]), ["decoding.beam_size"], ["test/bleu"])
    assert sorted(row["decoding.beam_size"] for row in rows) == [1, 3]
    assert all(row["status"] == "ok" for row in rows)
    # the report's rows are what the sweep varied, and it draws BLEU against the beam size
    table = report([tmp_path], tmp_path / "report")
    assert list(table.columns[:2]) == ["decoding.beam_size", "runs"]
    assert sorted(table["decoding.beam_size"]) == ["1", "3"]
    page = (tmp_path / "report" / "report.html").read_text()
    figures = json.loads(page.split('id="figures">', 1)[1].split("</script>", 1)[0])
    (curve,) = figures["beam_size"]["data"]
    assert curve["x"] == [1.0, 3.0]
    assert curve["y"] == [
        pytest.approx(r["test/bleu"]) for r in sorted(rows, key=lambda r: r["decoding.beam_size"])
    ]
