"""Data preparation at WMT scale, measured on a synthetic replica of the hub's wmt/wmt14 layout.

    python benchmarks/data_pipeline.py [--pairs 1000000] [--procs 1,all] [--tokenizers word,subword]
                                       [--memory-pairs 2000000]

Writes N en/fr pairs in the hub's layout (Parquet shards with a `Translation` feature and a
dataset card; sentence lengths 5-80 words, log-normal like news text; a Zipfian vocabulary of
200k types), then, for the word (Moses + 30k shortlist) and the subword (SentencePiece 32k)
tokenisers, prints: pairs/s of the download path (load + tokenise + encode) with one process
and with all, the per-core figure and the extrapolation to WMT'14 fr-en's 40.8M pairs; the
time to build one epoch of token-budget batches (measured on 40.8M lengths); the cache size
on disk; and, in a fresh process on the warm cache, the start-up time to the first training
batch and, over one whole epoch of training batches, the peak RSS (the kernel's high-water
mark) and the peaks of its two parts, the process's own (anonymous) memory and pages of
memory-mapped files (sampled every 10 ms). With `--memory-pairs M`, the word tokeniser's
warm start is measured again on a replica of M pairs, and the peaks are extrapolated to 40.8M
pairs along the line through the two sizes. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

WMT14_FR_EN_PAIRS = 40_836_715
SHARD_PAIRS = 100_000


def word_types(count: int, syllables: list[str], seed: int) -> np.ndarray:
    """`count` distinct pseudo-words of one to four syllables, in random order (the Zipf rank)."""
    rng = np.random.default_rng(seed)
    pool = np.array(["", *syllables])
    candidates = 3 * count
    picks = rng.integers(1, len(pool), size=(candidates, 4))
    picks[:, 1:] *= rng.random((candidates, 3)) < 0.6  # a syllable is added with odds 0.6
    words = pool[picks[:, 0]]
    for column in range(1, 4):
        words = np.char.add(words, pool[picks[:, column]])
    unique = np.unique(words)
    if len(unique) < count:
        raise ValueError(f"only {len(unique)} distinct words of these syllables")
    return rng.permutation(unique)[:count].astype(object)


SYLLABLES = {
    "en": [c + v for c in "bcdfghklmnprstvw" for v in ("a", "e", "i", "o", "u", "ea", "ou")],
    "fr": [c + v for c in "bcdfglmnprstv" for v in ("a", "e", "é", "i", "o", "u", "eu", "ai")],
}


def sentences(rng, types: np.ndarray, lengths: np.ndarray, lang: str) -> list[str]:
    """Sentences of the given lengths: Zipf-ranked words, capitalised, commas, a full stop."""
    ranks = np.arange(1, len(types) + 1, dtype=np.float64)
    cdf = np.cumsum(1.0 / ranks**1.1)
    ids = np.searchsorted(cdf, rng.random(int(lengths.sum())) * cdf[-1])
    words = types[np.minimum(ids, len(types) - 1)]
    commas = rng.random(len(words)) < 0.05
    words[commas] = words[commas] + ","
    if lang == "fr":
        elided = rng.random(len(words)) < 0.03
        words[elided] = "l'" + words[elided]
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    out = []
    for a, b in itertools.pairwise(bounds):
        text = " ".join(words[a:b])
        out.append(text[0].upper() + text[1:] + ".")
    return out


def write_replica(folder: Path, pairs: int, seed: int = 0) -> Path:
    """The synthetic fr-en replica: `pairs` training pairs, 3,000 for validation and test."""
    from alignmt.data.replica import write_hub_card, write_hub_shard

    rng = np.random.default_rng(seed)
    types = {
        lang: word_types(200_000, SYLLABLES[lang], seed + k) for k, lang in enumerate(SYLLABLES)
    }
    rows = {}
    for split, n in (("train", pairs), ("validation", 3000), ("test", 3000)):
        count = max(1, -(-n // SHARD_PAIRS))
        for k in range(count):
            size = min(SHARD_PAIRS, n - k * SHARD_PAIRS)
            english = np.clip(np.rint(rng.lognormal(np.log(22), 0.5, size)), 5, 80).astype(int)
            ratio = rng.normal(1.1, 0.1, size)
            french = np.clip(np.rint(english * ratio), 5, 80).astype(int)
            columns = {
                "fr": sentences(rng, types["fr"], french, "fr"),
                "en": sentences(rng, types["en"], english, "en"),
            }
            write_hub_shard(folder, "fr-en", split, k, count, columns)
        rows[split] = n
    write_hub_card(folder, {"fr-en": rows})
    return folder


def data_module(spec: dict):
    """The data module a WMT'14 en->fr run builds, on the replica, with `spec`'s settings."""
    from alignmt.data import (
        HubCorpus,
        MosesTokenizer,
        SentencePieceTokenizer,
        TranslationDataModule,
    )

    corpus = HubCorpus(spec["replica"], "fr-en", "en", "fr", cache_dir=spec["hf_cache"])
    if spec["tokenizer"] == "word":
        tokenizers = dict(tokenizer=MosesTokenizer("en"), target_tokenizer=MosesTokenizer("fr"))
        sizes = dict(source_vocab_size=spec["vocab"], target_vocab_size=spec["vocab"])
    else:
        tokenizers = dict(tokenizer=SentencePieceTokenizer("bpe", vocab_size=spec["sp_vocab"]))
        sizes = {}
    return TranslationDataModule(
        corpus,
        **tokenizers,
        **sizes,
        max_length=50,
        batch_size=80,
        max_tokens=spec["max_tokens"],
        cache_dir=spec["cache"],
        num_proc=spec["num_proc"],
    )


def disk_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def prepare(spec: dict) -> dict:
    """A cold preparation through the download path: seconds to load, and to tokenise+encode."""
    started = time.perf_counter()
    dm = data_module(spec)
    dm.corpus.prepare()
    loaded = time.perf_counter()
    dm.setup("fit")
    done = time.perf_counter()
    return {
        "load_s": loaded - started,
        "prepare_s": done - loaded,
        "lengths": dm.pairs["train"].lengths(),
    }


def vm_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


class ResidentPeaks(threading.Thread):
    """The largest RssAnon and RssFile seen, sampled every 10 ms until `stop()`."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peaks = {"RssAnon": 0, "RssFile": 0}
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(0.01):
            for field in self.peaks:
                self.peaks[field] = max(self.peaks[field], vm_kib(field))

    def stop(self) -> dict:
        self._done.set()
        self.join()
        return self.peaks


def warm_start(spec: dict, batches: int) -> dict:
    """In a fresh interpreter: from the start to the first training batch on the warm cache,
    then the rest of the epoch (or `batches` in all, if set); the peak RSS (VmHWM), the peaks
    of its parts, and the RSS after the imports."""
    import alignmt.data  # noqa: F401 (the imports are not the pipeline's memory)

    baseline = vm_kib("VmRSS")
    peaks = ResidentPeaks()
    peaks.start()
    dm = data_module(spec)
    dm.prepare_data()
    dm.setup("fit")
    loader = dm.train_dataloader()
    batches_of_epoch = iter(loader)
    next(batches_of_epoch)
    first = time.time()
    taken = 1
    for _ in batches_of_epoch if not batches else itertools.islice(batches_of_epoch, batches - 1):
        taken += 1
    resident = peaks.stop()
    return {
        "first_batch_at": first,
        "batches": taken,
        "peak_kib": vm_kib("VmHWM"),
        "baseline_kib": baseline,
        "anon_peak_kib": resident["RssAnon"],  # the process's own memory
        "file_peak_kib": resident["RssFile"],  # pages of memory-mapped files (the Arrow cache)
    }


def time_warm_start(spec: dict, batches: int) -> dict:
    started = time.time()
    script = [sys.executable, __file__, "--warm-start", json.dumps(spec), "--batches", str(batches)]
    done = subprocess.run(script, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"the warm start failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["first_batch_s"] = result.pop("first_batch_at") - started
    return result


def time_epoch_batches(pairs: int, max_tokens: int, lengths: np.ndarray) -> float:
    """Seconds to build one epoch of token-budget batches for `pairs` pairs whose lengths are
    drawn from the replica's."""
    from alignmt.data.batching import LengthBucketSampler

    tiled = np.random.default_rng(0).choice(lengths, size=pairs)
    sampler = LengthBucketSampler(tiled, batch_size=80, max_tokens=max_tokens, seed=1)
    started = time.perf_counter()
    count = len(sampler)
    elapsed = time.perf_counter() - started
    print(
        f"  one epoch of token-budget batches for {pairs:,} pairs: {count:,} batches "
        f"in {elapsed:.2f} s"
    )
    return elapsed


def report(name: str, n: int, procs: int, figures: dict) -> None:
    total = figures["load_s"] + figures["prepare_s"]
    rate = n / total
    per_core = rate / procs
    print(
        f"  {name}, {procs} process(es): load {figures['load_s']:.1f} s + tokenise/encode "
        f"{figures['prepare_s']:.1f} s = {rate:,.0f} pairs/s ({per_core:,.0f} per core); "
        f"40.8M pairs: {WMT14_FR_EN_PAIRS / rate / 3600:.2f} h here, "
        f"{WMT14_FR_EN_PAIRS / (per_core * 16) / 3600:.2f} h on 16 cores at this per-core rate"
    )


def run_tokenizer(
    args,
    work: Path,
    replica: Path,
    pairs: int,
    tokenizer: str,
    all_procs: int,
    procs_list: list[str],
) -> tuple[np.ndarray, dict]:
    """The figures of each process count; returns the lengths and the last warm start's."""
    from alignmt.data.encoding import cpu_count

    lengths = warm = None
    for procs in procs_list:
        count = all_procs if procs == "all" else int(procs)
        cache = work / f"cache-{tokenizer}-{count}"
        spec = dict(
            replica=str(replica),
            hf_cache=str(work / f"hf-{tokenizer}-{count}"),
            cache=str(cache),
            tokenizer=tokenizer,
            vocab=args.vocab,
            sp_vocab=args.sp_vocab,
            max_tokens=args.max_tokens,
            num_proc=count,
        )
        figures = prepare(spec)
        report(tokenizer, pairs, count, figures)
        print(
            f"  cache on disk: {disk_size(cache) / 2**20:,.0f} MiB (+ datasets' Arrow copy "
            f"{disk_size(Path(spec['hf_cache'])) / 2**20:,.0f} MiB); {cpu_count()} cores here"
        )
        warm = time_warm_start(spec, args.batches)
        gib = {k: v / 2**20 for k, v in warm.items() if k.endswith("_kib")}
        print(
            "  warm start, fresh process: first training batch after "
            f"{warm['first_batch_s']:.1f} s; over {warm['batches']:,} training batches peak "
            f"RSS {gib['peak_kib']:.2f} GiB ({gib['peak_kib'] - gib['baseline_kib']:.2f} GiB "
            f"beyond the {gib['baseline_kib']:.2f} GiB after the imports), of it at most "
            f"{gib['anon_peak_kib']:.2f} GiB anonymous and {gib['file_peak_kib']:.2f} GiB "
            "memory-mapped file pages"
        )
        lengths = figures["lengths"]
    return lengths, warm


def extrapolate_memory(small: tuple[int, dict], large: tuple[int, dict]) -> None:
    """The peaks at 40.8M pairs on the line through two replica sizes."""
    (n1, w1), (n2, w2) = small, large
    print(f"memory at {WMT14_FR_EN_PAIRS:,} pairs, on the line through {n1:,} and {n2:,} pairs:")
    parts = {
        "peak RSS beyond the imports": lambda w: w["peak_kib"] - w["baseline_kib"],
        "anonymous peak": lambda w: w["anon_peak_kib"],
        "file-backed peak": lambda w: w["file_peak_kib"],
    }
    for name, value in parts.items():
        a, b = value(w1) / 2**20, value(w2) / 2**20
        slope = (b - a) / (n2 - n1)
        at_wmt = b + slope * (WMT14_FR_EN_PAIRS - n2)
        print(
            f"  {name}: {a:.2f} GiB at {n1:,}, {b:.2f} GiB at {n2:,} "
            f"({slope * 1e6:.3f} GiB per million pairs): {at_wmt:.2f} GiB"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--procs", default="1,all", help="comma-separated; 'all': every core")
    parser.add_argument("--tokenizers", default="word,subword")
    parser.add_argument("--vocab", type=int, default=30_000)
    parser.add_argument("--sp-vocab", type=int, default=32_000)
    parser.add_argument("--max-tokens", type=int, default=4_000)
    parser.add_argument("--epoch-pairs", type=int, default=WMT14_FR_EN_PAIRS)
    parser.add_argument(
        "--batches", type=int, default=0, help="taken when measuring RSS (0: one whole epoch)"
    )
    parser.add_argument(
        "--memory-pairs", type=int, default=0, help="a second size for the memory extrapolation"
    )
    parser.add_argument("--workdir", default=None, help="kept if given; else a temporary one")
    parser.add_argument("--warm-start", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.warm_start:
        print(json.dumps(warm_start(json.loads(args.warm_start), args.batches)))
        return
    from alignmt.data.encoding import cpu_count

    args.procs = args.procs.split(",")
    work = Path(args.workdir or tempfile.mkdtemp(prefix="alignmt-data-bench-"))
    started = time.perf_counter()
    replica = write_replica(work / "wmt14", args.pairs)
    seconds = time.perf_counter() - started
    print(f"replica of {args.pairs:,} pairs written in {seconds:.1f} s: {replica}")
    try:
        lengths = word_warm = None
        for tokenizer in args.tokenizers.split(","):
            print(f"{tokenizer} tokeniser")
            lengths, warm = run_tokenizer(
                args, work, replica, args.pairs, tokenizer, cpu_count(), args.procs
            )
            word_warm = warm if tokenizer == "word" else word_warm
        if lengths is not None:
            time_epoch_batches(args.epoch_pairs, args.max_tokens, lengths)
        if args.memory_pairs:
            larger = write_replica(work / f"wmt14-{args.memory_pairs}", args.memory_pairs)
            print(f"word tokeniser, {args.memory_pairs:,} pairs")
            if word_warm is None:
                raise SystemExit("--memory-pairs extends the word tokeniser's figures")
            _, warm = run_tokenizer(
                args,
                work / "memory",
                larger,
                args.memory_pairs,
                "word",
                cpu_count(),
                [args.procs[-1]],
            )
            extrapolate_memory((args.pairs, word_warm), (args.memory_pairs, warm))
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
