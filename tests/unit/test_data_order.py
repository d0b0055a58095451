"""The batch order: its definition, where training stands in it, and what moves it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from alignmt.data import ToyCorpus, TranslationDataModule, Vocabulary, WhitespaceTokenizer
from alignmt.data.batching import EncodedPairs, LengthBucketSampler
from alignmt.data.loader import ResumableLoader
from alignmt.decoding.greedy import GreedySearch
from alignmt.special_tokens import SPECIALS
from alignmt.translator import Translator


def cut(lengths, order, batch_size, max_tokens) -> list[list[int]]:
    """The definition of a batch, one pair at a time: as many of the pairs in `order` as fit
    (longest times count within `max_tokens`), or `batch_size` of them."""
    if max_tokens is None:
        return [order[i : i + batch_size].tolist() for i in range(0, len(order), batch_size)]
    batches, batch = [], []
    for i in order.tolist():
        if batch and max(lengths[j] for j in [*batch, i]) * (len(batch) + 1) > max_tokens:
            batches.append(batch)
            batch = []
        batch.append(i)
    return [*batches, batch] if batch else batches


def reference_batches(lengths, batch_size, max_tokens, shuffle, seed, pools, ranks, rank, epoch):
    """The batch order as defined: shuffled with the (seed, epoch) generator, sorted by length
    within pools of `pools` batches, cut, batches shuffled, every `ranks`-th batch to a rank
    (evaluation: sorted, the largest batches halved until the ranks get equally many)."""
    lengths = np.asarray(lengths)
    if not shuffle:
        batches = cut(lengths, np.argsort(lengths, kind="stable"), batch_size, max_tokens)
        while len(batches) % ranks:
            largest = max(range(len(batches)), key=lambda k: len(batches[k]))
            batch = batches.pop(largest)
            batches[largest:largest] = [batch[: len(batch) // 2], batch[len(batch) // 2 :]]
        return batches[rank::ranks]
    rng = np.random.default_rng((seed, epoch))
    order = rng.permutation(len(lengths))
    batches = []
    for start in range(0, len(order), batch_size * pools):
        pool = order[start : start + batch_size * pools]
        pool = pool[np.argsort(lengths[pool], kind="stable")]
        batches += cut(lengths, pool, batch_size, max_tokens)
    rng.shuffle(batches)
    return batches[rank : len(batches) - len(batches) % ranks : ranks]


def test_batches_follow_their_definition_on_random_lengths():
    draw = np.random.default_rng(11)
    for _ in range(150):
        lengths = draw.integers(1, int(draw.integers(2, 90)), size=int(draw.integers(0, 1500)))
        ranks = int(draw.integers(1, 4))
        setting = dict(
            batch_size=int(draw.integers(1, 50)),
            max_tokens=None if draw.random() < 0.3 else int(draw.integers(90, 600)),
            shuffle=bool(draw.random() < 0.8),
            seed=int(draw.integers(0, 1000)),
            pool_batches=int(draw.integers(1, 20)),
            world_size=ranks,
            rank=int(draw.integers(0, ranks)),
        )
        if not setting["shuffle"] and len(lengths) < ranks:
            continue
        epoch = int(draw.integers(0, 4))
        sampler = LengthBucketSampler(lengths, **setting)
        sampler.set_epoch(epoch)
        expected = reference_batches(
            lengths, *(setting[k] for k in ("batch_size", "max_tokens", "shuffle", "seed")),
            setting["pool_batches"], ranks, setting["rank"], epoch,
        )  # fmt: skip
        assert [list(batch) for batch in sampler] == expected
        assert len(sampler) == len(expected)


def consume(sampler, count: int) -> list[list[int]]:
    """What the training loop does with `count` batches, epoch after epoch: take them and
    report each one."""
    taken = []
    while len(taken) < count:
        for batch in sampler:
            sampler.consumed(batch.position)
            taken.append(list(batch))
            if len(taken) == count:
                break
    return taken


def test_a_restored_sampler_goes_on_after_the_last_consumed_batch():
    lengths = np.random.default_rng(0).integers(3, 60, size=500)
    straight = LengthBucketSampler(lengths, 16, max_tokens=300, seed=4)
    per_epoch = len(straight)
    everything = consume(straight, 2 * per_epoch + 5)
    first = LengthBucketSampler(lengths, 16, max_tokens=300, seed=4)
    done = consume(first, per_epoch + 9)
    second = LengthBucketSampler(lengths, 16, max_tokens=300, seed=99)  # the seed is restored
    second.load_state_dict(first.state_dict())
    assert done + consume(second, per_epoch - 4) == everything


def test_an_epoch_consumed_to_its_end_is_followed_by_the_next():
    lengths = np.random.default_rng(1).integers(3, 60, size=300)
    sampler = LengthBucketSampler(lengths, 32, seed=2)
    epoch_zero = consume(sampler, len(sampler))
    restored = LengthBucketSampler(lengths, 32, seed=2)
    restored.load_state_dict(sampler.state_dict())
    epoch_one = LengthBucketSampler(lengths, 32, seed=2)
    epoch_one.set_epoch(1)
    assert [list(b) for b in restored] == [list(b) for b in epoch_one] != epoch_zero


def test_a_later_epoch_announced_by_lightning_wins_over_the_checkpoint():
    """A checkpoint written as an epoch ended, read when Lightning already counts the next."""
    lengths = np.random.default_rng(1).integers(3, 60, size=300)
    sampler = LengthBucketSampler(lengths, 32, seed=2, max_tokens=200)
    consume(sampler, 5)
    restored = LengthBucketSampler(lengths, 32, seed=2, max_tokens=200)
    restored.set_epoch(1)
    restored.load_state_dict(sampler.state_dict())
    expected = LengthBucketSampler(lengths, 32, seed=2, max_tokens=200)
    expected.set_epoch(1)
    assert [list(b) for b in restored] == [list(b) for b in expected]


def test_a_checkpoint_of_other_batches_is_refused():
    lengths = np.arange(3, 103)
    state = LengthBucketSampler(lengths, 16, world_size=2).state_dict()
    with pytest.raises(ValueError, match=r"batch_size 16 in the checkpoint, 32 now.*world_size"):
        LengthBucketSampler(lengths, 32).load_state_dict(state)


def test_zero_sentences_give_no_batches_on_one_process_and_an_error_on_several():
    assert list(LengthBucketSampler(np.zeros(0, dtype=int), 10, shuffle=False)) == []
    with pytest.raises(ValueError, match="0 evaluation sentences cannot be shared by 2"):
        list(LengthBucketSampler(np.zeros(0, dtype=int), 10, shuffle=False, world_size=2))
    translator = Translator(
        torch.nn.Linear(1, 1),
        GreedySearch(),
        Vocabulary(SPECIALS),
        Vocabulary(SPECIALS),
        WhitespaceTokenizer(),
        WhitespaceTokenizer(),
    )
    assert translator.translate([]) == []


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    cache = tmp_path_factory.mktemp("toy")
    dm = TranslationDataModule(
        ToyCorpus(cache_dir=str(cache), train_size=100, valid_per_bucket=1, test_per_bucket=1),
        batch_size=8,
        cache_dir=str(cache),
    )
    dm.prepare_data()
    return dm


@pytest.mark.parametrize("workers", [0, 1])
def test_starting_an_epoch_leaves_the_global_random_state_alone(toy, workers):
    toy.num_workers = workers
    for loader in (toy.train_dataloader(), toy.val_dataloader()):
        before = torch.get_rng_state()
        for _ in range(2):  # an epoch, then the next one
            next(iter(loader))
        assert torch.equal(torch.get_rng_state(), before)
    toy.num_workers = 0


def test_a_token_budget_loader_has_no_length_so_lightning_runs_every_epoch_out(toy):
    pairs: EncodedPairs = toy.pairs["train"]
    budget = ResumableLoader(pairs, LengthBucketSampler(pairs.lengths(), 8, max_tokens=200))
    with pytest.raises(TypeError):
        len(budget)
    fixed = ResumableLoader(pairs, LengthBucketSampler(pairs.lengths(), 8))
    assert len(fixed) == len(list(fixed)) == -(-len(pairs) // 8)
