"""The benchmark scripts run end to end on tiny settings and print their figures.

They are the only way speed is reported, so a broken script would go unnoticed until the day a
GPU (or a quiet machine) is available. No speed is asserted beyond being a positive number;
what the comparison decodes is (matched lengths are exactly the length asked for).
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from tests.conftest import TINY_DATA, TINY_MODEL

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def run_script(name: str, *args: str, timeout: int = 300) -> str:
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / name), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def figure(pattern: str, text: str) -> float:
    match = re.search(pattern, text)
    assert match, f"{pattern!r} not in output:\n{text}"
    return float(match.group(1).replace(",", ""))


def test_gpu_benchmark_prints_its_figures_at_toy_size(tmp_path):
    """benchmarks/gpu.py through the training path on a CPU: every line it prints on a GPU."""
    out = run_script(
        "gpu.py", "--tiny", "--out", str(tmp_path), "--models", "rnnsearch", "rnnencdec",
        "--variants", "eager", "fast", "--device", "cpu",
    )  # fmt: skip
    for model in ("rnnsearch", "rnnencdec"):
        for variant, batching in (
            ("eager", "batch 80"),
            ("fast", "batch 80"),
            ("fast", "tokens 512"),
        ):
            pattern = rf"train  {model}\s+{variant}\s+{batching}\s+(\d+) target tokens/s"
            assert figure(pattern, out) > 0
        assert re.search(rf"check  {model}\s+fast vs eager.*: ok", out), out
        assert figure(rf"speedup {model}\s+fast / eager at batch 80: ([\d.]+)x", out) > 0
        assert figure(rf"best   {model}\s+.* in ([\d.]+) h", out) > 0
    for search in ("greedy", "beam 12"):
        assert figure(rf"decode rnnsearch\s+{search}\s+40 sentences in [\d.]+ s: ([\d.]+)", out) > 0


def test_throughput_prints_training_and_decoding_speed(cache_dir, tmp_path):
    overrides = [f"data.corpus.cache_dir={cache_dir}", *TINY_DATA, *TINY_MODEL]
    out = run_script(
        "throughput.py", *overrides, "--steps", "2", "--warmup", "1", "--decode-sentences", "8"
    )
    assert figure(r"train\s+(\d+) target tokens/s", out) > 0
    assert figure(r"decode\s+([\d.]+) sentences/s", out) > 0
    assert figure(r"peak memory (\d+) MiB", out) > 0


def test_decoding_benchmark_reads_a_trained_checkpoint(trained_run):
    _, metrics = trained_run
    out = run_script(
        "decoding.py",
        "--ckpt",
        metrics["best_checkpoint"],
        "--sentences",
        "8",
        "--batch-sizes",
        "1",
        "4",
        "--beam-size",
        "2",
    )
    for search in ("greedy", "beam 2"):
        for batch_size in (1, 4):
            assert figure(rf"(?m)^{search}\s+{batch_size}\s+([\d.]+)", out) > 0


def tiny_workload(folder: Path) -> Path:
    """The shared workload's layout and kind (a lexicon and adjacent swaps), a few pairs."""
    rng = random.Random(0)
    folder.mkdir(parents=True)
    for split, n in (("train", 120), ("dev", 6), ("test", 8)):
        sources, targets = [], []
        for _ in range(n):
            words = [rng.randrange(30) for _ in range(rng.randint(3, 6))]
            target = [f"t{(7 * w) % 30}" for w in words]
            for i in range(0, len(target) - 1, 2):
                target[i], target[i + 1] = target[i + 1], target[i]
            sources.append(" ".join(f"s{w}" for w in words))
            targets.append(" ".join(target))
        (folder / f"{split}.src").write_text("\n".join(sources) + "\n")
        (folder / f"{split}.trg").write_text("\n".join(targets) + "\n")
    return folder


def test_compare_writes_the_whole_table_from_one_invocation(tmp_path):
    workload, scratch = tiny_workload(tmp_path / "workload"), tmp_path / "scratch"
    tiny = ["data.batch_size=4", "model.embedding_dim=8", "luong:model.hidden_size=12"]
    tiny += [f"rnnsearch:model.{k}_size=6" for k in ("encoder_hidden", "maxout")]
    tiny += ["rnnsearch:model.decoder_hidden_size=12"]
    options = ["--no-peers", "--repeats", "1", "--steps", "3", "--warmup", "1", "--threads", "1"]
    options += ["--length", "5", "--batch-sizes", "4", "--round-steps", "2", "--max-rounds", "1"]
    options += ["--bleu-target", "0", "--extensions", "rnnsearch + neural coverage"]
    options += ["--precisions", "float32", "int8_fp16", "--models", "alignmt-luong"]
    out = run_script("compare.py", str(workload), str(scratch), *options,
                     *(f"--override={o}" for o in tiny), timeout=600)  # fmt: skip
    summary = (scratch / "summary.md").read_text()
    assert summary in out
    for section in ("**Training**", "**Decoding at matched length**", "training extensions"):
        assert section in summary
    assert "**Trained models**" in summary
    assert_rows_fill_headers(summary)
    assert figure(r"\| target tokens/s \| ([\d.,]+) \|", summary) > 0
    assert figure(r"\| rnnsearch \| [\d,]+ \| ([\d.]+) \|", summary) == 1.0  # plain / plain
    runs = [json.loads(line) for line in (scratch / "runs.jsonl").read_text().splitlines()]
    matched = [r for r in runs if r["section"] == "speed" and r["key"] != "train"]
    assert {(r["system"], r["key"]) for r in matched} == {
        (system + precision, f"{search} batch 4")
        for system in ("alignmt-luong",)
        for precision in ("", " int8_fp16")  # float32 has no suffix
        for search in ("greedy", "beam5")
    }
    for r in matched:  # min = max length: every output has exactly that many words
        lines = Path(r["output"]).read_text().splitlines()
        assert len(lines) == 8 and {len(line.split()) for line in lines} == {5}
    trained = [r for r in runs if r["section"] == "trained" and r["key"] not in ("model", "round")]
    assert all(0 <= r["test_bleu"] <= 100 and r["max_length"] == 5 for r in trained)


def test_a_resumed_trained_section_equals_an_uninterrupted_one(tmp_path):
    """Two rounds in one invocation, or one round (with `--repeats 0`: no decoding), then
    `--resume-trained` for the second: the same recorded rounds and the same final weights;
    only the last round's checkpoint stays."""
    import torch

    workload = tiny_workload(tmp_path / "workload")
    options = ["--no-peers", "--repeats", "1", "--threads", "1", "--sections", "trained"]
    options += ["--length", "5", "--batch-sizes", "4", "--round-steps", "2"]
    options += ["--bleu-target", "101", "--models", "alignmt-luong"]
    options += ["--override=data.batch_size=4", "--override=model.embedding_dim=8"]
    options += ["--override=model.hidden_size=12"]

    def invocation(scratch: Path, *extra: str) -> list[dict]:
        """This invocation's records of rounds and models (runs.jsonl is appended to)."""
        runs = scratch / "runs.jsonl"
        before = len(runs.read_text().splitlines()) if runs.exists() else 0
        run_script("compare.py", str(workload), str(scratch), *options, *extra, timeout=600)
        lines = runs.read_text().splitlines()[before:]
        return [r for r in map(json.loads, lines) if r["key"] in ("round", "model")]

    whole = invocation(tmp_path / "whole", "--max-rounds", "2")
    invocation(tmp_path / "resumed", "--max-rounds", "1", "--repeats", "0")  # trains only
    runs = (tmp_path / "resumed" / "runs.jsonl").read_text().splitlines()
    assert {json.loads(line)["key"] for line in runs} == {"round", "model"}
    resumed = invocation(tmp_path / "resumed", "--max-rounds", "2", "--resume-trained")
    assert [(r["key"], r["steps"]) for r in whole] == [("round", 2), ("round", 4), ("model", 4)]
    assert [(r["key"], r["steps"]) for r in resumed] == [("round", 4), ("model", 4)]
    assert resumed[0]["dev_bleu"] == whole[1]["dev_bleu"]
    assert [r["resumed_at"] for r in whole] == [[], [], []]
    assert [r["resumed_at"] for r in resumed] == [[2], [2]]
    # trained already: the model is taken as it is, no training resumed
    again = invocation(tmp_path / "resumed", "--max-rounds", "2", "--resume-trained")
    assert [(r["key"], r["steps"], r["resumed_at"]) for r in again] == [("model", 4, [2])]
    kept = sorted(
        p.name for p in (tmp_path / "resumed" / "trained" / "alignmt-luong").glob("*.ckpt")
    )
    assert kept == ["alignmt-luong-round-4.ckpt"]
    weights = [
        torch.load(r["checkpoint"], weights_only=False)["state_dict"]
        for r in (whole[1], resumed[0])
    ]
    assert weights[0].keys() == weights[1].keys()
    for name in weights[0]:
        torch.testing.assert_close(weights[1][name], weights[0][name], rtol=0, atol=0, msg=name)


FAKE_TRAINING = """
import io, subprocess, sys, time, zipfile
from pathlib import Path

out = Path(sys.argv[1])
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
(out / "child.pid").write_text(str(child.pid))
for step in (2, 4):
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("weights", bytes(range(256)) * 64 * step)
    data = archive.getvalue()
    with open(out / f"ckpt-{step}", "wb") as f:  # half now, the rest (the directory) later
        f.write(data[: len(data) // 2])
        f.flush()
        time.sleep(0.5)
        f.write(data[len(data) // 2 :])
print("saved", flush=True)
time.sleep(600)
"""


def test_background_training_yields_whole_checkpoints_and_stops_its_processes(
    monkeypatch, tmp_path
):
    """A checkpoint is handed over only once completely written; stopping ends the command
    and what it started; a command that ends without the checkpoint asked for is an error
    that shows its log."""
    import zipfile

    import pytest

    monkeypatch.syspath_prepend(str(BENCHMARKS / "peers"))
    import peers

    script = tmp_path / "train.py"
    script.write_text(FAKE_TRAINING)
    command = [sys.executable, str(script), str(tmp_path)]
    log = tmp_path / "train.log"
    with peers.Training(command, log, {}, lambda step: tmp_path / f"ckpt-{step}", 0.05) as run:
        for step in (2, 4):
            with zipfile.ZipFile(run.checkpoint(step)) as archive:
                assert archive.read("weights") == bytes(range(256)) * 64 * step
        child = int((tmp_path / "child.pid").read_text())
    assert run.process.returncode == -9
    status = Path(f"/proc/{child}/status")
    for _ in range(100):  # killed: gone, or a zombie until its new parent reaps it
        if not status.exists() or "State:\tZ" in status.read_text():
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"process {child} outlived the training that started it")
    assert "saved" in log.read_text()

    quitting = [sys.executable, "-c", "print('no checkpoint here')"]
    run = peers.Training(quitting, log, {}, lambda step: tmp_path / "never", 0.05)
    with run, pytest.raises(RuntimeError, match="no checkpoint here"):
        run.checkpoint(2)


def assert_rows_fill_headers(markdown: str) -> None:
    for block in re.findall(r"(?:^\|.*\n)+", markdown, flags=re.M):
        assert len({line.count("|") for line in block.splitlines()}) == 1, block


def test_compare_table_has_a_ratio_column_for_every_alignmt_column(monkeypatch, tmp_path):
    """With peers, each alignmt column (bf16 ones included) gets its ratio to the best peer;
    training rows leave out the decoding-only bf16 columns."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import compare

    log = compare.Log(tmp_path / "runs.jsonl")
    systems = ["alignmt-luong", "alignmt-luong bf16", "onmt"]
    for system, train in (("alignmt-luong", 20.0), ("onmt", 10.0)):
        log.add("speed", system, 0, "train", {"train_tok_per_s": train, "peak_rss_main_mib": 100.0})
    for system, rate in (("alignmt-luong", 6.0), ("alignmt-luong bf16", 9.0), ("onmt", 2.0)):
        log.add("speed", system, 0, "greedy batch 4", {"sent_per_s": rate})
    args = SimpleNamespace(repeats=1, threads=1, sections=["speed"], steps=3, warmup=1, length=5,
                           batch_sizes=[4], batch1_sentences=2, sentences=None,
                           models=["alignmt-luong"], no_decoding=False)  # fmt: skip
    summary = compare.table(log, args, systems)
    assert_rows_fill_headers(summary)
    assert "| target tokens/s | 20.0 | 10.0 | 2.00x |" in summary
    assert "| greedy batch 4: sentences/s (all) | 6.0 | 9.0 | 2.0 | 3.00x | 4.50x |" in summary
    # decoded at bf16 only: the configuration's training column stays
    summary = compare.table(log, args, ["alignmt-luong bf16", "onmt"])
    assert_rows_fill_headers(summary)
    assert "| target tokens/s | 20.0 | 10.0 | 2.00x |" in summary
    assert "| greedy batch 4: sentences/s (all) | 9.0 | 2.0 | 4.50x |" in summary
    # --no-decoding: the training rows alone
    args.no_decoding = True
    summary = compare.table(log, args, ["alignmt-luong", "onmt"])
    assert_rows_fill_headers(summary)
    assert "| target tokens/s | 20.0 | 10.0 | 2.00x |" in summary
    assert "Decoding" not in summary and "greedy" not in summary


def test_trained_table_says_how_each_model_was_trained(monkeypatch, tmp_path):
    """One model per system: its steps, dev BLEU, whether it reached the target and where its
    training was resumed, without medians or ratios; a peer that missed the target says so."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import compare

    log = compare.Log(tmp_path / "runs.jsonl")
    models = {
        "alignmt-luong": {"steps": 2500, "dev_bleu": 92.971, "reached": True, "resumed_at": [500]},
        "joeynmt": {"steps": 5000, "dev_bleu": 48.7625, "reached": False, "resumed_at": []},
    }
    for system, model in models.items():
        log.add("trained", system, 0, "model", {**model, "checkpoint": "x.ckpt"})
    args = SimpleNamespace(repeats=1, threads=2, sections=["trained"], bleu_target=90.0, length=5,
                           batch_sizes=[4], batch1_sentences=2, sentences=None,
                           models=["alignmt-luong"])  # fmt: skip
    summary = compare.table(log, args, ["alignmt-luong", "joeynmt"])
    assert_rows_fill_headers(summary)
    assert "| training steps | 2,500 | 5,000 |  |" in summary
    assert "| dev BLEU (greedy) | 92.97 | 48.76 |  |" in summary
    assert "| reached the target | yes | **no** |  |" in summary
    assert "| resumed at steps | 500 | - |  |" in summary


def test_precision_layers_reports_each_decoder_matrix_in_int8_alone(trained_run):
    """float32 against itself changes nothing; every matrix of the decoder gets a row."""
    _, metrics = trained_run
    out = run_script("precision_layers.py", metrics["best_checkpoint"], "--batch-size", "4")
    assert figure(r"\| float32 \| (\d+) \|", out) == 0
    assert figure(r"\| float32 \| 0 \| [\d.]+ \| ([+-][\d.]+) \|", out) == 0
    layers = re.findall(r"\| `([\w.]+)` alone in int8 \| \d+ \| [\d.]+ \| [+-][\d.]+ \|", out)
    assert {"recurrent_proj", "maxout.proj", "maxout.output"} <= set(layers)
    for precision in ("int8", "int8_fp16"):
        assert 0 <= figure(rf"precision={precision} \| \d+ \| ([\d.]+) \|", out) <= 100
