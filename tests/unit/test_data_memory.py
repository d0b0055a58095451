"""What the training data costs in memory: cache pages handed back, narrow index arrays."""

import os
import pickle
import sys
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pytest

from alignmt.data import HubCorpus, TranslationDataModule
from alignmt.data.batching import EncodedPairs, LengthBucketSampler, PairBatches
from alignmt.data.mapped import RECORD_BATCH_ROWS
from alignmt.data.replica import write_hub_replica
from alignmt.special_tokens import EOS_ID

MIB = 2**20


def rss_file_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssFile:"):
            return int(line.split()[1])
    raise AssertionError("no RssFile in /proc/self/status")


def encoded_cache(path: Path, pairs: int, length: int) -> datasets.Dataset:
    """An encoded cache file as `datasets` writes one (an Arrow IPC stream), pair i holding the
    ids i, i+1, ... on both sides."""
    offsets = pa.array(np.arange(0, (pairs + 1) * length, length, dtype=np.int32))
    values = np.add.outer(np.arange(pairs), np.arange(length)).astype(np.int32).ravel()
    ids = pa.ListArray.from_arrays(offsets, pa.array(values))
    table = pa.table({"source_ids": ids, "target_ids": ids})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=pairs // 4)
    return datasets.Dataset.from_file(str(path))


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/status")
def test_reading_every_pair_maps_none_of_the_cache_in_and_the_ids_stay_right(tmp_path):
    pairs = EncodedPairs.from_arrow(encoded_cache(tmp_path / "ids.arrow", 4_000, 2_000))
    size_kib = (tmp_path / "ids.arrow").stat().st_size // 1024  # 61 MiB
    before = rss_file_kib()
    assert sum(int(pairs[i][2].sum()) for i in range(len(pairs))) > 0  # every pair read
    assert rss_file_kib() - before < 0.05 * size_kib
    assert pairs[1234][2].tolist() == list(range(1234, 1234 + 2_000))
    assert pairs[1234][1].tolist() == [*range(1234, 1234 + 2_000), EOS_ID]


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/status")
def test_pages_read_through_the_map_are_handed_back(tmp_path):
    pairs = EncodedPairs.from_arrow(encoded_cache(tmp_path / "ids.arrow", 4_000, 2_000))
    size_kib = (tmp_path / "ids.arrow").stat().st_size // 1024
    before = rss_file_kib()
    assert sum(int(v.sum()) for v in pairs.targets.values) > 0  # the map's pages, all read
    read = rss_file_kib()
    pairs.release()
    assert read - before > 0.4 * size_kib  # the target half of the file
    assert rss_file_kib() - before < 0.05 * size_kib


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/status")
def test_building_a_whole_epoch_of_batches_keeps_the_resident_set_flat(tmp_path):
    pairs = EncodedPairs.from_arrow(encoded_cache(tmp_path / "ids.arrow", 4_000, 2_000))
    size_kib = (tmp_path / "ids.arrow").stat().st_size // 1024
    batches = PairBatches(pairs)
    before = rss_file_kib()
    highest = before
    for batch in LengthBucketSampler(pairs.lengths(), 10, seed=0):
        batches[batch]
        highest = max(highest, rss_file_kib())
    assert highest - before < 0.05 * size_kib


def test_a_copy_in_another_process_reads_its_own_arrays(tmp_path):
    """File numbers are per process: a pickled copy (a spawned worker) must not use them. Here
    the original's files are closed and their numbers taken by a file of other bytes."""
    pairs = EncodedPairs.from_arrow(encoded_cache(tmp_path / "ids.arrow", 100, 7))
    copy = pickle.loads(pickle.dumps(pairs))
    for f in pairs.mapped._files:
        f.close()
    (tmp_path / "other").write_bytes(bytes(range(256)) * 64)
    others = [open(tmp_path / "other", "rb") for _ in range(4)]  # noqa: SIM115
    try:
        assert copy[42][2].tolist() == list(range(42, 49))
    finally:
        for f in others:
            f.close()


def test_ids_read_through_the_maps_equal_those_of_datasets_own(tmp_path):
    dataset = encoded_cache(tmp_path / "ids.arrow", 100, 7)
    mapped = EncodedPairs.from_arrow(dataset)
    in_memory = EncodedPairs.from_arrow(datasets.Dataset(dataset.data.table))
    assert mapped.mapped is not None and in_memory.mapped is None
    for i in (0, 24, 25, 99):  # chunks of 25 pairs
        assert mapped[i][1].tolist() == in_memory[i][1].tolist()
        assert mapped[i][2].tolist() == in_memory[i][2].tolist()


@pytest.mark.parametrize("max_tokens", [None, 120])
def test_batches_do_not_depend_on_the_width_of_the_length_array(max_tokens):
    lengths = np.random.default_rng(0).integers(1, 40, size=5_000)
    for epoch in (0, 3):
        orders = []
        for dtype in (np.int16, np.int32, np.int64):
            sampler = LengthBucketSampler(
                lengths.astype(dtype), 16, max_tokens=max_tokens, seed=5, world_size=2, rank=1
            )
            sampler.set_epoch(epoch)
            orders.append([list(b) for b in sampler])
        assert orders[0] == orders[1] == orders[2]


def test_an_epoch_is_a_seeded_permutation_sorted_in_pools_and_cut_into_batches():
    """The definition, written out: shuffle with the (seed, epoch) generator, sort each pool of
    `pool_batches` batches by length, cut into batches of `batch_size`, shuffle the batches."""
    lengths = np.random.default_rng(1).integers(1, 60, size=1_000)
    sampler = LengthBucketSampler(lengths.astype(np.int32), 8, seed=3, pool_batches=5)
    sampler.set_epoch(2)
    rng = np.random.default_rng((3, 2))
    order = rng.permutation(1_000)
    pools = [order[s : s + 40] for s in range(0, 1_000, 40)]
    order = np.concatenate([p[np.argsort(lengths[p], kind="stable")] for p in pools])
    batches = [order[s : s + 8].tolist() for s in range(0, 1_000, 8)]
    shuffled = np.arange(len(batches))
    rng.shuffle(shuffled)
    assert [list(b) for b in sampler] == [batches[k] for k in shuffled]


def record_batch_rows(path: Path) -> list[int]:
    with pa.memory_map(str(path)) as source:
        return [batch.num_rows for batch in pa.ipc.open_stream(source)]


def test_every_arrow_file_of_the_training_data_has_large_record_batches(tmp_path):
    """Opening a file reads every record batch's header (and maps in 64 KiB around each): the
    hub's Arrow copy and both caches are written RECORD_BATCH_ROWS rows a batch, not 1,000."""
    n = 2 * RECORD_BATCH_ROWS + 123
    words = np.random.default_rng(0).integers(0, 50, size=(n, 3))
    text = [" ".join(f"w{w}" for w in row) for row in words]
    small = {"en": text[:10], "fr": text[:10]}
    splits = {"train": {"en": text, "fr": text}, "validation": small, "test": small}
    write_hub_replica(tmp_path / "wmt14", {"fr-en": splits}, train_shards=1)
    corpus = HubCorpus(str(tmp_path / "wmt14"), "fr-en", cache_dir=str(tmp_path / "hf"))
    module = TranslationDataModule(corpus, cache_dir=str(tmp_path / "cache"), num_proc=1)
    module.prepare_data()
    files = [f for f in tmp_path.rglob("*.arrow") if len(datasets.Dataset.from_file(str(f))) == n]
    assert {f.parts[-2] for f in files} >= {"tokenized", "encoded"} and len(files) == 3
    for f in files:
        assert record_batch_rows(f) == [RECORD_BATCH_ROWS, RECORD_BATCH_ROWS, 123], f


def test_a_cache_file_cut_short_while_in_use_is_an_error_naming_it(tmp_path):
    path = tmp_path / "ids.arrow"
    pairs = EncodedPairs.from_arrow(encoded_cache(path, 100, 7))
    os.truncate(path, path.stat().st_size // 2)
    with pytest.raises(OSError, match=f"cache file {path} ends at byte"):
        pairs[99]
