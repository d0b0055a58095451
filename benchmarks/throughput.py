"""Training and decoding speed of one config: target tokens/s, sentences/s, peak memory.

    python benchmarks/throughput.py [hydra overrides ...] [--steps 60] [--warmup 10]

Training is timed over real length-bucketed batches of the configured corpus (forward, loss,
backward, clipping, optimiser step: what a training step does, without Lightning's loop);
decoding is greedy search over the test split. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import resource
import time

import torch
from hydra import compose, initialize_config_dir

from alignmt.checkpoint import load_checkpoint
from alignmt.config import CONF_DIR, instantiate
from alignmt.loss import token_cross_entropy
from alignmt.runtime import keep_freed_memory
from alignmt.special_tokens import PAD_ID


def peak_memory_mib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10  # Linux: KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--decode-sentences", type=int, default=600)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--ckpt", default=None, help="decode with these weights (trained model)")
    parser.add_argument("--unfused", action="store_true", help="plain autograd recurrence")
    parser.add_argument("--default-allocator", action="store_true", help="glibc defaults")
    args = parser.parse_args()
    if not args.default_allocator:
        keep_freed_memory()

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("train", overrides=["run_dir=/tmp/alignmt-bench", *args.overrides])
    torch.manual_seed(cfg.seed)
    device = torch.device(args.device)
    dm = instantiate(cfg.data, seed=cfg.seed)
    dm.prepare_data()
    dm.setup("fit")
    model = instantiate(
        cfg.model, src_vocab_size=len(dm.source_vocab), tgt_vocab_size=len(dm.target_vocab)
    ).to(device)
    if args.unfused:
        model.decoder.fused = False
    optimizer = instantiate(cfg.optim)(model.parameters())
    clip = cfg.trainer.get("gradient_clip_val") or 0.0
    params = sum(p.numel() for p in model.parameters())
    print(
        f"model {cfg.model._target_}  {params / 1e6:.2f}M parameters  device {device}  "
        f"threads {torch.get_num_threads()}"
    )

    batches = iter(dm.train_dataloader())
    tokens = sentences = 0
    elapsed = 0.0
    for step in range(args.warmup + args.steps):
        batch = next(batches)
        src, tgt_in, tgt_out = (t.to(device) for t in (batch.src, batch.tgt_in, batch.tgt_out))
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        logits = model(src, batch.src_lengths, tgt_in).logits
        loss = token_cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD_ID)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if step >= args.warmup:
            elapsed += time.perf_counter() - start
            tokens += int((batch.tgt_out != PAD_ID).sum())
            sentences += len(batch)
    print(
        f"train   {tokens / elapsed:10.0f} target tokens/s  {sentences / elapsed:8.1f} "
        f"sentences/s  ({args.steps} steps after {args.warmup} warm-up, loss {loss.item():.3f})"
    )

    if args.ckpt:
        model = load_checkpoint(args.ckpt).model.to(device)
    model.eval()
    search = instantiate(cfg.decoding)
    decoded = words = 0
    start = time.perf_counter()
    for batch in dm.test_dataloader():
        hypotheses = search(model, batch.src.to(device), batch.src_lengths)
        words += sum(len(nbest[0].tokens) + 1 for nbest in hypotheses)
        decoded += len(batch)
        if decoded >= args.decode_sentences:
            break
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    state = "trained" if args.ckpt else "untrained"
    print(
        f"greedy  {decoded / seconds:10.1f} sentences/s  {words / seconds:8.0f} output tokens/s  "
        f"(test split, batch {dm.eval_batch_size}, {state} model)"
    )
    print(f"peak memory {peak_memory_mib(device):.0f} MiB")


if __name__ == "__main__":
    main()
