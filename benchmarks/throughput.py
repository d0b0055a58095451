"""Training and decoding speed of one config: target tokens/s, sentences/s, peak memory.

    python benchmarks/throughput.py [hydra overrides ...] [--steps 60] [--warmup 10]

Training is timed over real length-bucketed batches of the configured corpus (forward, loss,
backward, clipping, optimiser step: what a training step does, without Lightning's loop);
decoding is greedy search over the test split. `--step-path` trains through the decoder's
step function instead of its declared teacher-forcing fast path. Figures are printed, never
asserted.
"""

from __future__ import annotations

import argparse
import resource
import time

import torch
from hydra import compose, initialize_config_dir

from alignmt.build import build, restore
from alignmt.config import CONF_DIR
from alignmt.loss import token_cross_entropy
from alignmt.special_tokens import PAD_ID


def peak_memory_mib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10  # Linux: KiB


def logits_of(model, batch, device, step_path: bool) -> torch.Tensor:
    src, tgt_in = batch.src.to(device), batch.tgt_in.to(device)
    if not step_path:
        return model(src, batch.src_lengths, tgt_in).logits
    memory, state = model.start(src, batch.src_lengths)
    return model.decoder.unroll(tgt_in, memory, state).logits


def time_training(built, args, device) -> None:
    model, cfg = built.model, built.cfg
    optimizer = built.task.configure_optimizers()
    if isinstance(optimizer, dict):
        optimizer = optimizer["optimizer"]
    clip = cfg.trainer.get("gradient_clip_val") or 0.0
    batches = iter(built.datamodule.train_dataloader())
    tokens = sentences = 0
    elapsed = 0.0
    for step in range(args.warmup + args.steps):
        batch = next(batches)
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        logits = logits_of(model, batch, device, args.step_path)
        loss = token_cross_entropy(
            logits.flatten(0, 1), batch.tgt_out.to(device).flatten(), ignore_index=PAD_ID
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if step >= args.warmup:
            elapsed += time.perf_counter() - start
            tokens += batch.num_target_tokens
            sentences += len(batch)
    print(
        f"train   {tokens / elapsed:10.0f} target tokens/s  {sentences / elapsed:8.1f} "
        f"sentences/s  ({args.steps} steps after {args.warmup} warm-up, loss {loss.item():.3f})"
    )


def time_decoding(built, args, device) -> None:
    translator = restore(args.ckpt).translator if args.ckpt else built.translator
    model = translator.model.to(device).eval()
    search = translator.search
    decoded = words = 0
    start = time.perf_counter()
    for batch in built.datamodule.test_dataloader():
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
        f"decode  {decoded / seconds:10.1f} sentences/s  {words / seconds:8.0f} output tokens/s  "
        f"(test split, batch {built.datamodule.eval_batch_size}, {state} model)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--decode-sentences", type=int, default=600)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--ckpt", default=None, help="decode with these weights (trained model)")
    parser.add_argument("--step-path", action="store_true", help="no teacher-forcing fast path")
    args = parser.parse_args()

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("train", overrides=["run_dir=/tmp/alignmt-bench", *args.overrides])
    device = torch.device(args.device)
    built = build(cfg)
    built.model.to(device)
    params = sum(p.numel() for p in built.model.parameters())
    print(
        f"model {cfg.model._target_}  {params / 1e6:.2f}M parameters  device {device}  "
        f"threads {torch.get_num_threads()}"
    )
    time_training(built, args, device)
    time_decoding(built, args, device)
    print(f"peak memory {peak_memory_mib(device):.0f} MiB")


if __name__ == "__main__":
    main()
