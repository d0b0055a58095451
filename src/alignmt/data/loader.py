"""DataLoaders over whole batches; the training one is resumable through Lightning checkpoints.

Every loader draws its workers' base seed from a generator of its own, so creating an
iterator (once per epoch, and once more on resume) never advances the global torch RNG that
dropout and scheduled sampling draw from.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.data import DataLoader

from alignmt.data.batching import Batch, EncodedPairs, LengthBucketSampler, PairBatches
from alignmt.data.streaming import StreamedBatches


def _unchanged(batch: Batch) -> Batch:
    return batch


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _batches_of(pairs: EncodedPairs, sampler: LengthBucketSampler, seed: int, workers: int):
    """DataLoader arguments for whole batches of `pairs` in the order `sampler` gives."""
    return dict(
        dataset=PairBatches(pairs),
        sampler=sampler,
        batch_size=None,
        collate_fn=_unchanged,
        num_workers=workers,
        persistent_workers=workers > 0,
        generator=_generator(seed),
    )


def evaluation_loader(
    pairs: EncodedPairs, sampler: LengthBucketSampler, seed: int, num_workers: int = 0
) -> DataLoader:
    return DataLoader(**_batches_of(pairs, sampler, seed, num_workers))


class ResumableLoader(DataLoader):
    """The training loader: batches of `pairs` in the order of `sampler`, or a `StreamedBatches`.

    Lightning's fit loop saves `state_dict()` with every checkpoint and, on resume, hands it to
    `load_state_dict` before iterating, so a resumed run goes on with the batch after the last
    one trained on. That place is counted in batches trained on, not yielded (Lightning and
    the workers fetch ahead): `taken(batch)` must be called as training takes each batch,
    which `TranslationDataModule.on_after_batch_transfer` does. Lightning takes a batch only
    once it has trained on the one before; whether the last batch taken has been trained on
    yet (a checkpoint written because its step failed) is what `trained()` tells, if given.

    With a token budget the number of batches changes from epoch to epoch, while Lightning
    reads a loader's length once; such a loader has no length, so every epoch runs to its end.
    """

    def __init__(
        self,
        data: EncodedPairs | StreamedBatches,
        sampler: LengthBucketSampler | None = None,
        *,
        seed: int = 0,
        num_workers: int = 0,
        trained: Callable[[], bool] | None = None,
    ):
        if isinstance(data, StreamedBatches):
            super().__init__(
                data, batch_size=None, num_workers=num_workers, generator=_generator(seed)
            )
            self.order = data
        else:
            super().__init__(**_batches_of(data, sampler, seed, num_workers))
            self.order = sampler
        self.trained = trained
        self._last_taken = None  # its position, until it is known to be trained on

    def taken(self, batch) -> None:
        """Training takes `batch` (and so has trained on the batch taken before it)."""
        position = getattr(batch, "position", None)
        if position is not None:
            self._settle(done=True)
            self._last_taken = position

    def _settle(self, done: bool) -> None:
        if self._last_taken is not None and done:
            self.order.consumed(self._last_taken)
            self._last_taken = None

    def set_epoch(self, epoch: int) -> None:
        """The epoch about to run (a stream counts its own passes)."""
        self._settle(done=True)
        if isinstance(self.order, LengthBucketSampler):
            self.order.set_epoch(epoch)

    def state_dict(self) -> dict:
        self._settle(done=self.trained is None or self.trained())
        return self.order.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.order.load_state_dict(state)

    def __len__(self) -> int:
        if getattr(self.order, "varies_by_epoch", False):
            raise TypeError("a token budget gives each epoch its own number of batches")
        return super().__len__()

    def __iter__(self):
        self._settle(done=True)  # a new pass: training is done with the last one
        batches = super().__iter__()
        if isinstance(self.order, StreamedBatches) and self.num_workers > 1:
            return self.order.round_robin(batches)
        return batches
