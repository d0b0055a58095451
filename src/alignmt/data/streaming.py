"""Training batches read from a stream too large to load (WMT'14 fr-en in full).

The stream is shuffled through a buffer, split between DDP ranks and DataLoader workers by
`datasets`, encoded as it goes, and cut into length-bucketed batches pool by pool, exactly as
`LengthBucketSampler` cuts a loaded split. It never ends (each pass is a new epoch with a new
shuffle), so every rank runs as many steps as `trainer.max_steps` asks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import datasets
from datasets.distributed import split_dataset_by_node
from torch.utils.data import IterableDataset, get_worker_info

from alignmt.data.batching import Batch, EncodedPairs, LengthBucketSampler, collate
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


class StreamedBatches(IterableDataset):
    """An endless iterable of `Batch`es; `encode(source, target)` gives id lists or None (drop)."""

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
    ):
        self.stream = stream
        self.encode = encode
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.pool_batches = pool_batches
        self.seed = seed
        self.world_size = world_size
        self.rank = rank

    def _pool_size(self) -> int:
        return self.batch_size * self.pool_batches

    def _batches(self, pool: list, pool_seed: tuple) -> Iterator[Batch]:
        pairs = EncodedPairs([s for s, _ in pool], [t for _, t in pool])
        sampler = LengthBucketSampler(
            pairs.lengths(),
            batch_size=self.batch_size,
            max_tokens=self.max_tokens,
            seed=hash(pool_seed) & 0x7FFFFFFF,
            pool_batches=len(pool),  # one pool: sort it all, then shuffle its batches
        )
        for indices in sampler:
            yield collate([pairs[i] for i in indices])

    def __iter__(self) -> Iterator[Batch]:
        stream = self.stream
        if self.world_size > 1:
            stream = split_dataset_by_node(stream, rank=self.rank, world_size=self.world_size)
        worker = get_worker_info()
        worker_id = 0 if worker is None else worker.id
        if worker_id >= stream.n_shards:  # more workers than shards: datasets leaves it idle
            return
        epoch = 0
        while True:
            shuffled = stream.shuffle(seed=self.seed, buffer_size=SHUFFLE_BUFFER)
            shuffled.set_epoch(epoch)
            pool, pools, seen = [], 0, 0
            for row in shuffled:
                seen += 1
                pair = self.encode(row["source"], row["target"])
                if pair is None:
                    continue
                pool.append(pair)
                if len(pool) == self._pool_size():
                    yield from self._batches(pool, (self.seed, self.rank, worker_id, epoch, pools))
                    pool, pools = [], pools + 1
            if pool:
                yield from self._batches(pool, (self.seed, self.rank, worker_id, epoch, pools))
            elif not pools:
                raise ValueError(
                    f"the training stream gave rank {self.rank}, worker {worker_id} no usable "
                    f"pairs ({seen} read): too few shards for the ranks and workers, or all "
                    "filtered out by data.max_length"
                )
            epoch += 1
