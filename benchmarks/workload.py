"""alignmt on the shared speed workload (../shared/bench), measured like the peer toolkits.

    python benchmarks/workload.py train WORKLOAD_DIR SCRATCH_DIR [--model luong|rnnsearch]
        [--steps 60] [--warmup 10] [--threads 2]
    python benchmarks/workload.py decode WORKLOAD_DIR SCRATCH_DIR --checkpoint PATH
        [--search greedy|beam5] [--sentences N]

Prints one JSON dict of figures, named as benchmarks/peers/peers.py names them.
`luong` is the configuration the peers run (embeddings 256, bidirectional GRU encoder of 256
per direction, one GRU decoder layer of 512 in Luong's order with input feeding, additive
attention, no dropout, batches of 64 sentences, Adam 1e-3); `rnnsearch` is Bahdanau et al.'s
decoder at the same sizes (maxout 256).

Training is the real training path (Lightning, TranslationTask, length-bucketed batches); a
callback takes the time at the end of every step and counts the batch's non-padding target
tokens (words + end of sentence): `train_tok_per_s` is the tokens of steps warmup+1..steps
over the time between the end of step `warmup` and the end of step `steps`. Peak memory is
the process's own high-water mark (no worker processes). Decoding times only the search over
the 500 test sentences (batches of 64, sorted by length, at most 100 output tokens, like the
peers' generation time); `output_tokens` counts words without the end of sentence.
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


def data_overrides(workload: Path) -> list[str]:
    files = []
    for split, name in (("train", "train"), ("valid", "dev"), ("test", "test")):
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


def train(workload: Path, scratch: Path, model: str, steps: int, warmup: int) -> dict:
    import pytorch_lightning as pl

    from alignmt.build import build

    class Clock(pl.Callback):
        def __init__(self):
            self.ends, self.tokens = [], []

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            self.ends.append(time.perf_counter())
            self.tokens.append(batch.num_target_tokens)

    cfg = compose(workload, scratch, model, [])
    started = time.perf_counter()
    built = build(cfg)
    dm, net, task = built.datamodule, built.model, built.task
    clock = Clock()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=steps,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        gradient_clip_val=1.0,
        use_distributed_sampler=False,
        callbacks=[clock],
    )
    trainer.fit(task, datamodule=dm)
    peak_rss = peak_rss_mib()  # before the FLOP count and the matmul peak below allocate more
    checkpoint = scratch / f"alignmt-{model}.ckpt"
    trainer.save_checkpoint(checkpoint)
    seconds = clock.ends[steps - 1] - clock.ends[warmup - 1]
    tokens = sum(clock.tokens[warmup:steps])
    flops_per_token = training_flops_per_token(task, next(iter(dm.train_dataloader())))
    return {
        "flops_per_target_token": flops_per_token,
        "train_gflop_per_s": flops_per_token * tokens / seconds / 1e9,
        "matmul_peak_gflop_per_s": matmul_peak_gflops(),
        "system": f"alignmt-{model}",
        "steps": steps,
        "warmup": warmup,
        "seconds": seconds,
        "target_tokens": tokens,
        "train_tok_per_s": tokens / seconds,
        "sentences_per_s": 64 * (steps - warmup) / seconds,
        "peak_rss_main_mib": peak_rss,
        "parameters": sum(p.numel() for p in net.parameters()),
        "wall_s": time.perf_counter() - started,
        "checkpoint": str(checkpoint),
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


def decode(workload: Path, checkpoint: Path, search_name: str, sentences: int | None) -> dict:
    import torch

    from alignmt.build import restore
    from alignmt.decoding import BeamSearch, GreedySearch

    started = time.perf_counter()
    restored = restore(checkpoint)
    dm = restored.datamodule
    dm.setup("test")
    search = (
        GreedySearch(max_length_ratio=0.0, max_length_offset=100)
        if search_name == "greedy"
        else BeamSearch(beam_size=5, max_length_ratio=0.0, max_length_offset=100)
    )
    decoded = words = capped = 0
    seconds = 0.0
    for batch in dm.test_dataloader():
        if sentences is not None and decoded >= sentences:
            break
        start = time.perf_counter()
        with torch.inference_mode():
            nbest = search(restored.model, batch.src, batch.src_lengths)
        seconds += time.perf_counter() - start
        lengths = [len(hyps[0].tokens) for hyps in nbest]
        decoded += len(lengths)
        words += sum(lengths)
        capped += sum(n >= 100 for n in lengths)
    return {
        "system": f"alignmt ({checkpoint.stem})",
        "search": search_name,
        "sentences": decoded,
        "decode_s": seconds,
        "output_tokens": words,
        "out_tok_per_s": words / seconds,
        "sent_per_s": decoded / seconds,
        "capped_sentences": capped,
        "mean_output_len": words / decoded,
        "wall_s": time.perf_counter() - started,
        "peak_rss_main_mib": peak_rss_mib(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["train", "decode"])
    parser.add_argument("workload", type=Path)
    parser.add_argument("scratch", type=Path)
    parser.add_argument("--model", choices=sorted(MODELS), default="luong")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--search", choices=["greedy", "beam5"], default="greedy")
    parser.add_argument("--sentences", type=int, default=None)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch

    torch.set_num_threads(args.threads)
    args.scratch.mkdir(parents=True, exist_ok=True)
    if args.command == "train":
        figures = train(args.workload, args.scratch, args.model, args.steps, args.warmup)
    else:
        figures = decode(args.workload, args.checkpoint, args.search, args.sentences)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
