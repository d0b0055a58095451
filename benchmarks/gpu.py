"""Paper-size RNNsearch-50, Luong 4x1000 and RNNencdec on one GPU, through the training path
`alignmt-train` runs: target tokens/s, peak memory and MFU, the fast path against the plain
step path, and greedy and beam-12 decoding of 3,003 test sentences.

    python benchmarks/gpu.py [--out DIR] [--models rnnsearch luong rnnencdec]
        [--budgets 25000 50000 100000] [--steps 40] [--warmup 20] [--time-limit 450]
    python benchmarks/gpu.py --tiny         # the same lines on a CPU, at toy sizes (tests)

Every run composes the training config, builds through `alignmt.build.build` and trains with
`Built.trainer(...)` (Lightning, `TranslationTask`, length-bucketed batches, gradient
clipping, the configured optimiser) on a synthetic corpus written as `text_files` data:
whitespace tokens, WMT-like lengths (source words ~ Gamma(3, 9), targets 1.12 times as long,
pairs of at most 50 words kept), Zipf-distributed words from 60,000 types per side, so that
30,000- and 50,000-word shortlists leave [UNK]s as real text does. On a GPU: bf16 mixed
precision, and the variants of the decoder's fast path (`fast_path`, conf/fast_path/cuda.yaml):

    eager      the plain step path (fast_path off)
    graphs     CUDA graphs of the eager step          (RNNsearch only)
    compiled   the compiled step, no graphs           (RNNsearch only)
    fast       the compiled step in CUDA graphs: what trainer=gpu runs

Target tokens/s are the non-padding target tokens (words + [EOS]) of the steps after
`--warmup`, over their time on the device (CUDA events at the end of every step); steps in
which a new padded shape was captured are left out and counted. MFU is the model FLOPs of a
training step, counted by torch's FlopCounterMode on one eager step of the run's own batch
shape (cuDNN off, so that the recurrent layers' matrix products are counted too), per target
token, times tokens/s, over 790 TFLOP/s (bf16 matrix products on an H200, as measured there).
`--budgets` are token budgets per batch (`data.max_tokens`: sentences times the longest
pair's length); the best one is reported with the wall-clock of the paper's 2.88e5 updates
of 80 sentences. Decoding runs on the untrained model with every output fixed at the test
references' mean length (an untrained model would otherwise stop at once or run to its cap),
batches of `--eval-batch` sentences. Parts past `--time-limit` seconds are skipped.

On the H200 machine (torch and Lightning are there; hydra-core, omegaconf, datasets and
sacremoses travel as wheels, see benchmarks/gpu_README.md): under 8 minutes in all.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import time
import traceback
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch

PEAK_FLOPS = 790e12  # bf16 matrix products on an H200 (8192^3 products, measured there)
PAPER_UPDATES, PAPER_BATCH = 288_000, 80
MODELS = {  # paper sizes; vocabularies 30,000 (Bahdanau et al., Cho et al.), 50,000 (Luong)
    "rnnsearch": [
        "model=rnnsearch", "model.embedding_dim=620", "model.encoder_hidden_size=1000",
        "model.decoder_hidden_size=1000", "model.maxout_size=500",
        "model.attention.attention_size=1000", "model.init=paper", "optim=adadelta",
    ],
    "luong": [
        "model=luong", "model.embedding_dim=1000", "model.hidden_size=1000",
        "model.num_layers=4", "model.rnn_type=lstm", "model.input_feeding=true",
        "model.dropout=0.2", "model.init=uniform", "optim=sgd", "optim.lr=1.0",
        "data.source_vocab_size=50000", "data.target_vocab_size=50000",
        "trainer.gradient_clip_val=5.0",
    ],
    "rnnencdec": [
        "model=rnnencdec", "model.embedding_dim=620", "model.encoder_hidden_size=1000",
        "model.decoder_hidden_size=1000", "model.maxout_size=500", "model.init=paper",
        "optim=adadelta",
    ],
}  # fmt: skip
TINY_MODEL = {
    "rnnsearch": ["model.embedding_dim=16", "model.encoder_hidden_size=16",
                  "model.decoder_hidden_size=24", "model.maxout_size=16",
                  "model.attention.attention_size=24"],
    "luong": ["model.embedding_dim=16", "model.hidden_size=24", "model.num_layers=2"],
    "rnnencdec": ["model.embedding_dim=16", "model.encoder_hidden_size=16",
                  "model.decoder_hidden_size=24", "model.maxout_size=16"],
}  # fmt: skip
FAST_PATHS = {
    "eager": None,
    "graphs": {"compile": False, "cuda_graphs": True},
    "compiled": {"compile": True, "cuda_graphs": False},
    "fast": {"compile": True, "cuda_graphs": True},
}


# ----------------------------------------------------------------------------- the corpus
def write_corpus(folder: Path, sizes: dict[str, int], types: int, seed: int = 0) -> list[str]:
    """Synthetic parallel text in `folder` (train/valid/test .src/.trg), once; the overrides
    that read it as `text_files` data with whitespace tokens."""
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(1.0 / np.arange(1, types + 1))
    cdf /= cdf[-1]
    words = {side: np.array([f"{side}{i}" for i in range(types)]) for side in ("s", "t")}
    overrides = ["data=text_files", "data/tokenizer=whitespace", "data.max_length=50"]
    for split, n in sizes.items():
        source = np.clip(np.rint(rng.gamma(3.0, 9.0, n)), 1, 80).astype(int)
        target = np.clip(np.rint(source * 1.12 + rng.normal(0, 2, n)), 1, 80).astype(int)
        for side, lengths, ext in (("s", source, "src"), ("t", target, "trg")):
            path = folder / f"{split}.{ext}"
            ids = np.searchsorted(cdf, rng.random(lengths.sum()))
            if not path.exists():
                lines = np.split(words[side][ids], np.cumsum(lengths)[:-1])
                folder.mkdir(parents=True, exist_ok=True)
                path.write_text("".join(" ".join(line) + "\n" for line in lines))
            kind = "source" if ext == "src" else "target"
            overrides.append(f"data.corpus.{split}.{kind}={path}")
    return overrides


# --------------------------------------------------------------------------- measurements
class StepClock(pl.Callback):
    """The end of every training step on the device's clock, its target tokens, and whether
    the fast path captured a new shape during it."""

    def __init__(self, fast_path):
        self.fast_path, self.ends, self.tokens, self.sentences = fast_path, [], [], []
        self.captured, self._captures = [], 0

    def _graph_captures(self) -> int:
        graphs = getattr(self.fast_path, "graphs", None)
        return graphs.captures if graphs is not None else 0

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self._captures = self._graph_captures()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if torch.cuda.is_available() and module.device.type == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.ends.append(event)
        else:
            self.ends.append(time.perf_counter())
        self.tokens.append(batch.num_target_tokens)
        self.sentences.append(len(batch))
        self.captured.append(self._graph_captures() > self._captures)

    def steady(self, warmup: int) -> tuple[float, int, int]:
        """(target tokens/s, steps timed, steps left out for a capture) after `warmup`."""
        if isinstance(self.ends[0], torch.cuda.Event):
            torch.cuda.synchronize()
            seconds = [a.elapsed_time(b) / 1e3 for a, b in itertools.pairwise(self.ends)]
        else:
            seconds = list(np.diff(self.ends))
        kept = [i for i in range(max(warmup, 1), len(self.ends)) if not self.captured[i]]
        left_out = sum(self.captured[warmup:])
        if not kept:
            return math.nan, 0, left_out
        tokens = sum(self.tokens[i] for i in kept)
        return tokens / sum(seconds[i - 1] for i in kept), len(kept), left_out


def flops_per_token(model, batch, device) -> float:
    """Model FLOPs of one training step (forward and backward) per non-padding target token,
    by FlopCounterMode on the eager step path; cuDNN off, so that the recurrent layers run
    (and are counted) as matrix products."""
    from torch.utils.flop_counter import FlopCounterMode

    from alignmt.special_tokens import PAD_ID

    fast, model.fast_path = model.fast_path, None
    batch = batch.to(device)
    counter = FlopCounterMode(display=False)
    with torch.backends.cudnn.flags(enabled=False), counter:
        logits = model(batch.src, batch.src_lengths, batch.tgt_in).logits.flatten(0, 1)
        loss = torch.nn.functional.cross_entropy(
            logits.float(), batch.tgt_out.flatten(), ignore_index=PAD_ID
        )
        loss.backward()
    model.zero_grad(set_to_none=True)
    model.fast_path = fast
    return counter.get_total_flops() / batch.num_target_tokens


def loss_and_grads(model, batch, autocast) -> tuple[torch.Tensor, torch.Tensor]:
    from alignmt.loss import token_cross_entropy
    from alignmt.special_tokens import PAD_ID

    model.zero_grad(set_to_none=True)
    with autocast:
        logits = model(batch.src, batch.src_lengths, batch.tgt_in).logits.flatten(0, 1)
        loss = token_cross_entropy(logits.float(), batch.tgt_out.flatten(), PAD_ID)
    loss.backward()
    grads = torch.cat([p.grad.flatten().float() for p in model.parameters() if p.grad is not None])
    model.zero_grad(set_to_none=True)
    return loss.detach().float(), grads


def check_fast_path(built, args, name: str) -> None:
    """The fast path against the step path on one training batch at full size, after the
    weights have changed, dropout off: loss and gradients, relative differences."""
    from alignmt.models.compiled import FastPath

    model, device = built.model.to(args.device), torch.device(args.device)
    model.eval()  # no dropout: both paths see the same function
    batch = next(iter(built.datamodule.train_dataloader())).to(device)
    autocast = torch.autocast(device.type, torch.bfloat16, enabled=device.type == "cuda")
    model.fast_path = None
    loss, grads = loss_and_grads(model, batch, autocast)
    model.fast_path = FastPath(model.decoder, backend=args.backend, **FAST_PATHS["fast"])
    fast_loss, fast_grads = loss_and_grads(model, batch, autocast)
    model.fast_path = None
    model.train()
    loss_diff = float((fast_loss - loss).abs() / loss.abs())
    grad_diff = float((fast_grads - grads).norm() / grads.norm())
    verdict = "ok" if loss_diff < 1e-2 and grad_diff < 5e-2 else "FAILED"
    print(
        f"check  {name:<10} fast vs eager on one batch: loss {loss_diff:.1e}, gradients "
        f"{grad_diff:.1e} (relative, {'bf16' if device.type == 'cuda' else 'fp32'}): {verdict}",
        flush=True,
    )


# ------------------------------------------------------------------------------- the runs
def compose(args, model: str, extra: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from alignmt.config import CONF_DIR

    overrides = [
        *args.data_overrides,
        *MODELS[model],
        *(TINY_MODEL[model] if args.tiny else []),
        f"data.cache_dir={args.out / 'cache'}",
        f"run_dir={args.out / 'run'}",
        f"data.eval_batch_size={args.eval_batch}",
        f"data.num_workers={args.workers}",
        *extra,
    ]
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return hydra_compose("train", overrides=overrides)


def trainer_arguments(args, steps: int, clock: StepClock) -> dict:
    gpu = args.device == "cuda"
    return {
        "accelerator": "gpu" if gpu else "cpu",
        "devices": 1,
        "precision": "bf16-mixed" if gpu else "32-true",
        "max_steps": steps,
        "limit_val_batches": 0,
        "logger": False,
        "callbacks": [clock],
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
    }


def train_run(built, args, name: str, variant: str, batching: str, flops: float) -> dict:
    """`args.warmup + args.steps` training steps of `built` with the fast path `variant`."""
    from alignmt.models.compiled import FastPath

    node = FAST_PATHS[variant]
    model = built.model
    model.fast_path = (
        None if node is None else FastPath(model.decoder, backend=args.backend, **node)
    )
    clock = StepClock(model.fast_path)
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    trainer = built.trainer(**trainer_arguments(args, args.warmup + args.steps, clock))
    trainer.fit(built.task, datamodule=built.datamodule)
    wall = time.perf_counter() - started
    tokens_per_s, timed, left_out = clock.steady(args.warmup)
    peak = torch.cuda.max_memory_allocated() / 2**30 if args.device == "cuda" else math.nan
    mfu = flops * tokens_per_s / PEAK_FLOPS
    graphs = None if model.fast_path is None else model.fast_path.graphs
    shapes = "" if graphs is None else f", {graphs.captures} shapes captured"
    print(
        f"train  {name:<10} {variant:<8} {batching:<13} {tokens_per_s:12.0f} target tokens/s  "
        f"peak {peak:6.2f} GiB  MFU {100 * mfu:5.1f}%  ({timed} steps timed, {left_out} with "
        f"a capture left out{shapes}, {wall:.0f} s in all)",
        flush=True,
    )
    model.fast_path = None
    return {
        "model": name, "variant": variant, "batching": batching, "tokens_per_s": tokens_per_s,
        "peak_gib": peak, "mfu": mfu, "flops_per_token": flops, "steps_timed": timed,
        "captures_left_out": left_out, "wall_s": wall,
        "tokens_per_sentence": sum(clock.tokens) / sum(clock.sentences),
    }  # fmt: skip


def decode_run(built, args, name: str, beam_size: int | None) -> dict:
    """Greedy (beam_size None) or beam search over the test split, outputs fixed at the
    references' mean length; the time of `Translator.decode_batch` (search, copies to the
    host, detokenisation) over batches already collated."""
    from alignmt.decoding import BeamSearch, GreedySearch

    references = built.datamodule.text["test"].targets
    length = max(1, round(float(np.mean([len(r.split()) for r in references]))))
    fixed = {"min_length": length, "max_length": length}
    search = GreedySearch(**fixed) if beam_size is None else BeamSearch(beam_size, **fixed)
    translator, device = built.translator, torch.device(args.device)
    translator.model.to(device).eval()
    translator.search, configured = search, translator.search
    batches = list(built.datamodule.test_dataloader())
    autocast = torch.autocast(device.type, torch.bfloat16, enabled=device.type == "cuda")
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    with autocast:
        sentences = sum(len(translator.decode_batch(b.to(device))) for b in batches)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    translator.search = configured
    label = "greedy" if beam_size is None else f"beam {beam_size}"
    print(
        f"decode {name:<10} {label:<8} {sentences} sentences in {seconds:.1f} s: "
        f"{sentences / seconds:.1f} sentences/s  (batches of {args.eval_batch}, "
        f"outputs of {length} words)",
        flush=True,
    )
    return {"model": name, "search": label, "sentences": sentences, "seconds": seconds}


def model_runs(args, name: str, budgets: list[int], clock_start: float) -> list[dict]:
    """Batch 80 eager and fast, the check, decoding, the other variants at batch 80, then
    token budgets with the fast path (a data module per budget, the same model and task)."""
    from alignmt.build import build
    from alignmt.config import instantiate

    def in_time(part: str) -> bool:
        if time.perf_counter() - clock_start < args.time_limit:
            return True
        print(f"skip   {name:<10} {part}: past --time-limit {args.time_limit:.0f} s", flush=True)
        return False

    def batch_flops(datamodule) -> float:
        return flops_per_token(built.model, next(iter(datamodule.train_dataloader())), args.device)

    results = []
    built = build(compose(args, name, [f"data.batch_size={PAPER_BATCH}"]))
    params = sum(p.numel() for p in built.model.parameters()) / 1e6
    print(f"model  {name:<10} {params:.1f}M parameters", flush=True)
    flops = batch_flops(built.datamodule)
    variants = args.variants if name == "rnnsearch" else ["eager", "fast"]
    first, diagnostic = (
        [v for v in variants if v in ("eager", "fast")],
        [v for v in variants if v not in ("eager", "fast")],
    )
    for variant in first:
        if in_time(f"{variant} batch {PAPER_BATCH}"):
            results.append(train_run(built, args, name, variant, f"batch {PAPER_BATCH}", flops))
    if in_time("check"):
        check_fast_path(built, args, name)
    for beam_size in (None, args.beam) if name in args.decode else ():
        if in_time("decoding"):
            results.append(decode_run(built, args, name, beam_size))
    for variant in diagnostic:  # after the figures the targets are about
        if in_time(f"{variant} batch {PAPER_BATCH}"):
            results.append(train_run(built, args, name, variant, f"batch {PAPER_BATCH}", flops))
    for budget in budgets:
        if in_time(f"tokens {budget}"):
            cfg = compose(args, name, [f"data.max_tokens={budget}"])
            built.datamodule = instantiate(cfg.data, seed=cfg.seed)
            built.datamodule.prepare_data()
            built.datamodule.setup("fit")
            flops = batch_flops(built.datamodule)
            results.append(train_run(built, args, name, "fast", f"tokens {budget}", flops))
    return results


def summarize(results: list[dict]) -> None:
    """Fast against eager at batch 80, and the best batching with the paper's wall-clock."""
    train = [r for r in results if "tokens_per_s" in r and not math.isnan(r["tokens_per_s"])]
    for name in dict.fromkeys(r["model"] for r in train):
        runs = {(r["variant"], r["batching"]): r for r in train if r["model"] == name}
        eager, fast = (
            runs.get(("eager", f"batch {PAPER_BATCH}")),
            runs.get(("fast", f"batch {PAPER_BATCH}")),
        )
        if eager and fast:
            speedup = fast["tokens_per_s"] / eager["tokens_per_s"]
            print(f"speedup {name:<10} fast / eager at batch {PAPER_BATCH}: {speedup:.2f}x")
        best = max((r for r in runs.values() if r["variant"] == "fast"), default=None,
                   key=lambda r: r["tokens_per_s"])  # fmt: skip
        if best:
            tokens = PAPER_UPDATES * PAPER_BATCH * best["tokens_per_sentence"]
            hours = tokens / best["tokens_per_s"] / 3600
            print(
                f"best   {name:<10} {best['batching']}: {best['tokens_per_s']:.0f} target "
                f"tokens/s, MFU {100 * best['mfu']:.1f}%: the paper's {PAPER_UPDATES:.2e} "
                f"updates of {PAPER_BATCH} sentences ({tokens:.2e} target tokens) in "
                f"{hours:.2f} h"
            )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="toy sizes, a few steps (tests)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/alignmt-gpu-benchmark"))
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--variants", nargs="+", default=list(FAST_PATHS))
    parser.add_argument("--budgets", nargs="*", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--decode", nargs="*", default=["rnnsearch"], help="models to decode")
    parser.add_argument("--beam", type=int, default=12)
    parser.add_argument("--eval-batch", type=int, default=None)
    parser.add_argument("--workers", type=int, default=None, help="data.num_workers")
    parser.add_argument("--backend", default=None, help="torch.compile backend")
    parser.add_argument("--time-limit", type=float, default=450.0)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    defaults = {  # tiny: toy sizes; else the paper's
        "budgets": [512] if args.tiny else [25000, 50000, 100000],
        "steps": 2 if args.tiny else 40,
        "warmup": 1 if args.tiny else 20,
        "eval_batch": 16 if args.tiny else 100,
        "workers": 0 if args.tiny else 4,
        "backend": "aot_eager" if args.tiny else "inductor",
    }
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main() -> int:
    args = parse_args()
    started = time.perf_counter()
    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(
        f"device {device}  torch {torch.__version__}  cuDNN {torch.backends.cudnn.version()}  "
        f"Lightning {pl.__version__}",
        flush=True,
    )
    sizes = {"train": 600, "valid": 16, "test": 40} if args.tiny else {
        "train": 100_000, "valid": 200, "test": 3003}  # fmt: skip
    args.data_overrides = write_corpus(args.out / "corpus", sizes, 50 if args.tiny else 60_000)
    results, failed = [], []
    budgets = args.budgets
    for name in args.models:
        try:
            results += model_runs(args, name, budgets, started)
        except Exception as error:  # report it and go on to the next model
            failed.append(name)
            print(f"FAILED {name}: {type(error).__name__}: {error}", flush=True)
            traceback.print_exc()
        best = [r for r in results if r["model"] == name and r.get("batching", "")[:6] == "tokens"]
        if name == "rnnsearch" and best:  # the other models run at RNNsearch's best budget
            budgets = [int(max(best, key=lambda r: r["tokens_per_s"])["batching"].split()[1])]
    summarize(results)
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    print(f"total  {time.perf_counter() - started:.0f} s  (figures in {args.out / 'results.json'})")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
