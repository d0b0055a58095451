"""Paper-size RNNsearch on one GPU for a few hundred steps: target tokens/s and memory.

    python benchmarks/gpu_smoke.py [--steps 300] [--batch 80] [--vocab 30000] [--no-bf16]

Bahdanau et al.'s sizes (embedding 620, encoder 2x1000, decoder 1000, maxout 500, attention
1000), 30,000-word vocabularies, batches of 80 random sentence pairs of 10 to 50 words in
length buckets, Adadelta, gradient clipping at 1, bf16 autocast. Needs only torch (no data
pipeline, no Hydra), so it runs on a bare GPU machine; it prints figures and asserts nothing.
The 2014 paper trained at roughly 1,500 target tokens/s.
"""

from __future__ import annotations

import argparse
import time
from functools import partial

import torch

from alignmt.loss import token_cross_entropy
from alignmt.models.attention import AdditiveAttention
from alignmt.models.rnnsearch import RNNSearch

PAD, BOS, EOS = 0, 2, 3


def batches(vocab: int, batch: int, device, generator):
    """Endless length-bucketed random batches: (src, src_lengths, tgt_in, tgt_out)."""
    while True:
        length = int(torch.randint(10, 51, (1,), generator=generator))
        lengths = torch.randint(max(10, length - 3), length + 1, (batch,), generator=generator)
        src = torch.randint(4, vocab, (batch, length + 1), generator=generator)
        tgt = torch.randint(4, vocab, (batch, length + 1), generator=generator)
        positions = torch.arange(length + 1)
        src[positions >= lengths[:, None] + 1] = PAD
        src[torch.arange(batch), lengths] = EOS
        tgt_out = tgt.clone()
        tgt_out[positions >= lengths[:, None] + 1] = PAD
        tgt_out[torch.arange(batch), lengths] = EOS
        tgt_in = torch.cat([torch.full((batch, 1), BOS), tgt_out[:, :-1]], dim=1)
        tgt_in[tgt_in == EOS] = PAD
        yield src.to(device), lengths + 1, tgt_in.to(device), tgt_out.to(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--batch", type=int, default=80)
    parser.add_argument("--vocab", type=int, default=30000)
    parser.add_argument("--no-bf16", action="store_true")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    model = RNNSearch(
        args.vocab,
        args.vocab,
        620,
        1000,
        1000,
        500,
        attention=partial(AdditiveAttention, attention_size=1000),
        init="paper",
    ).to(device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0, rho=0.95, eps=1e-6)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=not args.no_bf16)
    data = batches(args.vocab, args.batch, device, torch.Generator().manual_seed(0))
    tokens, elapsed = 0, 0.0
    for step in range(args.warmup + args.steps):
        src, src_lengths, tgt_in, tgt_out = next(data)
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        with autocast:
            logits = model(src, src_lengths, tgt_in).logits
            loss = token_cross_entropy(logits.flatten(0, 1).float(), tgt_out.flatten(), PAD)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if step >= args.warmup:
            elapsed += time.perf_counter() - start
            tokens += int((tgt_out != PAD).sum())
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    params = sum(p.numel() for p in model.parameters()) / 1e6
    print(
        f"device {name}  RNNsearch {params:.1f}M parameters  batch {args.batch}  "
        f"bf16 {not args.no_bf16}"
    )
    print(
        f"train {tokens / elapsed:12.0f} target tokens/s over {args.steps} steps "
        f"(loss {loss.item():.3f})"
    )
    if device.type == "cuda":
        print(f"peak memory {torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
