"""Files written whole or not at all: a kill at any moment never leaves half a file that the
next run reads as valid."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from typing_extensions import override

PARTIAL_SUFFIX = ".partial"
_UMASK = os.umask(0o022)  # read the process's umask (only a set returns it) and put it back
os.umask(_UMASK)


@contextmanager
def replacing(path: str | Path, mode: str = "w", **open_args: Any):
    """A file object writing to a temporary file beside `path`, renamed over it on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, staging = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=PARTIAL_SUFFIX)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # as open() would make it, not mkstemp's owner-only
        with os.fdopen(fd, mode, **open_args) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(staging, path)
        _sync_folder(path.parent)  # the rename itself survives a power cut too
    except BaseException:
        Path(staging).unlink(missing_ok=True)
        raise


def _sync_folder(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def remove_leftovers(folder: str | Path) -> list[Path]:
    """Deletes the temporary files that writers killed before their rename left in `folder`
    (only while nothing is writing there) and returns them."""
    leftovers = sorted(Path(folder).glob(f".*{PARTIAL_SUFFIX}"))
    for leftover in leftovers:
        leftover.unlink(missing_ok=True)
    return leftovers


def write_text(path: str | Path, text: str) -> None:
    with replacing(path, "w", encoding="utf-8") as f:
        f.write(text)


def write_with(path: str | Path, write: Callable[[IO[bytes]], None]) -> None:
    """`write(file)` into a temporary file, then renamed over `path`."""
    with replacing(path, "wb") as f:
        write(f)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer, through a temporary file and a rename."""

    @override
    def save_checkpoint(self, checkpoint, path, storage_options=None) -> None:
        import torch

        write_with(path, lambda f: torch.save(checkpoint, f))
