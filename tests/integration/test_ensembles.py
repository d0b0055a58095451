"""Ensembles and checkpoint averaging of tiny trained runs, through alignmt-evaluate,
alignmt-translate and alignmt-average."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from alignmt.average import average_checkpoints, recent_checkpoints
from alignmt.build import restore
from alignmt.evaluate import evaluate
from alignmt.models.ensemble import Ensemble
from alignmt.special_tokens import PAD_ID
from alignmt.train import train
from alignmt.translate import translate_lines
from tests.conftest import compose_config, tiny_train_config

SEARCHES = {
    "greedy": ["decoding=greedy"],
    # A 30-step model's most probable output is the empty one; min_length gives words.
    "beam": ["decoding=beam", "decoding.beam_size=3", "decoding.min_length=1"],
}
LINES = ["the dog sleeps", "", "every cat sees a dog"]


@pytest.fixture(scope="module")
def second_run(cache_dir, tmp_path_factory):
    """The trained_run's settings with another seed, keeping its two newest step checkpoints."""
    run_dir = tmp_path_factory.mktemp("second") / "run"
    cfg = tiny_train_config(
        cache_dir,
        run_dir,
        "seed=2",
        "trainer.max_steps=30",
        "trainer.val_check_interval=15",
        "callbacks.recent_checkpoints.every_n_train_steps=10",
        "callbacks.recent_checkpoints.save_top_k=2",
    )
    return cfg, train(cfg)


def checkpoints(trained_run, second_run) -> tuple[str, str]:
    return trained_run[1]["best_checkpoint"], second_run[1]["best_checkpoint"]


def evaluate_in(run_dir, ckpt, *overrides) -> dict:
    ckpt = ckpt if isinstance(ckpt, str) else "[" + ",".join(ckpt) + "]"
    base = [f"ckpt={ckpt}", f"run_dir={run_dir}", "heatmaps=1", "trainer.enable_progress_bar=false"]
    return evaluate(compose_config("evaluate", [*base, *overrides]))


def translate(ckpt, *overrides) -> list[str]:
    ckpt = ckpt if isinstance(ckpt, str) else "[" + ",".join(ckpt) + "]"
    return translate_lines(compose_config("translate", [f"ckpt={ckpt}", *overrides]), LINES)


@pytest.mark.parametrize("search", sorted(SEARCHES))
def test_an_ensemble_of_one_checkpoint_translates_as_that_checkpoint(trained_run, search):
    a = trained_run[1]["best_checkpoint"]
    cfg = compose_config("translate", [f"ckpt={a}", *SEARCHES[search]])
    translator = restore(a, cfg.decoding, cfg).translator
    alone = translator.translate(LINES[::2])
    translator.model = Ensemble([translator.model])
    together = translator.translate(LINES[::2])
    for mine, theirs in zip(together, alone, strict=True):
        assert [t.text for t in mine] == [t.text for t in theirs]
        assert [t.score for t in mine] == pytest.approx([t.score for t in theirs], abs=1e-5)
        for x, y in zip(mine, theirs, strict=True):
            assert x.attention == pytest.approx(y.attention, abs=1e-6)


def test_two_copies_of_a_checkpoint_evaluate_as_that_checkpoint_with_p_values_of_one(
    trained_run, tmp_path
):
    """The run was tested with greedy search on the same checkpoint: the same outputs, no
    difference from it as a baseline, and p = 1."""
    cfg, trained = trained_run
    a = trained["best_checkpoint"]
    metrics = evaluate_in(tmp_path, [a, a], f"baseline={cfg.run_dir}")
    assert metrics["checkpoint"] == [a, a]
    for key in ("test/bleu", "test/chrf", "test/ter", "test/rouge1", "test/rougeL"):
        assert metrics[key] == trained[key], key
    assert metrics["test/ppl"] == pytest.approx(trained["test/ppl"], rel=1e-5)
    assert (tmp_path / "hypotheses.txt").read_text() == Path(
        cfg.run_dir, "hypotheses.txt"
    ).read_text()
    for metric in ("bleu", "chrf"):
        assert metrics[f"test/{metric}_difference"] == 0.0
        assert metrics[f"test/{metric}_p_bootstrap"] == 1
        assert metrics[f"test/{metric}_p_randomisation"] == 1


@pytest.mark.parametrize("search", sorted(SEARCHES))
def test_two_copies_of_a_checkpoint_translate_as_that_checkpoint(trained_run, search):
    a = trained_run[1]["best_checkpoint"]
    assert translate([a, a], *SEARCHES[search]) == translate(a, *SEARCHES[search])


def ensemble_perplexity(paths) -> float:
    """By definition: exp of the mean NLL per reference token under the normalised geometric
    mean of the members' teacher-forced distributions."""
    members = [restore(p) for p in paths]
    datamodule = members[0].datamodule
    datamodule.prepare_data()
    nll, tokens = 0.0, 0
    with torch.no_grad():
        for batch in datamodule.test_dataloader():
            log_probs = [
                m.model(batch.src, batch.src_lengths, batch.tgt_in).logits.log_softmax(-1)
                for m in members
            ]
            mean = torch.stack(log_probs).mean(0).log_softmax(-1)
            nll += float(
                F.nll_loss(
                    mean.flatten(0, 1),
                    batch.tgt_out.flatten(),
                    ignore_index=PAD_ID,
                    reduction="sum",
                )
            )
            tokens += int((batch.tgt_out != PAD_ID).sum())
    return math.exp(nll / tokens)


def test_an_ensemble_against_a_baseline_run_has_its_differences_and_p_values(
    trained_run, second_run, tmp_path
):
    cfg, trained = trained_run
    a, b = checkpoints(trained_run, second_run)
    options = ["significance.bootstrap_samples=200", "significance.randomisation_trials=500"]
    metrics = evaluate_in(tmp_path, [a, b], f"baseline={cfg.run_dir}", *options)
    assert metrics["baseline"] == str(Path(cfg.run_dir) / "hypotheses.txt")
    for metric in ("bleu", "chrf"):
        assert metrics[f"test/{metric}_baseline"] == pytest.approx(trained[f"test/{metric}"])
        difference = metrics[f"test/{metric}"] - trained[f"test/{metric}"]
        assert metrics[f"test/{metric}_difference"] == pytest.approx(difference)
        for method, n in (("bootstrap", 200), ("randomisation", 500)):
            assert 1 / (n + 1) <= metrics[f"test/{metric}_p_{method}"] <= 1
    assert metrics["significance_bootstrap"] == "n:200|seed:12345"


@pytest.mark.parametrize("search", sorted(SEARCHES))
def test_an_ensemble_of_two_runs_evaluates_and_translates(
    trained_run, second_run, tmp_path, search
):
    a, b = checkpoints(trained_run, second_run)
    metrics = evaluate_in(tmp_path, [a, b], *SEARCHES[search])
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved == metrics and saved["checkpoint"] == [a, b]
    assert metrics["test/ppl"] == pytest.approx(ensemble_perplexity([a, b]), rel=1e-5)
    hypotheses = (tmp_path / "hypotheses.txt").read_text().splitlines()
    cfg = compose_config("translate", [f"ckpt=[{a},{b}]", *SEARCHES[search]])
    sources = restore([a, b]).datamodule
    sources.prepare_data()
    assert translate_lines(cfg, list(sources.text["test"].sources)) == hypotheses
    assert list((tmp_path / "attention").glob("*.png"))  # the ensemble's attention


def test_an_ensemble_translates_nbest_lists_with_averaged_attention(
    trained_run, second_run, tmp_path
):
    a, b = checkpoints(trained_run, second_run)
    dump = tmp_path / "attention.jsonl"
    lines = translate([a, b], *SEARCHES["beam"], "nbest=2", f"attention_file={dump}")
    assert [line.split(" ||| ")[0] for line in lines] == ["0", "0", "1", "2", "2"]
    for record in map(json.loads, dump.read_text().splitlines()[::2]):
        assert all(sum(row) == pytest.approx(1.0, abs=1e-3) for row in record["weights"])


def test_members_with_other_vocabularies_are_refused_naming_both(trained_run, tmp_path):
    a = trained_run[1]["best_checkpoint"]
    checkpoint = torch.load(a, weights_only=True)
    target = checkpoint["vocabularies"]["target"]
    target[4], target[5] = target[5], target[4]  # two words swap ids
    other = tmp_path / "other.ckpt"
    torch.save(checkpoint, other)
    with pytest.raises(ValueError, match="target vocabularies differ") as error:
        restore([a, str(other)])
    assert a in str(error.value) and str(other) in str(error.value)


def test_a_run_keeps_step_checkpoints_only_when_asked(trained_run, second_run):
    assert not list(Path(trained_run[0].run_dir, "checkpoints").glob("recent-step*"))
    kept = recent_checkpoints(second_run[0].run_dir, 2)
    assert [p.name for p in kept] == ["recent-step000020.ckpt", "recent-step000030.ckpt"]
    assert len(list(kept[0].parent.glob("recent-step*"))) == 2  # step 10's was deleted
    with pytest.raises(ValueError, match="save_top_k=3"):
        recent_checkpoints(second_run[0].run_dir, 3)


def parameters(path) -> dict:
    return torch.load(path, weights_only=True)["state_dict"]


def test_the_average_of_copies_is_the_checkpoint(trained_run):
    a = trained_run[1]["best_checkpoint"]
    averaged = average_checkpoints([a, a, a])["state_dict"]
    original = parameters(a)
    assert averaged.keys() == original.keys()
    assert all(torch.equal(averaged[k], original[k]) for k in original)


def test_the_average_of_a_runs_last_checkpoints_is_their_mean_and_evaluates(second_run, tmp_path):
    run_dir = second_run[0].run_dir
    result = subprocess.run(
        [sys.executable, "-m", "alignmt.average", f"run_dir={run_dir}", "last=2"],
        capture_output=True,
        text=True,
        check=True,
    )
    out = Path(result.stdout.strip())
    assert out == Path(run_dir) / "checkpoints" / "averaged-last2.ckpt"
    saved = torch.load(out, weights_only=True)
    assert [s["global_step"] for s in saved["averaged_from"]] == [20, 30]
    older, newer = (parameters(p) for p in recent_checkpoints(run_dir, 2))
    for key, value in saved["state_dict"].items():
        expected = (older[key].double() + newer[key].double()) / 2
        assert torch.equal(value, expected.to(value.dtype)), key
    assert any(not torch.equal(older[k], newer[k]) for k in older)  # a real average
    metrics = evaluate_in(tmp_path, str(out))
    assert metrics["test_sentences"] == 18 and metrics["checkpoint"] == str(out)


def test_a_baseline_of_another_length_is_refused_before_decoding(trained_run, tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("one line\n")
    with pytest.raises(ValueError, match=r"short.txt has 1 lines, the test set 18"):
        evaluate_in(tmp_path / "run", trained_run[1]["best_checkpoint"], f"baseline={short}")
    assert not (tmp_path / "run" / "metrics.json").exists()
