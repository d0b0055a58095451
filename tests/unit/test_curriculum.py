"""The competence-based curriculum: its competence function and the batches it draws."""

from __future__ import annotations

import math

import numpy as np
import pytest

from alignmt.data.batching import LengthBucketSampler
from alignmt.data.curriculum import Curriculum
from tests.unit.test_data_order import consume


def test_competence_is_the_square_root_schedule():
    curriculum = Curriculum(steps=400, initial=0.2)
    # c(t) = min(1, sqrt(t (1 - c0^2) / T + c0^2)), by hand
    assert curriculum.competence(0) == pytest.approx(0.2)
    assert curriculum.competence(100) == pytest.approx(math.sqrt(100 * 0.96 / 400 + 0.04))
    assert curriculum.competence(200) == pytest.approx(math.sqrt(0.52))
    assert curriculum.competence(400) == 1.0
    assert curriculum.competence(10_000) == 1.0
    assert list(curriculum.reach([0, 200, 400], 1000)) == [200, math.ceil(1000 * 0.52**0.5), 1000]
    assert curriculum.reach(0, 3) == 1  # ceil(0.6)
    with pytest.raises(ValueError, match="steps"):
        Curriculum(steps=0)
    with pytest.raises(ValueError, match="initial"):
        Curriculum(steps=10, initial=0)


def rank_of(lengths: np.ndarray) -> np.ndarray:
    """Each pair's place shortest first (lengths here are all different)."""
    rank = np.empty(len(lengths), dtype=np.int64)
    rank[np.argsort(lengths)] = np.arange(len(lengths))
    return rank


@pytest.mark.parametrize("world_size", [1, 3])
def test_each_batch_holds_only_pairs_in_reach_by_its_pool(world_size):
    n, batch_size, pools = 2000, 8, 5
    lengths = np.random.default_rng(0).permutation(n) + 3  # distinct: reach is by rank
    curriculum = Curriculum(steps=60, initial=0.1)
    rank = rank_of(lengths)
    seen = []
    for r in range(world_size):
        sampler = LengthBucketSampler(
            lengths, batch_size, seed=5, pool_batches=pools, world_size=world_size, rank=r,
            curriculum=curriculum,
        )  # fmt: skip
        batches = list(sampler)
        assert len(batches) == len(sampler) == 60  # every rank: one batch per step
        for k, batch in enumerate(batches):
            assert len(batch) == batch_size and batch.position == (0, k)
            # the batches of a pool are its steps' draws, shuffled among themselves
            pool_end = min((k // pools + 1) * pools, 60) * world_size
            last_step = (pool_end - 1) // world_size
            assert rank[list(batch)].max() < curriculum.reach(last_step, n)
        seen.append(batches)
        # the first pool draws from the shortest 10% to ~14% of the pairs, across all of it
        first_pool = np.concatenate([rank[list(b)] for b in batches[:pools]])
        assert first_pool.max() < curriculum.reach(pools - 1, n)
        assert first_pool.min() < 0.02 * n and first_pool.max() > 0.08 * n
    if world_size > 1:  # the ranks take different batches of the same draw
        assert seen[0] != seen[1]


def test_the_curriculum_epoch_is_followed_by_ordinary_epochs():
    lengths = np.random.default_rng(1).integers(3, 60, size=300)
    curriculum = Curriculum(steps=20, initial=0.3)
    sampler = LengthBucketSampler(lengths, 16, seed=2, curriculum=curriculum)
    assert sampler.varies_by_epoch  # 20 batches, then 19 per epoch: Lightning reads no length
    taken = consume(sampler, 20 + 19)
    ordinary = LengthBucketSampler(lengths, 16, seed=2)
    ordinary.set_epoch(1)
    assert taken[20:] == [list(b) for b in ordinary]
    # short sentences first: the curriculum's early batches are shorter than an epoch's
    early = np.mean([lengths[b].mean() for b in taken[:5]])
    assert early < np.percentile(lengths, 40) < np.mean([lengths[b].mean() for b in taken[20:]])


def test_a_restored_curriculum_goes_on_where_it_stopped():
    lengths = np.random.default_rng(3).integers(3, 60, size=400)
    curriculum = Curriculum(steps=30, initial=0.1)
    everything = consume(LengthBucketSampler(lengths, 8, seed=4, curriculum=curriculum), 70)
    first = LengthBucketSampler(lengths, 8, seed=4, curriculum=curriculum)
    done = consume(first, 17)
    second = LengthBucketSampler(lengths, 8, seed=9, curriculum=curriculum)
    second.load_state_dict(first.state_dict())
    assert done + consume(second, 53) == everything
    other = LengthBucketSampler(lengths, 8, seed=4, curriculum=Curriculum(steps=31))
    with pytest.raises(ValueError, match="curriculum"):
        other.load_state_dict(first.state_dict())
    plain = LengthBucketSampler(lengths, 8, seed=4)
    with pytest.raises(ValueError, match="curriculum"):
        plain.load_state_dict(first.state_dict())


def test_a_curriculum_needs_batches_of_pairs_and_leaves_evaluation_alone():
    lengths = np.arange(3, 103)
    with pytest.raises(ValueError, match=r"data\.max_tokens"):
        LengthBucketSampler(lengths, 8, max_tokens=200, curriculum=Curriculum(steps=5))
    evaluation = LengthBucketSampler(lengths, 8, shuffle=False, curriculum=Curriculum(steps=5))
    assert [list(b) for b in evaluation] == [
        list(b) for b in LengthBucketSampler(lengths, 8, shuffle=False)
    ]
