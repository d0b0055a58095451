"""Length-bucketed batches: similar lengths together so little compute is spent on padding."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from alignmt.data.curriculum import Curriculum
from alignmt.data.mapped import MappedTable
from alignmt.special_tokens import BOS_ID, EOS_ID, PAD_ID


def index_dtype(n: int) -> type:
    """The narrowest integer type that indexes `n` pairs: int32 (half of int64 at WMT's 40M)."""
    return np.int32 if n < 2**31 else np.int64


@dataclass
class Batch:
    """Padded tensors of one batch. `indices` point back into the split, to restore order;
    `position` says where a training batch stands in its loader's order (None otherwise), so
    that a checkpoint can record how far training has got.

    Where a model or a loss asks for them (`alignmt.data.annotations`), a batch also carries
    its gold alignment links and its ids in the extended target vocabulary of a copying model
    (the target vocabulary, then one id per distinct source word outside it, per sentence)."""

    src: torch.Tensor  # [B, S] source ids ending in [EOS]
    src_lengths: torch.Tensor  # [B] (on CPU, as packing wants)
    tgt_in: torch.Tensor  # [B, T] [BOS] y_1 .. y_n   (decoder input)
    tgt_out: torch.Tensor  # [B, T] y_1 .. y_n [EOS]  (prediction targets)
    indices: torch.Tensor  # [B]
    position: tuple | None = None
    alignment: torch.Tensor | None = None  # [B, T, S] 1 where tgt_out[t] links to src[s]
    src_copy: torch.Tensor | None = None  # [B, S] each source token's extended target id
    tgt_copy: torch.Tensor | None = None  # [B, T] tgt_out, copyable unknown words extended
    extended_words: list[list[str]] | None = None  # per sentence, the words of ids V, V+1, ..

    def __len__(self) -> int:
        return self.src.size(0)

    @property
    def num_target_tokens(self) -> int:
        return int((self.tgt_out != PAD_ID).sum())

    @property
    def output_targets(self) -> torch.Tensor:
        """What the model predicts, in its output vocabulary: extended ids where it copies."""
        return self.tgt_out if self.tgt_copy is None else self.tgt_copy

    def to(self, device: torch.device | str) -> Batch:
        """The same batch on `device` (lengths and indices stay on the CPU, as packing wants)."""
        moved = {
            name: getattr(self, name).to(device)
            for name in ("src", "tgt_in", "tgt_out", "alignment", "src_copy", "tgt_copy")
            if getattr(self, name) is not None
        }
        return replace(self, **moved)

    def select(self, rows: list[int]) -> Batch:
        """The batch of these rows only, its source padding cut to the longest of them."""
        index = torch.tensor(rows, dtype=torch.long)
        lengths = self.src_lengths[index]
        on = index.to(self.src.device)
        width = int(lengths.max())
        return Batch(
            self.src[on, :width],
            lengths,
            self.tgt_in[on],
            self.tgt_out[on],
            self.indices[index],
            alignment=None if self.alignment is None else self.alignment[on, :, :width],
            src_copy=None if self.src_copy is None else self.src_copy[on, :width],
            tgt_copy=None if self.tgt_copy is None else self.tgt_copy[on],
            extended_words=None
            if self.extended_words is None
            else [self.extended_words[r] for r in rows],
        )


class RaggedIds:
    """Id sequences stored flat, as Arrow stores list columns: values plus offsets per chunk.

    No Python object per sentence, and for Arrow data no copy: the arrays are views of the
    memory-mapped cache file. Given that file's map (`mapped`), a sequence is read from the
    file by position instead, so that reading the whole epoch maps none of it in.
    """

    def __init__(
        self, chunks: Sequence[tuple[np.ndarray, np.ndarray]], mapped: MappedTable | None = None
    ):
        self.values = [values for values, _ in chunks]
        self.offsets = [offsets for _, offsets in chunks]
        self.starts = np.cumsum([0, *(len(o) - 1 for o in self.offsets)])
        self._where = [
            None if mapped is None else (mapped.locate(values), mapped.locate(offsets))
            for values, offsets in chunks
        ]

    def __getstate__(self) -> dict:
        """File numbers mean nothing in another process: a copy reads its arrays."""
        return {**self.__dict__, "_where": [None] * len(self.values)}

    @classmethod
    def from_lists(cls, sequences: Sequence[Sequence[int]]) -> RaggedIds:
        lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
        values = np.fromiter((i for s in sequences for i in s), dtype=np.int64)
        return cls([(values, np.concatenate([[0], np.cumsum(lengths)]))])

    @classmethod
    def from_arrow(cls, column, mapped: MappedTable | None = None) -> RaggedIds:
        """A pyarrow (chunked) list column without nulls (held in `mapped`'s files, if given)."""
        chunks = getattr(column, "chunks", [column])
        return cls([(c.values.to_numpy(), c.offsets.to_numpy()) for c in chunks if len(c)], mapped)

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getitem__(self, i: int) -> np.ndarray:
        chunk = int(np.searchsorted(self.starts, i, side="right")) - 1
        j = int(i - self.starts[chunk])
        values, offsets = self.values[chunk], self.offsets[chunk]
        where = self._where[chunk]
        if where is None or where[0] is None or where[1] is None:
            return values[offsets[j] : offsets[j + 1]]
        start, stop = MappedTable.read(where[1], offsets.dtype, j, j + 2)
        return MappedTable.read(where[0], values.dtype, int(start), int(stop))

    def lengths(self) -> np.ndarray:
        """int32, as Arrow's list offsets: 4 bytes a sentence, not 8, at WMT's 40M."""
        if not self.offsets:
            return np.zeros(0, dtype=np.int32)
        return np.concatenate([np.diff(o) for o in self.offsets]).astype(np.int32, copy=False)


class EncodedPairs(Dataset):
    """Id sequences of one split; item i is (i, source ids + [EOS], target ids).

    `index`, if given, keeps only those pairs (the length filter), in that order.
    `annotate`, if set, adds what a model or a loss needs beside the ids to every batch
    built from these pairs (`alignmt.data.annotations`). `mapped`, for ids read from cache
    files, is their map, whose pages read to open them or for the lengths `release` hands
    back.
    """

    annotate: Callable[[Batch], Batch] | None = None
    mapped: MappedTable | None = None

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
        n, dtype = len(self.sources), index_dtype(len(self.sources))
        self.index = np.arange(n, dtype=dtype) if index is None else np.asarray(index, dtype)
        self._every_pair = index is None

    @classmethod
    def from_arrow(cls, encoded, index: np.ndarray | None = None) -> EncodedPairs:
        """From the `source_ids` and `target_ids` columns of an Arrow dataset; those of a
        dataset read from cache files through maps of their own (`alignmt.data.mapped`)."""
        if getattr(encoded, "_indices", None) is not None:
            raise ValueError("flatten the dataset's indices first (dataset.flatten_indices())")
        files = [f["filename"] for f in getattr(encoded, "cache_files", ())]
        mapped = MappedTable(files) if files else None
        table = encoded.data if mapped is None else mapped.table
        if table.num_rows != len(encoded):
            raise ValueError(f"cache files {files}: {table.num_rows} rows, not {len(encoded)}")
        pairs = cls(
            RaggedIds.from_arrow(table.column("source_ids"), mapped),
            RaggedIds.from_arrow(table.column("target_ids"), mapped),
            index,
        )
        pairs.mapped = mapped
        pairs.release()  # the record batches' headers, read to open the files
        return pairs

    def kept(self, index: np.ndarray) -> EncodedPairs:
        """These ids with only the pairs at `index` kept (of all the ids, not of this index)."""
        pairs = EncodedPairs(self.sources, self.targets, index)
        pairs.mapped = self.mapped
        return pairs

    def release(self) -> None:
        """Hand back the pages of the cache files read so far (they stay in the page cache)."""
        if self.mapped is not None:
            self.mapped.release()

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int):
        j = self.index[i]
        source = torch.from_numpy(np.append(self.sources[j], EOS_ID).astype(np.int64))
        return i, source, torch.from_numpy(self.targets[j].astype(np.int64))

    def lengths(self) -> np.ndarray:
        """Per pair, the longer side (with [EOS]/[BOS]): what a batch's padded size depends on."""
        longer = np.maximum(self.sources.lengths(), self.targets.lengths())
        if not self._every_pair:
            longer = longer[self.index]
        self.release()  # all the offsets were read
        return longer + 1


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


class PairBatches(Dataset):
    """Whole batches as items: a sampler's `BatchIndices` in, their collated `Batch` out.

    With this as a DataLoader's dataset (and `batch_size=None`), the batch order is the
    loader's `sampler`, where Lightning's per-epoch `set_epoch` reaches it, and a batch built
    in a worker process still carries its position.
    """

    def __init__(self, pairs: EncodedPairs):
        self.pairs = pairs

    def __getitem__(self, indices: BatchIndices) -> Batch:
        batch = collate([self.pairs[i] for i in indices])
        batch.position = getattr(indices, "position", None)
        if self.pairs.annotate is not None:
            batch = self.pairs.annotate(batch)
        return batch


class LengthBucketSampler(Sampler[list[int]]):
    """Yields batches of indices of similar length.

    Training: shuffle, sort within pools of `pool_batches` batches, cut into batches, shuffle the
    batches; the order is a function of `seed` and the epoch (`set_epoch`), so runs are
    reproducible. Evaluation (`shuffle=False`): sorted by length. A batch holds `batch_size`
    pairs or, when `max_tokens` is set, as many as fit in `max_tokens` padded tokens (its
    longest pair times its size). Under DDP each rank takes every `world_size`-th batch
    (training batches are cut to a multiple of `world_size` so all ranks run the same number of
    steps). An epoch's batches are built once, as arrays, and kept until the epoch changes.

    Training batches come as `BatchIndices` that know their (epoch, batch) position. The
    sampler remembers the last batch training `consumed`; iteration goes on after it, an epoch
    consumed to its end is followed by the next, and `state_dict` / `load_state_dict` carry
    that place across a restart.

    With a `curriculum`, epoch 0 is the curriculum's: `curriculum.steps` batches, batch k drawn
    at random from the pairs in reach at step k (`alignmt.data.curriculum`; shortest first, ties
    in a seeded order); the pairs of `pool_batches` consecutive batches are then sorted and cut
    by length as in every epoch, and their batches shuffled among themselves, so a batch can hold
    pairs admitted up to `pool_batches` steps later. Ordinary epochs follow.
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
        curriculum: Curriculum | None = None,
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.lengths = np.asarray(lengths)
        if not np.issubdtype(self.lengths.dtype, np.integer):
            self.lengths = self.lengths.astype(np.int64)
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.shuffle = shuffle
        self.seed = seed
        self.pool_batches = pool_batches
        self.world_size = world_size
        self.rank = rank
        self.curriculum = curriculum if shuffle else None
        if self.curriculum is not None and max_tokens is not None:
            raise ValueError(
                "data.curriculum draws a number of pairs per step: it needs batches of "
                "data.batch_size pairs (data.max_tokens=null)"
            )
        self.epoch = 0
        self._next = 0  # the first batch of the epoch that training has not consumed
        self._built: tuple | None = None  # (key, order, starts, ends) of the current epoch
        if max_tokens is not None and len(self.lengths) and self.lengths.max() > max_tokens:
            raise ValueError(
                f"max_tokens={max_tokens} (data.max_tokens) is smaller than the longest pair "
                f"({self.lengths.max()} tokens with [EOS]): raise it or lower data.max_length"
            )

    # ------------------------------------------------------------- where training is
    def set_epoch(self, epoch: int) -> None:
        """Lightning calls this as every epoch starts; a new epoch starts at its first batch."""
        if epoch != self.epoch:
            self.epoch, self._next = epoch, 0

    def consumed(self, position: tuple[int, int]) -> None:
        """Training is done with batch `position` = (epoch, batch): a restart goes on after it."""
        self.epoch, self._next = position[0], position[1] + 1

    def _layout(self) -> dict:
        """What the batches' positions mean: a checkpoint only fits the same layout."""
        return {
            "pairs": len(self.lengths),
            "batch_size": self.batch_size,
            "max_tokens": self.max_tokens,
            "pool_batches": self.pool_batches,
            "world_size": self.world_size,
            "curriculum": None if self.curriculum is None else asdict(self.curriculum),
        }

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "next_batch": self._next, "seed": self.seed, **self._layout()}

    def load_state_dict(self, state: dict) -> None:
        """The checkpoint's seed and place, unless Lightning has already announced a later epoch
        (a checkpoint written at the end of an epoch)."""
        check_layout(state, self._layout(), "the training batches")
        self.seed = state["seed"]
        if (state["epoch"], state["next_batch"]) > (self.epoch, self._next):
            self.epoch, self._next = state["epoch"], state["next_batch"]

    @property
    def varies_by_epoch(self) -> bool:
        """Whether the number of batches can change from one epoch to the next (a token budget,
        or a curriculum's epoch before ordinary ones)."""
        return self.shuffle and (self.max_tokens is not None or self.curriculum is not None)

    # ---------------------------------------------------------------- the batches
    def _epoch_batches(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """This rank's batches: batch k is order[starts[k]:ends[k]]."""
        key = (self.seed, self.epoch) if self.shuffle else None
        if self._built is None or self._built[0] != key:
            self._built = (key, *self._build())
        return self._built[1:]

    def _build(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = len(self.lengths)
        if not self.shuffle:
            order = np.argsort(self.lengths, kind="stable")
            bounds = self._even(self._cut(order, max(n, 1)))
            return (
                order,
                bounds[:-1][self.rank :: self.world_size],
                bounds[1:][self.rank :: self.world_size],
            )
        if self.curriculum is not None and self.epoch == 0:
            return self._build_curriculum()
        rng = np.random.default_rng((self.seed, self.epoch))
        order = rng.permutation(np.arange(n, dtype=index_dtype(n)))
        pool = self.batch_size * self.pool_batches
        self._sort_pools(order, pool)
        bounds = self._cut(order, pool)
        shuffled = np.arange(len(bounds) - 1)
        rng.shuffle(shuffled)
        return self._split(order, bounds, shuffled)

    def _build_curriculum(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n, batches = len(self.lengths), self.curriculum.steps * self.world_size
        # a separate stream from ordinary epochs': (seed, epoch 0) keeps its meaning without one
        rng = np.random.default_rng((self.seed, 0, 1))
        tie_order = rng.permutation(np.arange(n, dtype=index_dtype(n)))
        shortest_first = tie_order[np.argsort(self.lengths[tie_order], kind="stable")]
        reach = self.curriculum.reach(np.arange(batches) // self.world_size, n)
        drawn = rng.random((batches, self.batch_size)) * reach[:, None]
        order = shortest_first[drawn.astype(np.int64).ravel()]
        pool = self.batch_size * self.pool_batches
        self._sort_pools(order, pool)
        bounds = self._cut(order, pool)
        shuffled = np.concatenate(
            [
                rng.permutation(np.arange(s, min(s + self.pool_batches, batches)))
                for s in range(0, batches, self.pool_batches)
            ]
        )
        return self._split(order, bounds, shuffled)

    def _sort_pools(self, order: np.ndarray, pool: int) -> None:
        """Sort each run of `pool` pairs of `order` by length, in place."""
        for start in range(0, len(order), pool):
            chunk = order[start : start + pool]
            chunk[:] = chunk[np.argsort(self.lengths[chunk], kind="stable")]

    def _split(self, order: np.ndarray, bounds: np.ndarray, shuffled: np.ndarray):
        """This rank's share of the batches, taken in the `shuffled` order of their numbers."""
        usable = len(shuffled) - len(shuffled) % self.world_size
        mine = shuffled[self.rank : usable : self.world_size]
        return order, bounds[mine], bounds[mine + 1]

    def _cut(self, order: np.ndarray, pool: int) -> np.ndarray:
        """Batch offsets into `order`, whose consecutive pools of `pool` pairs are each sorted by
        length and cut separately: batch k is order[bounds[k]:bounds[k + 1]]."""
        n = len(order)
        pool_starts = np.arange(0, n, pool)
        pool_ends = np.minimum(pool_starts + pool, n)
        if self.max_tokens is None:
            counts = -(-(pool_ends - pool_starts) // self.batch_size)
            first = np.repeat(np.cumsum(counts) - counts, counts)
            starts = np.repeat(pool_starts, counts) + self.batch_size * (
                np.arange(counts.sum()) - first
            )
        else:
            starts = _budget_starts(self.lengths[order], pool_starts, pool_ends, self.max_tokens)
        return np.append(starts, n)

    def _even(self, bounds: np.ndarray) -> np.ndarray:
        """Evaluation under DDP: split the largest batches until every rank gets the same,
        non-zero number of them (a rank without batches would never join the gathering of
        hypotheses at the end of the epoch). No sentences at all with one process: no batches."""
        if self.world_size > 1 and len(self.lengths) < self.world_size:
            raise ValueError(
                f"{len(self.lengths)} evaluation sentences cannot be shared by "
                f"{self.world_size} processes"
            )
        while (len(bounds) - 1) % self.world_size:
            sizes = np.diff(bounds)
            largest = int(np.argmax(sizes))
            bounds = np.insert(bounds, largest + 1, bounds[largest] + sizes[largest] // 2)
        return bounds

    def __iter__(self) -> Iterator[BatchIndices]:
        order, starts, ends = self._epoch_batches()
        if self.shuffle and len(starts) and self._next >= len(starts):
            self.epoch, self._next = self.epoch + 1, 0
            order, starts, ends = self._epoch_batches()
        epoch = self.epoch if self.shuffle else None
        return _batch_indices(order, starts, ends, epoch, self._next if self.shuffle else 0)

    def __len__(self) -> int:
        return len(self._epoch_batches()[1])


class BatchIndices(list):
    """One batch's indices into its split; for training, also its (epoch, batch) position, so
    that the batch built from it can say which batch training has reached."""

    def __init__(self, indices=(), position: tuple[int, int] | None = None):
        super().__init__(indices)
        self.position = position


def _batch_indices(order, starts, ends, epoch: int | None, first: int) -> Iterator[BatchIndices]:
    for k in range(first, len(starts)):
        position = None if epoch is None else (epoch, k)
        yield BatchIndices(order[starts[k] : ends[k]].tolist(), position)


def _budget_starts(
    lengths: np.ndarray, pool_starts: np.ndarray, pool_ends: np.ndarray, max_tokens: int
) -> np.ndarray:
    """Where each batch starts when every pool (its `lengths` sorted) is cut greedily: a batch
    takes the next pairs while its longest pair times its size fits in `max_tokens`.

    All pools advance together, one batch per step, so the work is in numpy, not per pair.
    """
    found = []
    start, end = pool_starts, pool_ends
    while len(start):
        found.append(start)
        start = _batch_ends(lengths, start, end, max_tokens)
        more = start < end
        start, end = start[more], end[more]
    return np.sort(np.concatenate(found)) if found else np.zeros(0, dtype=np.int64)


def _batch_ends(lengths, start, end, max_tokens) -> np.ndarray:
    """For batches beginning at `start` (sorted pools ending at `end`): the first pair that no
    longer fits. Binary search over every batch at once; a pair at least as long as the first
    one bounds the batch at max_tokens // lengths[start] pairs."""
    first = lengths[start]
    room = np.where(first > 0, max_tokens // np.maximum(first, 1), end - start)
    lo, hi = start + 1, np.minimum(end, start + np.maximum(room, 1))
    while True:
        open_ = lo < hi
        if not open_.any():
            return lo
        mid = np.where(open_, (lo + hi) // 2, start)
        fits = lengths[mid] * (mid - start + 1) <= max_tokens
        lo = np.where(open_ & fits, mid + 1, lo)
        hi = np.where(open_ & ~fits, mid, hi)


def check_layout(saved: dict, current: dict, what: str) -> None:
    """A checkpoint's place in the data order only means something for the same layout (data
    settings, number of processes and workers): refuse another one, naming what differs."""
    different = [
        f"{key} {saved.get(key)!r} in the checkpoint, {value!r} now"
        for key, value in current.items()
        if saved.get(key) != value
    ]
    if different:
        raise ValueError(
            f"cannot resume {what}: " + "; ".join(different) + ". Resume with the data "
            "settings, number of processes and data.num_workers the checkpoint was trained with"
        )
