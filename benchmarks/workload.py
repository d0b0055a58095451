"""alignmt on the shared speed workload (../shared/bench), measured like the peer toolkits.

    python benchmarks/workload.py train WORKLOAD_DIR SCRATCH_DIR [--model luong|rnnsearch]
        [--steps 60] [--warmup 10] [--override KEY=VALUE ...] [--resume CKPT]
        [--save-as NAME] [--save-every N] [--untimed] [--threads 2]
    python benchmarks/workload.py decode WORKLOAD_DIR SCRATCH_DIR --checkpoint PATH
        [--search greedy|beam5] [--batch-size 64] [--min-length 0] [--max-length 100]
        [--split test|dev] [--sentences N] [--precision float32|bfloat16|int8|int8_fp16]
        [--output FILE] [--threads 2]

Prints one JSON dict of figures, named as benchmarks/peers/peers.py names them.
`luong` is the configuration the peers run (embeddings 256, bidirectional GRU encoder of 256
per direction, one GRU decoder layer of 512 in Luong's order with input feeding, additive
attention, no dropout, batches of 64 sentences, Adam 1e-3); `rnnsearch` is Bahdanau et al.'s
decoder at the same sizes (maxout 256). `--override` adds Hydra overrides (a coverage model,
scheduled sampling, smaller sizes for tests).

Training is the real training path (Lightning, TranslationTask, length-bucketed batches); a
callback takes the time at the end of every step and counts the batch's non-padding target
tokens (words + end of sentence): `train_tok_per_s` is the tokens of steps warmup+1..steps
over the time between the end of step `warmup` and the end of step `steps`. Peak memory is
the process's own high-water mark (no worker processes). `train_gflop_per_s` counts the
matrix products of a training step (torch's FlopCounterMode) at that rate, beside this
machine's float32 matrix-product rate with the same threads. With `--resume`, training goes
on from a checkpoint up to `--steps` in all; `--save-every N` writes SCRATCH_DIR/NAME-STEP.ckpt
every N steps instead of NAME.ckpt at the end, and `--untimed` leaves the figures out (how
compare.py's trained models are made).

Decoding times only the search over the split's sentences (batches sorted by source length,
as evaluation batches them); `output_tokens` counts words without the end of sentence, and
the translations go to `--output` in the split's order.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path

MODELS = {
    "luong": [
        "model=luong",
        "model/attention=additive",
        "model.rnn_type=gru",
        "model.bidirectional_encoder=true",
        "model.hidden_size=512",
        "model.embedding_dim=256",
        "model.num_layers=1",
        "model.input_feeding=true",
        "model.attention.attention_size=null",  # the decoder size, as the peers
    ],
    "rnnsearch": [
        "model=rnnsearch",
        "model.embedding_dim=256",
        "model.encoder_hidden_size=256",
        "model.decoder_hidden_size=512",
        "model.maxout_size=256",
        "model.attention.attention_size=null",
    ],
}
SPLITS = {"train": "train", "dev": "valid", "test": "test"}  # workload file -> alignmt split


def data_overrides(workload: Path) -> list[str]:
    files = []
    for name, split in SPLITS.items():
        files += [
            f"data.corpus.{split}.source={workload / name}.src",
            f"data.corpus.{split}.target={workload / name}.trg",
        ]
    return [
        "data=text_files",
        "data/tokenizer=whitespace",
        "data.max_length=100",
        "data.batch_size=64",
        "data.eval_batch_size=64",
        *files,
    ]


def compose(workload: Path, scratch: Path, model: str, extra: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from alignmt.config import CONF_DIR

    overrides = [
        *data_overrides(workload),
        *MODELS[model],
        "optim.lr=0.001",
        f"data.cache_dir={scratch / 'cache'}",
        f"run_dir={scratch / 'alignmt-run'}",
        *extra,
    ]
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return hydra_compose("train", overrides=overrides)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def trainer(steps: int, callbacks: list):
    import pytorch_lightning as pl

    saving = any(isinstance(c, pl.callbacks.ModelCheckpoint) for c in callbacks)
    return pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=steps,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=saving,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        gradient_clip_val=1.0,
        use_distributed_sampler=False,
        callbacks=callbacks,
    )


def train(args) -> dict:
    import pytorch_lightning as pl

    from alignmt.build import build

    class Clock(pl.Callback):
        def __init__(self):
            self.ends, self.tokens = [], []

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            self.ends.append(time.perf_counter())
            self.tokens.append(batch.num_target_tokens)

    name = args.save_as or f"alignmt-{args.model}"
    clock = Clock()
    callbacks = [clock]
    if args.save_every:
        if args.steps % args.save_every:
            raise ValueError(
                f"--steps {args.steps}: not a multiple of --save-every {args.save_every}"
            )
        callbacks.append(pl.callbacks.ModelCheckpoint(
            dirpath=args.scratch, filename=f"{name}-{{step}}", auto_insert_metric_name=False,
            every_n_train_steps=args.save_every, save_top_k=-1,
        ))  # fmt: skip
    cfg = compose(args.workload, args.scratch, args.model, args.override)
    started = time.perf_counter()
    built = build(cfg)
    fit = trainer(args.steps, callbacks)
    fit.fit(built.task, datamodule=built.datamodule, ckpt_path=args.resume)
    peak_rss = peak_rss_mib()  # before the FLOP count and the matmul peak below allocate more
    if args.save_every:
        checkpoint = args.scratch / f"{name}-{args.steps}.ckpt"
    else:
        checkpoint = args.scratch / f"{name}.ckpt"
        fit.save_checkpoint(checkpoint)
    figures = {
        "system": f"alignmt-{args.model}",
        "steps": args.steps,
        "overrides": args.override,
        "peak_rss_main_mib": peak_rss,
        "parameters": sum(p.numel() for p in built.model.parameters()),
        "checkpoint": str(checkpoint),
    }
    if not args.untimed:
        figures.update(timing(clock, built, args.steps, args.warmup))
    figures["wall_s"] = time.perf_counter() - started
    return figures


def timing(clock, built, steps: int, warmup: int) -> dict:
    """Training rates over steps warmup+1..steps, and how much of the machine they use."""
    seconds = clock.ends[steps - 1] - clock.ends[warmup - 1]
    tokens = sum(clock.tokens[warmup:steps])
    batch = next(iter(built.datamodule.train_dataloader()))
    flops_per_token = training_flops_per_token(built.task, batch)
    gflops = flops_per_token * tokens / seconds / 1e9
    peak = matmul_peak_gflops()
    return {
        "warmup": warmup,
        "seconds": seconds,
        "target_tokens": tokens,
        "train_tok_per_s": tokens / seconds,
        "sentences_per_s": built.datamodule.batch_size * (steps - warmup) / seconds,
        "flops_per_target_token": flops_per_token,
        "train_gflop_per_s": gflops,
        "matmul_peak_gflop_per_s": peak,
        "matmul_peak_percent": 100 * gflops / peak,
    }


def training_flops_per_token(task, batch) -> float:
    """Floating-point operations of one training step (forward and backward, as counted by
    torch's FlopCounterMode: matrix products and convolutions), per target token."""
    import torch.nn.functional as F
    from torch.utils.flop_counter import FlopCounterMode

    from alignmt.special_tokens import PAD_ID

    counter = FlopCounterMode(display=False)
    with counter:
        logits = task.model(batch.src, batch.src_lengths, batch.tgt_in).logits
        loss = F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD_ID)
        loss.backward()
    task.model.zero_grad(set_to_none=True)
    return counter.get_total_flops() / batch.num_target_tokens


def matmul_peak_gflops(n: int = 2048, repeats: int = 10) -> float:
    """This machine's float32 matrix-product rate with the threads in use: the reference for
    how much of the hardware training uses."""
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):
        a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * n**3 * repeats / (time.perf_counter() - start) / 1e9


def make_search(args):
    from alignmt.decoding import BeamSearch, GreedySearch

    lengths = {"max_length": args.max_length, "min_length": args.min_length}
    lengths["precision"] = args.precision
    if args.search == "greedy":
        return GreedySearch(**lengths)
    return BeamSearch(beam_size=5, stopping=args.stopping, **lengths)


def decode(args) -> dict:
    import torch

    from alignmt.build import restore
    from alignmt.data.batching import LengthBucketSampler, collate

    started = time.perf_counter()
    restored = restore(args.checkpoint)
    dm = restored.datamodule
    dm.setup("test")
    pairs = dm.pairs[SPLITS[args.split]]
    n = len(pairs) if args.sentences is None else min(args.sentences, len(pairs))
    lengths = pairs.lengths()[:n]
    batches = [
        collate([pairs[i] for i in indices])
        for indices in LengthBucketSampler(lengths, args.batch_size, shuffle=False)
    ]
    search, model, vocab = make_search(args), restored.model.eval(), dm.target_vocab
    outputs: list[str | None] = [None] * n
    words = capped = 0
    seconds = 0.0
    for batch in batches:
        start = time.perf_counter()
        with torch.inference_mode():
            nbest = search(model, batch.src, batch.src_lengths)
        seconds += time.perf_counter() - start
        for i, hyps in zip(batch.indices.tolist(), nbest, strict=True):
            tokens = hyps[0].tokens
            outputs[i] = " ".join(vocab.decode(tokens))
            words += len(tokens)
            capped += len(tokens) >= args.max_length
    if args.output:
        args.output.write_text("".join(line + "\n" for line in outputs))
    return {
        "system": f"alignmt ({args.checkpoint.stem})",
        "search": args.search,
        "stopping": args.stopping if args.search != "greedy" else None,
        "batch_size": args.batch_size,
        "min_length": args.min_length,
        "max_length": args.max_length,
        "split": args.split,
        "precision": args.precision,
        "sentences": n,
        "decode_s": seconds,
        "output_tokens": words,
        "out_tok_per_s": words / seconds,
        "sent_per_s": n / seconds,
        "capped_sentences": capped,
        "mean_output_len": words / n,
        "wall_s": time.perf_counter() - started,
        "peak_rss_main_mib": peak_rss_mib(),
        "output": str(args.output) if args.output else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["train", "decode"])
    parser.add_argument("workload", type=Path)
    parser.add_argument("scratch", type=Path)
    parser.add_argument("--model", choices=sorted(MODELS), default="luong")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--override", action="append", default=[], help="a Hydra override")
    parser.add_argument("--resume", type=Path, default=None, help="go on from this checkpoint")
    parser.add_argument("--untimed", action="store_true", help="only train (no figures)")
    parser.add_argument("--save-as", default=None, help="checkpoint name in SCRATCH_DIR")
    parser.add_argument("--save-every", type=int, default=None, help="a checkpoint every N steps")
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--search", choices=["greedy", "beam5"], default="greedy")
    parser.add_argument("--stopping", choices=["exact", "early"], default="exact")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--min-length", type=int, default=0)
    parser.add_argument("--max-length", type=int, default=100)
    parser.add_argument("--split", choices=["test", "dev"], default="test")
    precisions = ["float32", "bfloat16", "int8", "int8_fp16"]  # decoding/precision.py's
    parser.add_argument("--precision", choices=precisions, default="float32")
    parser.add_argument("--sentences", type=int, default=None)
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch

    torch.set_num_threads(args.threads)
    args.scratch.mkdir(parents=True, exist_ok=True)
    figures = train(args) if args.command == "train" else decode(args)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
