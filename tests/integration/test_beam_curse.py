"""The beam-search curse study end to end: alignmt-evaluate's sweep over beam sizes and
rankings, then its figure and table."""

import csv
import json
import subprocess
import sys

import pytest

from alignmt.evaluate import evaluate
from alignmt.evaluation.search import SEARCH_CSV, read_outcomes
from alignmt.studies import beam_curse
from tests.conftest import compose_config


def test_the_sweep_measures_every_cell_and_the_script_draws_the_curves(trained_run, tmp_path):
    _, trained = trained_run
    sweep_dir = tmp_path / "sweep"
    command = [
        sys.executable,
        "-m",
        "alignmt.evaluate",
        f"ckpt={trained['best_checkpoint']}",
        "sweep=beam_curse",
        "decoding.beam_size=1,3",  # the command line narrows the sweep's own lists
        "decoding.length_penalty=0.6",
        "decoding.min_length=1",  # a 30-step model's most probable output is the empty one
        f"hydra.sweep.dir={sweep_dir}",
        "trainer.enable_progress_bar=false",
    ]
    subprocess.run(command, capture_output=True, text=True, check=True)
    runs = sorted(p.parent for p in sweep_dir.glob("*/metrics.json"))
    assert len(runs) == 2
    for run in runs:
        metrics = json.loads((run / "metrics.json").read_text())
        for key in ("search_error_rate", "truncated_share", "empty_share"):
            assert 0.0 <= metrics[f"test/search/{key}"] <= 1.0
        assert metrics["test/length_ratio"] > 0 and metrics["test/search/empty_share"] == 0
        hypotheses = (run / "hypotheses.txt").read_text().splitlines()
        outcomes = read_outcomes(run / SEARCH_CSV)
        assert len(outcomes) == len(hypotheses) == metrics["test_sentences"]
        assert [o.output_words == 0 for o in outcomes] == [h == "" for h in hypotheses]

    beam_curse.main([str(sweep_dir)])
    assert (sweep_dir / "beam_curse.png").stat().st_size > 0
    with (sweep_dir / "beam_curse.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["ranking"], r["beam"]) for r in rows] == [("GNMT lp, alpha=0.6", b) for b in "13"]
    assert rows[0]["higher score than the smaller beam"] == ""  # nothing smaller to compare
    assert 0.0 <= float(rows[1]["higher score than the smaller beam"]) <= 1.0
    assert "| ranking | beam | BLEU |" in (sweep_dir / "beam_curse.md").read_text()


def test_rankings_are_named_by_their_penalties():
    assert beam_curse.ranking_name(0.0, 0.0) == "log P"
    assert beam_curse.ranking_name(1.0, 0.0) == "length normalised (GNMT lp, alpha=1)"
    assert beam_curse.ranking_name(0.6, 0.2) == "GNMT lp, alpha=0.6, beta=0.2"


def test_search_scores_need_a_ranking_score_and_prefix_dependence_runs(trained_run, tmp_path):
    _, trained = trained_run
    ckpt = trained["best_checkpoint"]
    greedy = compose_config(
        "evaluate", [f"ckpt={ckpt}", f"run_dir={tmp_path}", "search_scores=true"]
    )
    with pytest.raises(ValueError, match="decoding=beam"):
        evaluate(greedy)
    probe = compose_config(
        "evaluate", [f"ckpt={ckpt}", f"run_dir={tmp_path}", "prefix_dependence=true", "heatmaps=0"]
    )
    metrics = evaluate(probe)
    assert metrics["test/prefix_dependence/prefix_positions"] > 0
    assert 0.0 <= metrics["test/prefix_dependence/prefix_tv"] <= 1.0
    assert metrics["test/prefix_dependence/source_kl"] >= 0.0


def test_the_table_gives_shares_in_per_cent_so_one_sentence_in_a_thousand_shows():
    row = {"ranking": "log P", "beam": 5, "BLEU": 92.604, "length ratio": 0.96444}
    row |= {"empty": 0.0, "search errors": 1 / 1800, "higher score than the smaller beam": None}
    assert beam_curse.formatted([row]) == [
        {
            "ranking": "log P",
            "beam": "5",
            "BLEU": "92.60",
            "length ratio": "0.964",
            "empty": "0.0%",
            "search errors": "0.1%",
            "higher score than the smaller beam": "-",
        }
    ]
