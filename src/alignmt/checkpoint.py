"""Reading checkpoint files: only plain values and tensors, with errors that name the file."""

from __future__ import annotations

import collections
import pickle
from pathlib import Path

import torch

# Learning-rate schedulers (MultiStepLR) keep their milestones in a Counter.
torch.serialization.add_safe_globals([collections.Counter])

CHECKPOINT_NAMES = ("last.ckpt", "interrupted.ckpt")


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used: missing, truncated, corrupt or unsafe."""


def load_checkpoint_file(path: str | Path) -> dict:
    """`torch.load(path, weights_only=True)`: a checkpoint whose unpickling would call code
    (anything beyond tensors and plain values) is refused, never run."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        if "Weights only load failed" in str(e):
            raise CheckpointError(
                f"{path}: refused to load: it holds objects whose unpickling could run code "
                "(only tensors and plain values are accepted; was it written by alignmt?)"
            ) from None
        raise CheckpointError(f"{path}: not a readable checkpoint (truncated?): {e}") from None
    except (RuntimeError, EOFError, OSError) as e:
        raise CheckpointError(
            f"{path}: not a readable checkpoint (truncated or corrupt): {e}"
        ) from None


def check_checkpoint(path: str | Path) -> str:
    """The path, once it has been read safely (before Lightning reads it again)."""
    load_checkpoint_file(path)
    return str(Path(path).expanduser())


def latest_checkpoint(run_dir: str | Path) -> str | None:
    """The newer of a run directory's last and interrupted checkpoints, if any: re-running a
    run directory continues it."""
    folder = Path(run_dir) / "checkpoints"
    found = [folder / name for name in CHECKPOINT_NAMES if (folder / name).is_file()]
    return str(max(found, key=lambda p: p.stat().st_mtime)) if found else None
