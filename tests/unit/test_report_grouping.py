"""alignmt-report's rows: what the runs' overrides vary, seeds merged into mean ± std."""

import json
import statistics

import pytest
import yaml

from alignmt.report import collect, find_runs, report

SCHEDULES = {"teacher_forcing": 40.0, "linear": 42.0, "exponential": 44.0, "inverse_sigmoid": 46.0}
SEED_OFFSETS = {1: -1.0, 2: 0.0, 3: 1.5}
TARGETS = {
    "teacher_forcing": "TeacherForcing",
    "linear": "LinearSchedule",
    "exponential": "ExponentialSchedule",
    "inverse_sigmoid": "InverseSigmoidSchedule",
}


def write_run(run_dir, config: dict, metrics: dict | None, overrides: list[str] | None = None):
    """A run directory as alignmt-train leaves it: config.yaml, metrics.json (not for a failed
    run), and Hydra's .hydra/overrides.yaml for a run made by the command line."""
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"run_dir": str(run_dir), **config}))
    if metrics is not None:
        (run_dir / "metrics.json").write_text(json.dumps(metrics))
    if overrides is not None:
        (run_dir / ".hydra").mkdir()
        (run_dir / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
        (run_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))


def run_config(schedule: str, seed: int, run_dir) -> dict:
    return {
        "seed": seed,
        "data": {"corpus": {"cache_dir": "/cache", "train_size": 400}},
        "sampling": {"_target_": f"alignmt.sampling.{TARGETS[schedule]}"}
        | ({} if schedule == "teacher_forcing" else {"k": 1000, "floor": 0.0}),
        "callbacks": {"best_checkpoint": {"dirpath": f"{run_dir}/checkpoints"}},
        "logger": {"csv": {"save_dir": str(run_dir)}},
    }


def bleu(schedule: str, seed: int) -> float:
    return SCHEDULES[schedule] + SEED_OFFSETS[seed]


@pytest.fixture
def scheduled_sampling_sweep(tmp_path):
    """`alignmt-train sweep=scheduled_sampling`: 4 schedules × 3 seeds, jobs 0..11."""
    sweep = tmp_path / "multirun"
    job = 0
    for schedule in SCHEDULES:
        for seed in SEED_OFFSETS:
            run_dir = sweep / str(job)
            overrides = [
                "sweep=scheduled_sampling",
                "trainer.max_steps=2",
                f"sampling={schedule}",
                f"seed={seed}",
            ]
            metrics = {"test/bleu": bleu(schedule, seed), "test/chrf": 60.0 + seed}
            write_run(run_dir, run_config(schedule, seed, run_dir), metrics, overrides)
            job += 1
    return sweep


def test_a_sweep_of_four_schedules_and_three_seeds_gives_four_rows(
    scheduled_sampling_sweep, tmp_path
):
    table = report(
        [scheduled_sampling_sweep], tmp_path / "out", write_html=False, bootstrap_samples=0
    )
    assert list(table["sampling"]) == list(SCHEDULES)  # the varied override, in job order
    assert "seed" not in table.columns and "sweep" not in table.columns  # merged / not varied
    offsets = list(SEED_OFFSETS.values())
    for _, row in table.iterrows():
        assert row["runs"] == "3/3" and row["seeds"] == "1,2,3"
        assert row["test/bleu"] == pytest.approx(
            SCHEDULES[row["sampling"]] + statistics.mean(offsets)
        )
        assert row["test/bleu std"] == pytest.approx(statistics.stdev(offsets))
        assert row["test/bleu n"] == 3
    markdown = (tmp_path / "out" / "report.md").read_text().splitlines()
    assert len(markdown) == 2 + 4
    assert "| linear | 3/3 | 42.17 ± 1.26 |" in markdown[3]
    per_run = (tmp_path / "out" / "runs.csv").read_text().splitlines()
    assert len(per_run) == 1 + 12


def test_a_failed_run_is_counted_in_its_row(scheduled_sampling_sweep, tmp_path):
    (scheduled_sampling_sweep / "4" / "metrics.json").unlink()  # linear, seed 2
    table = report(
        [scheduled_sampling_sweep], tmp_path / "out", write_html=False, bootstrap_samples=0
    )
    linear = table.set_index("sampling").loc["linear"]
    assert linear["runs"] == "2/3 failed"
    assert linear["test/bleu"] == pytest.approx((bleu("linear", 1) + bleu("linear", 3)) / 2)
    assert linear["test/bleu n"] == 2


def test_runs_without_hydra_overrides_are_compared_by_their_configs(tmp_path):
    """Runs of the compose API: the varied node is found in config.yaml, named by its class
    (the keys only one class has are no setting of their own); each run's own paths (run_dir,
    checkpoint and logger folders) are no difference between runs."""
    sweep = tmp_path / "composed"
    for schedule in ("teacher_forcing", "linear"):
        for seed in (1, 2):
            run_dir = sweep / f"{schedule}-{seed}"
            write_run(
                run_dir, run_config(schedule, seed, run_dir), {"test/bleu": bleu(schedule, seed)}
            )
    table = report([sweep], tmp_path / "out", write_html=False, bootstrap_samples=0)
    assert list(table.columns[:3]) == ["sampling", "runs", "seeds"]
    assert sorted(table["sampling"]) == ["LinearSchedule", "TeacherForcing"]
    assert list(table["runs"]) == ["2/2", "2/2"]


def test_chosen_keys_group_as_asked_and_collect_lists_every_run(scheduled_sampling_sweep, tmp_path):
    rows = collect(find_runs([scheduled_sampling_sweep]), ["sampling._target_"], ["test/bleu"])
    assert len(rows) == 12 and rows[0]["sampling._target_"] == "TeacherForcing"
    assert [r["run"].rsplit("/", 1)[1] for r in rows] == [str(i) for i in range(12)]  # 2 before 10
    table = report(
        [scheduled_sampling_sweep],
        tmp_path / "out",
        keys=["data.corpus.train_size"],
        write_html=False,
    )
    assert len(table) == 1 and table["runs"].iloc[0] == "12/12"  # the same train_size everywhere


def test_no_runs_is_an_error_naming_the_path(tmp_path):
    with pytest.raises(SystemExit, match=str(tmp_path)):
        report([tmp_path], tmp_path / "out")


def test_a_key_that_varies_within_one_class_stays_a_setting(tmp_path):
    sweep = tmp_path / "composed"
    for schedule, k in (("teacher_forcing", None), ("linear", 1000), ("linear", 2000)):
        run_dir = sweep / f"{schedule}-{k}"
        config = run_config(schedule, 1, run_dir)
        if k is not None:
            config["sampling"]["k"] = k
        write_run(run_dir, config, {"test/bleu": bleu(schedule, 1)})
    table = report([sweep], tmp_path / "out", write_html=False, bootstrap_samples=0)
    assert list(table.columns[:2]) == ["sampling", "sampling.k"]
    assert list(zip(table["sampling"], table["sampling.k"], strict=True)) == [
        ("LinearSchedule", "1000"),
        ("LinearSchedule", "2000"),
        ("TeacherForcing", "(default)"),
    ]


def test_a_training_run_and_its_beam_evaluation_differ_in_decoding_only(tmp_path):
    """Their overrides have nothing in common (training sizes against a checkpoint and a
    search), so they are compared by config: the evaluation's config.yaml is its checkpoint's
    training config, with evaluate.yaml's decoding; `ckpt` is the checkpoint each tested."""
    train_dir, beam_dir = tmp_path / "train", tmp_path / "evaluate"
    config = run_config("teacher_forcing", 1, train_dir)
    greedy = {"_target_": "alignmt.decoding.GreedySearch", "max_length_ratio": 2.0}
    ckpt = f"{train_dir}/checkpoints/best-step000010.ckpt"
    write_run(
        train_dir,
        {**config, "decoding": greedy},
        {"test/bleu": 30.0, "best_checkpoint": ckpt},
        ["trainer.max_steps=10", "data.corpus.train_size=400"],
    )
    write_run(
        beam_dir,
        {**config, "run_dir": str(train_dir), "decoding": greedy},
        {"test/bleu": 31.0, "checkpoint": ckpt},
        [f"ckpt={ckpt}", "decoding=beam", "decoding.beam_size=5"],
    )
    beam = {"_target_": "alignmt.decoding.BeamSearch", "beam_size": 5, "length_penalty": 0.0}
    evaluation = {
        "ckpt": ckpt,
        "decoding": beam,
        "trainer": {"devices": 2},
        "run_dir": str(beam_dir),
    }
    (beam_dir / "evaluate.yaml").write_text(yaml.safe_dump(evaluation))
    table = report([train_dir, beam_dir], tmp_path / "out", write_html=False, bootstrap_samples=0)
    assert list(table.columns[:2]) == ["decoding", "runs"]
    assert list(table["decoding"]) == ["BeamSearch", "GreedySearch"]  # evaluate/ before train/
