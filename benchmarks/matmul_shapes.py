"""How fast this machine multiplies the matrices a Luong training step multiplies, beside the
2048 x 2048 x 2048 product that workload.py's matmul peak measures.

    python benchmarks/matmul_shapes.py [--threads 2] [--repeats 5]

The recurrence multiplies a batch of 64 states per time step; such thin products run below
the square one's rate whatever else the step does, so their rate bounds the share of the peak
that training can reach. Shapes (M x K x N) default to the shared workload's Luong model;
rates are medians over repeats that alternate the shapes, in one process.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def shapes(batch: int, hidden: int, attention: int, encoder: int, vocab: int, tokens: int):
    return {
        "peak (workload.py)": (2048, 2048, 2048),
        "decoder s' projection": (batch, hidden, attention + 4 * hidden),
        "decoder input feed W_f": (batch, hidden, 3 * hidden),
        "decoder backward d s'": (batch, attention + 4 * hidden, hidden),
        "encoder W_hh h": (batch, encoder, 3 * encoder),
        "output layer": (tokens, hidden, vocab),
        "output layer d W": (vocab, tokens, hidden),
    }


def gflops(m: int, k: int, n: int, flops_per_call: float = 2e10) -> float:
    a, b, out = torch.randn(m, k), torch.randn(k, n), torch.empty(m, n)
    calls = max(3, int(flops_per_call / (2 * m * k * n)))
    for _ in range(3):
        torch.mm(a, b, out=out)
    start = time.perf_counter()
    for _ in range(calls):
        torch.mm(a, b, out=out)
    return 2 * m * k * n * calls / (time.perf_counter() - start) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--attention", type=int, default=512)
    parser.add_argument("--encoder", type=int, default=256, help="per direction")
    parser.add_argument("--vocab", type=int, default=8004)
    parser.add_argument("--tokens", type=int, default=3200, help="target positions per batch")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    table = shapes(args.batch, args.hidden, args.attention, args.encoder, args.vocab, args.tokens)
    rates = {name: [] for name in table}
    for _ in range(args.repeats):
        for name, shape in table.items():
            rates[name].append(gflops(*shape))
    peak = statistics.median(rates["peak (workload.py)"])
    print(f"| product | M x K x N | GFLOP/s (median of {args.repeats}) | / peak |")
    print("|---|---|---|---|")
    for name, shape in table.items():
        rate = statistics.median(rates[name])
        dims = " x ".join(f"{d:,}" for d in shape)
        print(f"| {name} | {dims} | {rate:.1f} | {100 * rate / peak:.1f}% |")


if __name__ == "__main__":
    main()
