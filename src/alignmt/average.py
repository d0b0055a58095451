"""`alignmt-average run_dir=RUN last=N` or `ckpt=[A,B,...] out=PATH`: checkpoint averaging.

The parameters of several checkpoints of one model are averaged into a new checkpoint that
`alignmt-evaluate`, `alignmt-translate` and `restore` read like any other. `last=N` takes the
N newest step checkpoints of a run (`checkpoints/recent-stepNNNNNN.ckpt`, kept when training
sets `callbacks.recent_checkpoints.save_top_k=N`); the result goes to
`RUN/checkpoints/averaged-lastN.ckpt` unless `out` says otherwise.

The averaged checkpoint holds the weights, the training config, vocabularies and tokenisers
of its newest input, and `averaged_from` (the files and their steps); it holds no optimiser
or data-loader state, so it evaluates and translates but does not resume training.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig

from alignmt.atomic import write_with
from alignmt.checkpoint import load_checkpoint_file
from alignmt.config import CONF_DIR

log = logging.getLogger(__name__)

RECENT = re.compile(r"recent-step(\d+)\.ckpt")
# What a checkpoint must share with the others to be averaged with them, and what the result
# keeps of the newest one.
SHARED = ("vocabularies", "tokenizers")
KEPT = ("hyper_parameters", "vocabularies", "tokenizers", "epoch", "global_step")


def recent_checkpoints(run_dir: str | Path, last: int) -> list[Path]:
    """The `last` newest step checkpoints of a run, oldest first."""
    folder = Path(run_dir).expanduser() / "checkpoints"
    found = sorted(
        (int(m.group(1)), p)
        for p in folder.glob("recent-step*.ckpt")
        if (m := RECENT.fullmatch(p.name))
    )
    if last < 1 or len(found) < last:
        raise ValueError(
            f"last={last}: {folder} holds {len(found)} step checkpoints (recent-stepNNNNNN.ckpt); "
            f"train with callbacks.recent_checkpoints.save_top_k={max(last, 1)} "
            "(and callbacks.recent_checkpoints.every_n_train_steps) to keep them"
        )
    return [p for _, p in found[-last:]]


def average_checkpoints(paths: Sequence[str | Path]) -> dict:
    """The checkpoint whose parameters are the mean of those of `paths` (read one at a time;
    sums in float64, cast back to each parameter's type). Integer tensors must agree."""
    if not paths:
        raise ValueError("no checkpoints to average")
    first = load_checkpoint_file(paths[0])
    sums = {k: _accumulator(v) for k, v in first["state_dict"].items()}
    newest, steps = first, [_origin(paths[0], first)]
    for path in paths[1:]:
        checkpoint = load_checkpoint_file(path)
        _check_compatible(paths[0], first, path, checkpoint)
        for key, value in checkpoint["state_dict"].items():
            if value.is_floating_point():
                sums[key] += value.double()
            elif not torch.equal(sums[key], value):
                raise ValueError(f"cannot average {paths[0]} and {path}: {key} differs")
        newest = checkpoint
        steps.append(_origin(path, checkpoint))
    state = {
        key: (total / len(paths)).to(first["state_dict"][key].dtype)
        if total.is_floating_point()
        else total
        for key, total in sums.items()
    }
    kept = {key: newest[key] for key in KEPT if key in newest}
    return {**kept, "state_dict": state, "averaged_from": steps}


def _accumulator(value: torch.Tensor) -> torch.Tensor:
    return value.double() if value.is_floating_point() else value.clone()


def _origin(path: str | Path, checkpoint: dict) -> dict:
    return {"path": str(path), "global_step": int(checkpoint.get("global_step", -1))}


def _check_compatible(first_path, first: dict, path, checkpoint: dict) -> None:
    """Same model config, vocabularies, tokenisers and parameter shapes, or a clear error."""

    def refuse(what: str) -> None:
        raise ValueError(f"cannot average {first_path} and {path}: their {what} differ")

    if _model_config(first_path, first) != _model_config(path, checkpoint):
        refuse("model configs")
    for key in SHARED:
        if first.get(key) != checkpoint.get(key):
            refuse(key)
    mine, theirs = first["state_dict"], checkpoint["state_dict"]
    if mine.keys() != theirs.keys():
        refuse("parameter names")
    for key, value in theirs.items():
        if value.shape != mine[key].shape or value.dtype != mine[key].dtype:
            refuse(f"shapes or types of {key}")


def _model_config(path, checkpoint: dict) -> dict:
    try:
        return checkpoint["hyper_parameters"]["config"]["model"]
    except KeyError as e:
        raise ValueError(f"{path} is not an alignmt checkpoint (no {e} entry)") from None


def write_checkpoint(checkpoint: dict, out: str | Path) -> Path:
    out = Path(out).expanduser()
    write_with(out, lambda f: torch.save(checkpoint, f))
    return out


def average(cfg: DictConfig) -> Path:
    """The averaged checkpoint's path, from conf/average.yaml's `run_dir`+`last` or `ckpt`."""
    if cfg.ckpt and (cfg.run_dir or cfg.last):
        raise ValueError("give either ckpt=[A,B,...] or run_dir=RUN last=N, not both")
    if cfg.ckpt:
        if not cfg.out:
            raise ValueError("ckpt=[...] needs out=PATH for the averaged checkpoint")
        paths, out = [str(p) for p in cfg.ckpt], cfg.out
    elif cfg.run_dir and cfg.last:
        paths = recent_checkpoints(cfg.run_dir, cfg.last)
        out = cfg.out or Path(cfg.run_dir) / "checkpoints" / f"averaged-last{cfg.last}.ckpt"
    else:
        raise ValueError("alignmt-average needs run_dir=RUN last=N, or ckpt=[A,B,...] out=PATH")
    written = write_checkpoint(average_checkpoints(paths), out)
    log.info("averaged %d checkpoints -> %s", len(paths), written)
    return written


@hydra.main(config_path=str(CONF_DIR), config_name="average", version_base="1.3")
def main(cfg: DictConfig) -> None:
    print(average(cfg))


if __name__ == "__main__":
    main()
