"""wandb (offline) and TensorBoard receive scalars, sample translations and heatmaps after each
validation, the test figures after testing; wandb keeps the best validation BLEU as its
summary and the tested checkpoint and test outputs as artifacts."""

import json
import struct
import sys

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from alignmt.train import train
from tests.conftest import tiny_train_config

# wandb's run file (`run-*.wandb`): a 7-byte header, then records in 32 KiB blocks, each
# chunk behind a 7-byte header (checksum, length, kind: 1 full, 2 first, 3 middle, 4 last).
BLOCK, HEADER = 32768, 7


def wandb_records(path):
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    position, chunks = HEADER, []
    while position + HEADER <= len(data):
        if BLOCK - position % BLOCK < HEADER:  # the block's tail is padding
            position += BLOCK - position % BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + HEADER])
        if kind == 0:
            break
        chunks.append(data[position + HEADER : position + HEADER + length])
        position += HEADER + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(chunks))
            chunks = []
            yield record


@pytest.fixture(scope="module")
def dashboard_run(cache_dir, tmp_path_factory):
    """One tiny run logged to CSV, TensorBoard and offline wandb: two validations, one test."""
    run_dir = tmp_path_factory.mktemp("dashboards") / "run"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("WANDB_MODE", "offline")
        env.setenv("WANDB_SILENT", "true")
        env.setenv("WANDB_DATA_DIR", str(run_dir.parent / "wandb-data"))
        cfg = tiny_train_config(
            cache_dir,
            run_dir,
            "logger=[csv,tensorboard,wandb]",
            "logger.wandb.group=test",
            "trainer.max_steps=4",
            "trainer.val_check_interval=2",
        )
        metrics = train(cfg)
    return run_dir, metrics


def test_tensorboard_gets_scalars_samples_heatmaps_and_test_figures(dashboard_run):
    run_dir, _ = dashboard_run
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"images": 0})
    events.Reload()
    tags = events.Tags()
    assert {"val/bleu", "val/loss", "train/loss", "test/bleu"} <= set(tags["scalars"])
    assert any("val/samples" in tag for tag in tags["tensors"])
    assert len(events.Images("val/attention/0")) == 2  # one per validation
    heatmaps = sorted(p.stem for p in (run_dir / "attention").glob("test_*.png"))
    expected = {f"test/attention/{int(name.split('_')[1])}" for name in heatmaps}
    assert len(expected) == 2  # callbacks.result_files.heatmaps=2
    assert expected | {"test/bleu_by_length", "test/exposure"} <= set(tags["images"])
    figure = events.Images("test/bleu_by_length")[0]
    assert figure.width > 100 and figure.height > 100


def test_wandb_runs_offline_and_is_always_finished(dashboard_run):
    import wandb

    run_dir, _ = dashboard_run
    assert wandb.run is None  # finished, so a next run in this process starts its own
    runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert list(runs[0].glob("*.wandb"))
    assert "wandb" in sys.modules


def offline_run(run_dir):
    (run,) = (run_dir / "wandb").glob("offline-run-*")
    return run, list(wandb_records(next(run.glob("*.wandb"))))


def test_wandb_gets_the_test_figures(dashboard_run):
    run_dir, _ = dashboard_run
    run, _ = offline_run(run_dir)
    images = {
        p.name.rsplit("_", 2)[0]
        for p in (run / "files" / "media" / "images" / "test").glob("*.png")
    }
    assert {"bleu_by_length", "exposure"} <= images
    heatmaps = list((run / "files" / "media" / "images" / "test" / "attention").glob("*.png"))
    assert len(heatmaps) == 2


def test_wandb_summary_holds_the_best_validation_bleu(dashboard_run):
    run_dir, _ = dashboard_run
    _, records = offline_run(run_dir)
    logged, summaries = [], []
    for record in records:
        kind = record.WhichOneof("record_type")
        if kind == "history":
            logged += [
                float(i.value_json)
                for i in record.history.item
                if list(i.nested_key) == ["val/bleu"]
            ]
        if kind == "summary":
            summaries += [
                json.loads(u.value_json)
                for u in record.summary.update
                if list(u.nested_key) == ["val/bleu"]
            ]
    assert len(logged) == 2  # two validations
    assert summaries[-1] == {"max": pytest.approx(max(logged))}


def test_wandb_keeps_the_tested_checkpoint_and_the_test_outputs_as_artifacts(dashboard_run):
    run_dir, metrics = dashboard_run
    _, records = offline_run(run_dir)
    artifacts = {
        r.artifact.type: r.artifact for r in records if r.WhichOneof("record_type") == "artifact"
    }
    model = artifacts["model"]
    assert "best" in model.aliases
    assert [m.path for m in model.manifest.contents] == ["model.ckpt"]
    (best,) = [m for m in model.manifest.contents]
    assert (
        best.size
        == (run_dir / "checkpoints" / metrics["best_checkpoint"].rsplit("/", 1)[1]).stat().st_size
    )
    outputs = {m.path for m in artifacts["predictions"].manifest.contents}
    assert outputs == {"hypotheses.txt", "test_sentences.jsonl.gz", "bleu_by_length.csv"}
