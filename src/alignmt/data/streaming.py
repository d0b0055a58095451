"""Training batches read from a stream too large to load (WMT'14 fr-en in full).

The stream is shuffled through a buffer, split between DDP ranks and DataLoader workers by
`datasets`, encoded as it goes, and cut into length-bucketed batches pool by pool, exactly as
`LengthBucketSampler` cuts a loaded split. It never ends (each pass is a new epoch with a new
shuffle), so every rank runs as many steps as `trainer.max_steps` asks.

Every batch carries its `StreamPosition`; the batches training consumed (`consumed`) are what
`state_dict` records, per rank and worker, and a restarted stream re-reads the epoch's
shuffled rows up to the pool it stopped in (without encoding them), rebuilds that pool and
goes on after its last consumed batch. With several workers, `round_robin` hands the batches
out in the worker order an uninterrupted run would have, so a resumed run trains on exactly
the same sequence of batches.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import NamedTuple

import datasets
import torch
from datasets.distributed import split_dataset_by_node
from torch.utils.data import IterableDataset, get_worker_info

from alignmt.data.batching import Batch, EncodedPairs, LengthBucketSampler, check_layout, collate
from alignmt.data.encoding import trainable

SHUFFLE_BUFFER = 10_000


class PairEncoder:
    """Tokenises and encodes one raw pair; None for pairs the training filter drops."""

    def __init__(self, source_tokenizer, target_tokenizer, source_vocab, target_vocab, max_length):
        self.tokenizers = (source_tokenizer, target_tokenizer)
        self.vocabs = (source_vocab, target_vocab)
        self.max_length = max_length

    def __call__(self, source: str, target: str) -> tuple[list[int], list[int]] | None:
        s, t = self.tokenizers[0].tokenize(source), self.tokenizers[1].tokenize(target)
        if not trainable(len(s), len(t), self.max_length):
            return None
        return self.vocabs[0].encode(s), self.vocabs[1].encode(t)


class StreamPosition(NamedTuple):
    """Where a streamed batch comes from, enough to rebuild it and everything after it."""

    worker: int
    epoch: int
    pool: int  # the pool's number in its epoch
    rows: int  # rows of the epoch's shuffled stream read before the pool began
    batch: int  # the batch's number in its pool


class StreamedBatches(IterableDataset):
    """An endless iterable of `Batch`es; `encode(source, target)` gives id lists or None (drop).

    `num_workers` is the DataLoader's: a checkpoint's places belong to the workers that read
    them, so a stream only resumes with as many workers as it was saved with.
    """

    def __init__(
        self,
        stream: datasets.IterableDataset,
        encode: Callable[[str, str], tuple[list[int], list[int]] | None],
        batch_size: int = 64,
        max_tokens: int | None = None,
        pool_batches: int = 100,
        seed: int = 0,
        world_size: int = 1,
        rank: int = 0,
        num_workers: int = 0,
    ):
        self.stream = stream
        self.encode = encode
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.pool_batches = pool_batches
        self.seed = seed
        self.world_size = world_size
        self.rank = rank
        self.num_workers = max(num_workers, 1)  # no workers reads like one worker
        self.places: dict[
            int, tuple[int, int, int, int]
        ] = {}  # worker -> (epoch, pool, rows, next)
        self.last_worker: int | None = None  # the worker of the batch consumed last

    # ------------------------------------------------------------- where training is
    def consumed(self, position: StreamPosition) -> None:
        """Training is done with the batch at `position`: a restart goes on after it."""
        self.places[position.worker] = (
            position.epoch,
            position.pool,
            position.rows,
            position.batch + 1,
        )
        self.last_worker = position.worker

    def _layout(self) -> dict:
        return {
            "batch_size": self.batch_size,
            "max_tokens": self.max_tokens,
            "pool_batches": self.pool_batches,
            "world_size": self.world_size,
            "num_workers": self.num_workers,
        }

    def state_dict(self) -> dict:
        """Every rank's places (each rank reads its own share, and only rank 0's checkpoint is
        written), so under DDP all ranks must call this together, as Lightning does."""
        mine = {"places": dict(self.places), "last_worker": self.last_worker}
        ranks = [mine]
        if self.world_size > 1 and torch.distributed.is_initialized():
            ranks = [None] * self.world_size
            torch.distributed.all_gather_object(ranks, mine)
        return {"seed": self.seed, "ranks": ranks, **self._layout()}

    def load_state_dict(self, state: dict) -> None:
        check_layout(state, self._layout(), "the streamed training batches")
        mine = state["ranks"][self.rank]
        self.seed = state["seed"]
        self.places = {int(worker): tuple(place) for worker, place in mine["places"].items()}
        self.last_worker = mine["last_worker"]

    # ---------------------------------------------------------------- the batches
    def _split(self) -> datasets.IterableDataset:
        if self.world_size > 1:
            return split_dataset_by_node(self.stream, rank=self.rank, world_size=self.world_size)
        return self.stream

    def _pool_size(self) -> int:
        return self.batch_size * self.pool_batches

    def _batches(self, pool: list, at: StreamPosition, skip: int) -> Iterator[Batch]:
        pairs = EncodedPairs([s for s, _ in pool], [t for _, t in pool])
        pool_seed = (self.seed, self.rank, at.worker, at.epoch, at.pool)
        sampler = LengthBucketSampler(
            pairs.lengths(),
            batch_size=self.batch_size,
            max_tokens=self.max_tokens,
            seed=hash(pool_seed) & 0x7FFFFFFF,
            pool_batches=len(pool),  # one pool: sort it all, then shuffle its batches
        )
        for number, indices in enumerate(sampler):
            if number >= skip:
                batch = collate([pairs[i] for i in indices])
                batch.position = at._replace(batch=number)
                yield batch

    def _epoch(self, stream, worker: int, epoch: int, pool: int, rows: int, skip: int):
        """One pass, from pool `pool` (which begins after `rows` rows), its first `skip` batches
        left out."""
        shuffled = stream.shuffle(seed=self.seed, buffer_size=SHUFFLE_BUFFER)
        shuffled.set_epoch(epoch)
        pairs, seen = [], rows
        for row in islice(shuffled, rows, None):
            seen += 1
            pair = self.encode(row["source"], row["target"])
            if pair is None:
                continue
            pairs.append(pair)
            if len(pairs) == self._pool_size():
                yield from self._batches(pairs, StreamPosition(worker, epoch, pool, rows, 0), skip)
                pairs, pool, rows, skip = [], pool + 1, seen, 0
        if pairs:
            yield from self._batches(pairs, StreamPosition(worker, epoch, pool, rows, 0), skip)
        elif not pool:
            raise ValueError(
                f"the training stream gave rank {self.rank}, worker {worker} no usable "
                f"pairs ({seen} read): too few shards for the ranks and workers, or all "
                "filtered out by data.max_length"
            )

    def __iter__(self) -> Iterator[Batch]:
        stream = self._split()
        info = get_worker_info()
        worker = 0 if info is None else info.id
        if worker >= stream.n_shards:  # more workers than shards: datasets leaves it idle
            return
        epoch, pool, rows, skip = self.places.get(worker, (0, 0, 0, 0))
        while True:
            yield from self._epoch(stream, worker, epoch, pool, rows, skip)
            epoch, pool, rows, skip = epoch + 1, 0, 0, 0

    def round_robin(self, batches: Iterable[Batch]) -> Iterator[Batch]:
        """The batches of several workers in turn, starting with the worker after the one
        consumed last: the DataLoader always starts a new iterator with worker 0, which would
        reorder a resumed stream. At most one batch per worker waits."""
        active = min(self.num_workers, self._split().n_shards)  # the others stay idle
        turn = 0 if self.last_worker is None else (self.last_worker + 1) % active
        return _in_turn(batches, active, turn)


def _in_turn(batches: Iterable[Batch], workers: int, turn: int) -> Iterator[Batch]:
    waiting = [deque() for _ in range(workers)]
    for batch in batches:
        waiting[batch.position.worker].append(batch)
        while waiting[turn]:
            yield waiting[turn].popleft()
            turn = (turn + 1) % workers
