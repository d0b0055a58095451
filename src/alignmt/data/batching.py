"""Length-bucketed batches: similar lengths together so little compute is spent on padding."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from alignmt.special_tokens import BOS_ID, EOS_ID, PAD_ID


@dataclass
class Batch:
    """Padded tensors of one batch. `indices` point back into the split, to restore order."""

    src: torch.Tensor  # [B, S] source ids ending in [EOS]
    src_lengths: torch.Tensor  # [B] (on CPU, as packing wants)
    tgt_in: torch.Tensor  # [B, T] [BOS] y_1 .. y_n   (decoder input)
    tgt_out: torch.Tensor  # [B, T] y_1 .. y_n [EOS]  (prediction targets)
    indices: torch.Tensor  # [B]

    def __len__(self) -> int:
        return self.src.size(0)

    @property
    def num_target_tokens(self) -> int:
        return int((self.tgt_out != PAD_ID).sum())

    def to(self, device: torch.device | str) -> Batch:
        """The same batch on `device` (lengths and indices stay on the CPU, as packing wants)."""
        return Batch(
            self.src.to(device),
            self.src_lengths,
            self.tgt_in.to(device),
            self.tgt_out.to(device),
            self.indices,
        )

    def select(self, rows: list[int]) -> Batch:
        """The batch of these rows only, its source padding cut to the longest of them."""
        index = torch.tensor(rows, dtype=torch.long)
        lengths = self.src_lengths[index]
        on = index.to(self.src.device)
        return Batch(
            self.src[on, : int(lengths.max())],
            lengths,
            self.tgt_in[on],
            self.tgt_out[on],
            self.indices[index],
        )


class RaggedIds:
    """Id sequences stored flat, as Arrow stores list columns: values plus offsets per chunk.

    No Python object per sentence, and for Arrow data no copy: the arrays are views of the
    memory-mapped cache file, which DataLoader workers share.
    """

    def __init__(self, chunks: Sequence[tuple[np.ndarray, np.ndarray]]):
        self.values = [values for values, _ in chunks]
        self.offsets = [offsets for _, offsets in chunks]
        self.starts = np.cumsum([0, *(len(o) - 1 for o in self.offsets)])

    @classmethod
    def from_lists(cls, sequences: Sequence[Sequence[int]]) -> RaggedIds:
        lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
        values = np.fromiter((i for s in sequences for i in s), dtype=np.int64)
        return cls([(values, np.concatenate([[0], np.cumsum(lengths)]))])

    @classmethod
    def from_arrow(cls, column) -> RaggedIds:
        """A pyarrow (chunked) list column without nulls."""
        chunks = getattr(column, "chunks", [column])
        return cls([(c.values.to_numpy(), c.offsets.to_numpy()) for c in chunks if len(c)])

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getitem__(self, i: int) -> np.ndarray:
        chunk = int(np.searchsorted(self.starts, i, side="right")) - 1
        j = i - self.starts[chunk]
        offsets = self.offsets[chunk]
        return self.values[chunk][offsets[j] : offsets[j + 1]]

    def lengths(self) -> np.ndarray:
        if not self.offsets:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([np.diff(o) for o in self.offsets]).astype(np.int64)


class EncodedPairs(Dataset):
    """Id sequences of one split; item i is (i, source ids + [EOS], target ids).

    `index`, if given, keeps only those pairs (the length filter), in that order.
    """

    def __init__(
        self,
        sources: Sequence[Sequence[int]] | RaggedIds,
        targets: Sequence[Sequence[int]] | RaggedIds,
        index: np.ndarray | None = None,
    ):
        self.sources = sources if isinstance(sources, RaggedIds) else RaggedIds.from_lists(sources)
        self.targets = targets if isinstance(targets, RaggedIds) else RaggedIds.from_lists(targets)
        if len(self.sources) != len(self.targets):
            raise ValueError(f"{len(self.sources)} source but {len(self.targets)} target sequences")
        self.index = np.arange(len(self.sources)) if index is None else np.asarray(index)

    @classmethod
    def from_arrow(cls, encoded, index: np.ndarray | None = None) -> EncodedPairs:
        """From the `source_ids` and `target_ids` columns of an Arrow dataset."""
        if getattr(encoded, "_indices", None) is not None:
            raise ValueError("flatten the dataset's indices first (dataset.flatten_indices())")
        table = encoded.data
        return cls(
            RaggedIds.from_arrow(table.column("source_ids")),
            RaggedIds.from_arrow(table.column("target_ids")),
            index,
        )

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int):
        j = self.index[i]
        source = torch.from_numpy(np.append(self.sources[j], EOS_ID).astype(np.int64))
        return i, source, torch.from_numpy(self.targets[j].astype(np.int64))

    def lengths(self) -> np.ndarray:
        """Per pair, the longer side (with [EOS]/[BOS]): what a batch's padded size depends on."""
        source, target = self.sources.lengths()[self.index], self.targets.lengths()[self.index]
        return np.maximum(source + 1, target + 1)


def collate(items) -> Batch:
    indices, sources, targets = zip(*items, strict=True)
    n = len(items)
    src_lengths = torch.tensor([len(s) for s in sources], dtype=torch.long)
    tgt_lengths = [len(t) + 1 for t in targets]
    src = torch.full((n, int(src_lengths.max())), PAD_ID, dtype=torch.long)
    tgt_in = torch.full((n, max(tgt_lengths)), PAD_ID, dtype=torch.long)
    tgt_out = torch.full_like(tgt_in, PAD_ID)
    for row, (s, t) in enumerate(zip(sources, targets, strict=True)):
        src[row, : len(s)] = s
        tgt_in[row, 0] = BOS_ID
        tgt_in[row, 1 : len(t) + 1] = t
        tgt_out[row, : len(t)] = t
        tgt_out[row, len(t)] = EOS_ID
    return Batch(src, src_lengths, tgt_in, tgt_out, torch.tensor(indices, dtype=torch.long))


class LengthBucketSampler(Sampler[list[int]]):
    """Yields batches of indices of similar length.

    Training: shuffle, sort within pools of `pool_batches` batches, cut into batches, shuffle the
    batches; reseeded every epoch (`set_epoch`), so runs are reproducible. Evaluation
    (`shuffle=False`): sorted by length. A batch holds `batch_size` pairs or, when `max_tokens`
    is set, as many as fit in `max_tokens` padded tokens. Under DDP each rank takes every
    `world_size`-th batch (training batches are cut to a multiple of `world_size` so all ranks
    run the same number of steps).
    """

    def __init__(
        self,
        lengths: Sequence[int] | np.ndarray,
        batch_size: int = 64,
        max_tokens: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        pool_batches: int = 100,
        world_size: int = 1,
        rank: int = 0,
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.shuffle = shuffle
        self.seed = seed
        self.pool_batches = pool_batches
        self.world_size = world_size
        self.rank = rank
        self.epoch = 0
        if max_tokens is not None and len(self.lengths) and self.lengths.max() > max_tokens:
            raise ValueError(
                f"max_tokens={max_tokens} (data.max_tokens) is smaller than the longest pair "
                f"({self.lengths.max()} tokens with [EOS]): raise it or lower data.max_length"
            )

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _cut(self, order: np.ndarray) -> list[list[int]]:
        if self.max_tokens is None:
            return [
                order[i : i + self.batch_size].tolist()
                for i in range(0, len(order), self.batch_size)
            ]
        batches, start, longest = [], 0, 0
        for pos, idx in enumerate(order):
            longest_with = max(longest, self.lengths[idx])
            if pos > start and longest_with * (pos - start + 1) > self.max_tokens:
                batches.append(order[start:pos].tolist())
                start, longest_with = pos, self.lengths[idx]
            longest = longest_with
        if start < len(order):
            batches.append(order[start:].tolist())
        return batches

    def _batches(self) -> list[list[int]]:
        if not self.shuffle:
            batches = self._cut(np.argsort(self.lengths, kind="stable"))
            return self._even(batches)[self.rank :: self.world_size]
        rng = np.random.default_rng((self.seed, self.epoch))
        order = rng.permutation(len(self.lengths))
        pool = self.batch_size * self.pool_batches
        batches = []
        for start in range(0, len(order), pool):
            chunk = order[start : start + pool]
            batches += self._cut(chunk[np.argsort(self.lengths[chunk], kind="stable")])
        rng.shuffle(batches)
        usable = len(batches) - len(batches) % self.world_size
        return batches[self.rank : usable : self.world_size]

    def _even(self, batches: list[list[int]]) -> list[list[int]]:
        """Evaluation under DDP: split the largest batches until every rank gets the same,
        non-zero number of them (a rank without batches would never join the gathering of
        hypotheses at the end of the epoch)."""
        if len(self.lengths) < self.world_size:
            raise ValueError(
                f"{len(self.lengths)} evaluation sentences cannot be shared by "
                f"{self.world_size} processes"
            )
        while len(batches) % self.world_size:
            largest = max(range(len(batches)), key=lambda i: len(batches[i]))
            batch = batches.pop(largest)
            half = len(batch) // 2
            batches[largest:largest] = [batch[:half], batch[half:]]
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        yield from self._batches()

    def __len__(self) -> int:
        if self.max_tokens is None and self.shuffle:
            return math.ceil(len(self.lengths) / self.batch_size) // self.world_size
        return len(self._batches())
