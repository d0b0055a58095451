"""Reading checkpoint files: only plain values and tensors, with errors that name the file."""

from __future__ import annotations

import collections
import pickle
import re
import zipfile
from pathlib import Path

import torch

# Learning-rate schedulers (MultiStepLR) keep their milestones in a Counter.
torch.serialization.add_safe_globals([collections.Counter])

CHECKPOINT_NAMES = ("last.ckpt", "interrupted.ckpt")


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used: missing, truncated, corrupt or unsafe."""


def load_checkpoint_file(path: str | Path) -> dict:
    """`torch.load(path, weights_only=True)`: a checkpoint whose unpickling would call code
    (anything beyond tensors and plain values) is refused, never run; a truncated, corrupt
    or foreign file is one `CheckpointError` naming it."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path}: an empty file, not a checkpoint")
    _check_records(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        unsafe = re.search(r"GLOBAL (\S+)", str(e))
        if unsafe:
            raise CheckpointError(
                f"{path}: refused to load: unpickling it would call {unsafe[1]} (a checkpoint "
                "holds tensors and plain values only: this file was not written by alignmt, "
                "or was altered since)"
            ) from None
        raise CheckpointError(f"{path}: not a checkpoint, or a corrupt one") from None
    except Exception as e:  # damaged bytes make the reader fail in any of a dozen ways
        raise CheckpointError(
            f"{path}: not a readable checkpoint (truncated or corrupt: {_first_sentence(e)})"
        ) from None


def _check_records(path: Path) -> None:
    """torch's zip format keeps a CRC-32 of every record, which `torch.load` never checks: a
    flipped bit in a tensor would load as a silently different weight."""
    if not zipfile.is_zipfile(path):
        return  # truncated (no central directory) or another format: torch.load decides
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
    except Exception as e:  # as above: whatever a damaged archive makes zipfile raise
        raise CheckpointError(f"{path}: a corrupt checkpoint ({_first_sentence(e)})") from None
    if damaged is not None:
        raise CheckpointError(f"{path}: a corrupt checkpoint: {damaged} fails its CRC-32 check")


def _first_sentence(error: Exception) -> str:
    text = str(error).strip() or type(error).__name__
    return text.split(". ")[0].splitlines()[0]


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
