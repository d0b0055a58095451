"""Decoding speed of a trained checkpoint: sentences/s and output tokens/s by search and batch size.

    python benchmarks/decoding.py --ckpt PATH [--batch-sizes 1 8 16 32 64 128] [--beam-size 5]
                                  [--length-penalty 0] [--searches greedy beam]
                                  [--sentences 300] [--device cpu]

Any alignmt checkpoint works (toy corpus, Multi30k, ...): its test split is rebuilt from the
checkpoint's config. `--sentences` of them, evenly spread over the split so every length is
represented, are batched by length as evaluation does; each search and batch size decodes them
once after one warm-up batch. Output tokens are the words of the best translation, without
[EOS]. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from alignmt.build import restore
from alignmt.data.batching import LengthBucketSampler, collate
from alignmt.decoding import BeamSearch, GreedySearch


def decode_speed(model, search, pairs, indices, batch_size: int, device):
    """(sentences/s, output tokens/s, seconds) of `search` over `indices` of `pairs`."""
    lengths = pairs.lengths()[indices]
    batches = [
        collate([pairs[int(indices[i])] for i in batch])
        for batch in LengthBucketSampler(lengths, batch_size, shuffle=False)
    ]
    batches = [(b.src.to(device), b.src_lengths) for b in batches]
    search(model, *batches[0])  # warm-up: allocator, kernels
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    tokens = 0
    start = time.perf_counter()
    for src, src_lengths in batches:
        tokens += sum(len(nbest[0].tokens) for nbest in search(model, src, src_lengths))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    return len(indices) / seconds, tokens / seconds, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt", required=True, help="an alignmt checkpoint")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 16, 32, 64, 128])
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--length-penalty", type=float, default=0.0, help="GNMT alpha")
    parser.add_argument(
        "--searches", nargs="+", choices=["greedy", "beam"], default=["greedy", "beam"]
    )
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()

    device = torch.device(args.device)
    restored = restore(args.ckpt)
    model = restored.model.to(device)
    dm = restored.datamodule
    dm.prepare_data()
    dm.setup("test")
    pairs = dm.pairs["test"]
    n = min(args.sentences, len(pairs))
    indices = np.linspace(0, len(pairs) - 1, n).round().astype(np.int64)
    mean_words = np.mean([len(pairs[int(i)][1]) - 1 for i in indices])  # without [EOS]
    print(
        f"{args.ckpt}: {restored.config.model._target_}, {n} of {len(pairs)} test sentences "
        f"({mean_words:.1f} source words on average), device {device}, "
        f"threads {torch.get_num_threads()}"
    )
    searches = {
        "greedy": GreedySearch(),
        f"beam {args.beam_size}": BeamSearch(
            beam_size=args.beam_size, length_penalty=args.length_penalty
        ),
    }
    searches = {name: s for name, s in searches.items() if name.split()[0] in args.searches}
    print(f"{'search':<8} {'batch':>5} {'sentences/s':>12} {'tokens/s':>10} {'seconds':>8}")
    for name, search in searches.items():
        for batch_size in args.batch_sizes:
            sentences_per_sec, tokens_per_sec, seconds = decode_speed(
                model, search, pairs, indices, batch_size, device
            )
            print(
                f"{name:<8} {batch_size:>5} {sentences_per_sec:>12.1f} {tokens_per_sec:>10.0f} "
                f"{seconds:>8.1f}"
            )


if __name__ == "__main__":
    main()
