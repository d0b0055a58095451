import numpy as np
import pytest
import torch

from alignmt.data.batching import EncodedPairs, LengthBucketSampler, collate
from alignmt.data.vocab import Vocabulary
from alignmt.special_tokens import BOS_ID, EOS_ID, PAD_ID, SPECIALS, UNK_ID


def test_vocabulary_orders_by_frequency_and_maps_unknown_words():
    vocab = Vocabulary.build([["b", "a", "b"], ["c", "b", "a"]], max_size=2)
    assert vocab.itos == [*SPECIALS, "b", "a"]
    assert vocab.encode(["a", "c", "b"]) == [5, UNK_ID, 4]
    assert vocab.decode([BOS_ID, 4, UNK_ID, 5, EOS_ID, 4]) == ["b", "[UNK]", "a"]
    assert Vocabulary(vocab.itos) == vocab


def test_vocabulary_min_freq_and_validation():
    assert Vocabulary.build([["x", "y", "x"]], min_freq=2).itos[4:] == ["x"]
    with pytest.raises(ValueError, match="must start with"):
        Vocabulary(["a", "b"])


def test_collate_pads_and_shifts_targets():
    pairs = EncodedPairs([[5, 6, 7], [8]], [[9, 10], [11, 12, 13]])
    batch = collate([pairs[0], pairs[1]])
    assert batch.src.tolist() == [[5, 6, 7, EOS_ID], [8, EOS_ID, PAD_ID, PAD_ID]]
    assert batch.src_lengths.tolist() == [4, 2]
    assert batch.tgt_in.tolist() == [[BOS_ID, 9, 10, PAD_ID], [BOS_ID, 11, 12, 13]]
    assert batch.tgt_out.tolist() == [[9, 10, EOS_ID, PAD_ID], [11, 12, 13, EOS_ID]]
    assert batch.num_target_tokens == 7
    assert batch.indices.tolist() == [0, 1]


def _lengths(n=1000, seed=0):
    return np.random.default_rng(seed).integers(3, 80, size=n)


def test_training_batches_cover_every_pair_once_and_group_similar_lengths():
    lengths = _lengths()
    sampler = LengthBucketSampler(lengths, batch_size=32, seed=3)
    batches = list(sampler)
    assert len(batches) == len(sampler)
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(len(lengths)))
    spread = np.mean([lengths[b].max() - lengths[b].min() for b in batches])
    random_spread = np.mean(
        [lengths[b].max() - lengths[b].min() for b in np.array_split(np.arange(1000), 32)]
    )
    assert spread < random_spread / 5


def test_training_batches_are_seeded_and_reshuffled_every_epoch():
    lengths = _lengths()
    a, b = LengthBucketSampler(lengths, 32, seed=1), LengthBucketSampler(lengths, 32, seed=1)
    assert list(a) == list(b)
    a.set_epoch(1)
    assert list(a) != list(b)
    assert list(LengthBucketSampler(lengths, 32, seed=2)) != list(b)


def test_token_budget_batches_stay_within_budget():
    lengths = _lengths()
    sampler = LengthBucketSampler(lengths, max_tokens=400, seed=0)
    batches = list(sampler)
    assert all(lengths[b].max() * len(b) <= 400 for b in batches)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    with pytest.raises(ValueError, match="max_tokens"):
        LengthBucketSampler(lengths, max_tokens=10)


def test_ranks_get_disjoint_shares_with_equal_step_counts():
    lengths = _lengths(1001)
    shards = [list(LengthBucketSampler(lengths, 32, seed=5, world_size=2, rank=r)) for r in (0, 1)]
    assert len(shards[0]) == len(shards[1])
    seen = [set(i for b in shard for i in b) for shard in shards]
    assert not seen[0] & seen[1]
    evaluation = [
        list(LengthBucketSampler(lengths, 100, shuffle=False, world_size=2, rank=r)) for r in (0, 1)
    ]
    covered = sorted(i for shard in evaluation for b in shard for i in b)
    assert covered == list(range(1001))


def test_evaluation_batches_are_sorted_by_length():
    lengths = _lengths()
    order = [i for b in LengthBucketSampler(lengths, 100, shuffle=False) for i in b]
    assert list(lengths[order]) == sorted(lengths)


def test_encoded_pairs_lengths_count_the_longer_side():
    pairs = EncodedPairs([[4, 5]], [[6, 7, 8, 9]])
    assert pairs.lengths().tolist() == [5]
    assert torch.equal(pairs[0][1], torch.tensor([4, 5, EOS_ID]))


def test_evaluation_batches_give_every_rank_the_same_nonzero_count():
    lengths = _lengths(12)
    for world_size in (2, 3, 5):
        shards = [
            list(LengthBucketSampler(lengths, 100, shuffle=False, world_size=world_size, rank=r))
            for r in range(world_size)
        ]
        assert len({len(shard) for shard in shards}) == 1 and len(shards[0]) >= 1
        covered = sorted(i for shard in shards for b in shard for i in b)
        assert covered == list(range(12))
    with pytest.raises(ValueError, match="cannot be shared"):
        list(LengthBucketSampler(lengths[:1], 100, shuffle=False, world_size=2, rank=0))
