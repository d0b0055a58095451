"""alignmt against Joey NMT and OpenNMT-py on the shared workload: the whole speed table at once.

    bash benchmarks/peers/setup_peers.sh                      # once: the peers' virtualenvs
    python benchmarks/compare.py WORKLOAD_DIR SCRATCH_DIR [--repeats 3] [--no-peers]
        [--models alignmt-luong alignmt-rnnsearch] [--peers joeynmt onmt]
        [--sections speed extensions trained]
        [--resume-trained]

WORKLOAD_DIR is what ../shared/bench/make_workload.py writes (made there if missing). Every run
is a fresh process with `--threads` threads; systems run in an order rotated every repeat, so
none always runs first. Sections (each can be left out):

- speed: per repeat, every system trains `--steps` steps (tokens/s over the steps after
  `--warmup`, peak memory) and decodes from that model at matched output length: the test
  sentences with min length = max length = `--length` (no end of sentence before the cap), so
  every system emits the same number of tokens; greedy and beam 5 (our beam search stops
  `exact`ly, which at a fixed length does the work `early` stopping does: every hypothesis
  ends at the cap), batches of each `--batch-sizes` (the first `--batch1-sentences` at batch 1).
  alignmt decodes at each of `--precisions`: float32 (exact, the default), bfloat16 (the
  bfloat16 copy of the model; columns "... bf16"), int8 (every matrix of the decoder in int8;
  columns "... int8") and int8_fp16 (the vocabulary projection in int8, the decoder's other
  matrices with float16 weights; columns "... int8_fp16"). `--no-decoding` keeps the training
  figures only.
- extensions: alignmt's RNNsearch trained plainly, with each coverage model and with scheduled
  sampling (and Luong's with scheduled sampling), alternating; tokens/s and the ratio to plain.
- trained: every system trains once, without interruption, saving a checkpoint every
  `--round-steps` steps (at most `--max-rounds` of them); each checkpoint's dev BLEU (its own
  greedy decoding of dev, scored here with sacrebleu) is taken while training goes on, and
  training stops at the first checkpoint that reaches `--bleu-target`. That model decodes the
  test set at its natural lengths (at most `--length` tokens), each search and batch size, for
  every repeat, with test BLEU (so the reduced-precision columns show what each precision costs).
  Each checkpoint's dev BLEU is recorded as it comes; the peers take hours to reach the target
  on 2 cores, so an invocation killed on the way is picked up with `--resume-trained` (the same
  command and SCRATCH_DIR) from its last recorded checkpoint, by each system's own resume.
  With `--repeats 0` the section only trains: invocations for different systems (`--models`,
  `--peers`), each with a share of the cores, can train at once into one SCRATCH_DIR, and a
  last one over every system with `--resume-trained` finds them trained and measures.

Ratios are taken within a repeat (alignmt / the faster peer, or / the leaner one for memory) and
their median reported beside the medians of the figures. Every figure goes to
SCRATCH_DIR/runs.jsonl as it is measured; the markdown table to SCRATCH_DIR/summary.md and
stdout.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# alignmt's column names
SUFFIXES = {"float32": "", "bfloat16": " bf16", "int8": " int8", "int8_fp16": " int8_fp16"}
sys.path.insert(0, str(HERE / "peers"))
import peers  # noqa: E402
from peers import Decoding  # noqa: E402

OURS = {"alignmt-luong": "luong", "alignmt-rnnsearch": "rnnsearch"}
SEARCHES = peers.SEARCHES
EXTENSIONS = {
    "rnnsearch": ("rnnsearch", []),
    "rnnsearch + linguistic coverage": ("rnnsearch", ["model/coverage=linguistic"]),
    "rnnsearch + neural coverage": ("rnnsearch", ["model/coverage=neural"]),
    "rnnsearch + scheduled sampling": ("rnnsearch", ["sampling=linear", "sampling.k=0.75"]),
    "luong": ("luong", []),
    "luong + scheduled sampling": ("luong", ["sampling=linear", "sampling.k=0.75"]),
}


class Ours:
    """alignmt's side, run like a peer: benchmarks/workload.py in a fresh process per run."""

    def __init__(self, model: str, overrides: list[str], threads: int):
        self.name = f"alignmt-{model}"
        self.model, self.overrides, self.threads = model, overrides, threads

    def _command(self, command: list[str]) -> list[str]:
        options = [f"--override={o}" for o in model_overrides(self.overrides, self.model)]
        return [sys.executable, str(HERE / "workload.py"), *command, *options]

    def _env(self) -> dict[str, str]:
        return {**peers.peer_env(self.threads), "PYTHONPATH": str(HERE.parent / "src")}

    def _run(self, command: list[str]) -> dict:
        out = subprocess.run(
            self._command(command), capture_output=True, text=True, env=self._env()
        )
        if out.returncode != 0:
            raise RuntimeError(f"workload.py {' '.join(command)} failed:\n{out.stderr[-3000:]}")
        return json.loads(out.stdout[out.stdout.index("{") :])

    def _train_command(self, data_dir, scratch, steps: int, warmup: int) -> list[str]:
        command = ["train", str(data_dir), str(scratch), "--model", self.model]
        command += ["--steps", str(steps), "--warmup", str(warmup)]
        return [*command, "--threads", str(self.threads)]

    def train(self, data_dir, scratch, *, steps=60, warmup=10):
        command = self._train_command(data_dir, scratch, steps, warmup)
        return self._run([*command, "--save-as", f"{self.name}-{steps}"])

    def start_training(self, data_dir, scratch, *, steps, save_every, resume=None):
        """As peers.Peer.start_training: untimed, in the background, a checkpoint every
        `save_every` steps."""
        command = self._train_command(data_dir, scratch, steps, warmup=1)
        command += ["--untimed", "--save-every", str(save_every)]
        if resume is not None:
            command += ["--resume", str(resume)]
        return peers.Training(
            self._command(command),
            Path(scratch) / f"{self.name}_train.log",
            self._env(),
            lambda step: Path(scratch) / f"{self.name}-{step}.ckpt",
        )

    def decode(self, data_dir, scratch, checkpoint, decoding: Decoding, precision="float32"):
        output = Path(scratch) / f"{self.name}_{decoding.split}_{decoding.search}_{precision}.out"
        command = ["decode", str(data_dir), str(scratch), "--checkpoint", str(checkpoint)]
        command += ["--search", decoding.search, "--batch-size", str(decoding.batch_size)]
        command += ["--min-length", str(decoding.min_length), "--max-length"]
        command += [str(decoding.max_length), "--split", decoding.split, "--output", str(output)]
        command += ["--threads", str(self.threads), "--precision", precision]
        if decoding.sentences is not None:
            command += ["--sentences", str(decoding.sentences)]
        return self._run(command)


def model_overrides(overrides: list[str], model: str) -> list[str]:
    """The overrides for `model`: those without a prefix and those prefixed `model:`."""
    out = []
    for override in overrides:
        target, _, rest = override.partition(":")
        if not rest:
            out.append(override)
        elif target == model:
            out.append(rest)
    return out


def bleu(hypotheses: Path, references: Path) -> float:
    import sacrebleu

    hyps = hypotheses.read_text().splitlines()
    refs = references.read_text().splitlines()[: len(hyps)]
    return sacrebleu.corpus_bleu(hyps, [refs]).score


class Log:
    """Every measurement, appended to runs.jsonl as it comes."""

    def __init__(self, path: Path):
        self.path, self.records = path, []

    def add(self, section: str, system: str, repeat: int, key: str, figures: dict) -> dict:
        record = {**figures, "section": section, "system": system, "repeat": repeat, "key": key}
        self.records.append(record)
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        print(f"[{section}] repeat {repeat} {system} {key}: {summary_line(record)}", flush=True)
        return record

    def values(self, section: str, key: str, figure: str) -> dict[tuple[str, int], float]:
        return {
            (r["system"], r["repeat"]): r[figure]
            for r in self.records
            if r["section"] == section and r["key"] == key and figure in r
        }


def summary_line(record: dict) -> str:
    names = ("train_tok_per_s", "sent_per_s", "out_tok_per_s", "dev_bleu", "peak_rss_main_mib")
    return ", ".join(
        f"{n} {record[n]:.1f}" for n in names if isinstance(record.get(n), float | int)
    )


def rotated(items: list, repeat: int) -> list:
    shift = repeat % len(items)
    return items[shift:] + items[:shift]


def decodings(args, split: str = "test", min_length: int | None = None) -> list[Decoding]:
    fixed = args.length if min_length is None else min_length
    out = []
    for batch_size in args.batch_sizes:
        sentences = args.batch1_sentences if batch_size == 1 else args.sentences
        for search in SEARCHES:
            out.append(Decoding(search, batch_size, fixed, args.length, split, sentences))
    return out


def speed_decodings(args) -> list[Decoding]:
    """The speed section's decodings: none with `--no-decoding` (training figures only)."""
    return [] if args.no_decoding else decodings(args)


def is_ours(system: str) -> bool:
    return system.split()[0] in OURS


def decode_all(system, name: str, checkpoint, decoding: Decoding, scratch, args):
    """{column name: figures}: a peer once, alignmt at each of `--precisions`."""
    if not is_ours(name):
        return {name: system.decode(args.workload, scratch, checkpoint, decoding)}
    return {
        name + SUFFIXES[precision]: system.decode(
            args.workload, scratch, checkpoint, decoding, precision
        )
        for precision in args.precisions
    }


def decoding_key(d: Decoding) -> str:
    return f"{d.search} batch {d.batch_size}"


def speed_section(systems: dict, args, log: Log) -> None:
    for repeat in range(args.repeats):
        for name in rotated(list(systems), repeat):
            system, scratch = systems[name], args.scratch / name
            trained = system.train(args.workload, scratch, steps=args.steps, warmup=args.warmup)
            log.add("speed", name, repeat, "train", trained)
            for decoding in speed_decodings(args):
                runs = decode_all(system, name, trained["checkpoint"], decoding, scratch, args)
                for column, figures in runs.items():
                    log.add("speed", column, repeat, decoding_key(decoding), figures)


def extensions_section(args, log: Log) -> None:
    names = [
        n
        for n in EXTENSIONS
        if n in args.extensions or n in {EXTENSIONS[e][0] for e in args.extensions}
    ]
    for repeat in range(args.repeats):
        for name in rotated(names, repeat):
            model, extra = EXTENSIONS[name]
            system = Ours(model, [*args.override, *extra], args.threads)
            scratch = args.scratch / "extensions"
            figures = system.train(args.workload, scratch, steps=args.steps, warmup=args.warmup)
            log.add("extensions", name, repeat, "train", figures)


def train_to_target(system, args, log: Log) -> dict:
    """One training run of at most `max_rounds` x `round_steps` steps, saving every
    `round_steps`. Each checkpoint is scored on dev while training goes on, recorded as a
    "round" and moved to SCRATCH/trained/NAME/NAME-round-STEPS.ckpt (the round before it
    deleted); training stops at the first that reaches the target. `--resume-trained` goes on
    from the last round a killed invocation recorded, by the system's own resume (exact for
    alignmt; not for the peers, which start a new epoch): each record lists the steps at which
    its training was resumed (`resumed_at`)."""
    scratch = args.scratch / "trained" / system.name
    scratch.mkdir(parents=True, exist_ok=True)
    last = last_round(args.scratch / "runs.jsonl", system.name) if args.resume_trained else None
    checkpoint, steps, dev_bleu, resumed_at = None, 0, None, []
    if last is not None:
        checkpoint, steps, dev_bleu = Path(last["checkpoint"]), last["steps"], last["dev_bleu"]
        resumed_at = last.get("resumed_at", [])
    total = args.max_rounds * args.round_steps

    def going_on() -> bool:
        return (dev_bleu is None or dev_bleu < args.bleu_target) and steps < total

    if going_on():
        if checkpoint is not None:
            resumed_at = [*resumed_at, steps]
        training = system.start_training(
            args.workload, scratch, steps=total, save_every=args.round_steps, resume=checkpoint
        )
        with training:
            while going_on():
                steps += args.round_steps
                kept = scratch / f"{system.name}-round-{steps}.ckpt"
                shutil.move(training.checkpoint(steps), kept)
                dev = Decoding("greedy", 64, 0, args.length, "dev")
                decoded = system.decode(args.workload, scratch, kept, dev)
                dev_bleu = bleu(Path(decoded["output"]), args.workload / "dev.trg")
                figures = {"steps": steps, "dev_bleu": dev_bleu, "checkpoint": str(kept)}
                log.add("trained", system.name, 0, "round", {**figures, "resumed_at": resumed_at})
                if checkpoint is not None:
                    checkpoint.unlink(missing_ok=True)
                checkpoint = kept
    if checkpoint is None:
        raise ValueError(f"no training round: --max-rounds {args.max_rounds}")
    result = {"steps": steps, "dev_bleu": dev_bleu, "checkpoint": str(checkpoint)}
    result |= {"resumed_at": resumed_at, "reached": dev_bleu >= args.bleu_target}
    return log.add("trained", system.name, 0, "model", result)


def last_round(runs: Path, system: str) -> dict | None:
    """The last "round" of `system`'s training that runs.jsonl recorded, if its checkpoint is
    still there."""
    if not runs.is_file():
        return None
    rounds = [json.loads(line) for line in runs.read_text().splitlines() if line.strip()]
    rounds = [r for r in rounds if r["section"] == "trained" and r["system"] == system]
    rounds = [r for r in rounds if r["key"] == "round" and Path(r["checkpoint"]).is_file()]
    return rounds[-1] if rounds else None


def trained_section(systems: dict, args, log: Log) -> None:
    models = {name: train_to_target(system, args, log) for name, system in systems.items()}
    for repeat in range(args.repeats):
        for name in rotated(list(systems), repeat):
            scratch = args.scratch / "trained" / name
            for decoding in decodings(args, min_length=0):
                checkpoint = models[name]["checkpoint"]
                runs = decode_all(systems[name], name, checkpoint, decoding, scratch, args)
                for column, figures in runs.items():
                    if decoding.sentences is None:
                        test = args.workload / "test.trg"
                        figures["test_bleu"] = bleu(Path(figures["output"]), test)
                    log.add("trained", column, repeat, decoding_key(decoding), figures)


# ---------------------------------------------------------------------------------------------
# The table


def row(log: Log, section: str, key: str, figure: str, systems: list[str], label: str, lower=False):
    """One table row: each system's median, then each alignmt system's median ratio (within a
    repeat) to the best peer (the highest figure, or the lowest with `lower`)."""
    values = log.values(section, key, figure)
    repeats = sorted({r for _, r in values})
    cells = []
    for s in systems:
        got = [values[s, r] for r in repeats if (s, r) in values]
        cells.append(f"{statistics.median(got):,.1f}" if got else "-")
    peers_here = [s for s in systems if s in peers.PEERS]
    for ours in (s for s in systems if is_ours(s) and peers_here):
        ratios = []
        for r in repeats:
            others = [values[p, r] for p in peers_here if (p, r) in values]
            if (ours, r) in values and others:
                best = min(others) if lower else max(others)
                ratios.append(values[ours, r] / best)
        cells.append(f"{statistics.median(ratios):.2f}x" if ratios else "-")
    return f"| {label} | " + " | ".join(cells) + " |"


def ratio_columns(systems: list[str]) -> list[str]:
    if not any(s in peers.PEERS for s in systems):
        return []
    return [f"{s} / best peer" for s in systems if is_ours(s)]


def header(systems: list[str], first: str) -> list[str]:
    columns = [first, *systems, *ratio_columns(systems)]
    return ["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]


def table(log: Log, args, systems: list[str]) -> str:
    lines = [f"Medians of {args.repeats} repeats, {args.threads} threads.", ""]
    # one training column per configuration, whichever precisions it decoded at
    trainers = [*args.models, *(s for s in systems if not is_ours(s))]
    if "speed" in args.sections:
        lines += [f"**Training** ({args.steps} steps, timed after {args.warmup})", ""]
        lines += header(trainers, "figure")
        lines.append(row(log, "speed", "train", "train_tok_per_s", trainers, "target tokens/s"))
        lines.append(
            row(log, "speed", "train", "peak_rss_main_mib", trainers, "peak RSS, MiB", lower=True)
        )
        lines.append(
            row(log, "speed", "train", "matmul_peak_percent", trainers, "% of fp32 matmul peak")
        )
        if not args.no_decoding:
            lines += ["", f"**Decoding at matched length** (min = max = {args.length} tokens)"]
            lines += ["", *decoding_rows(log, "speed", args, systems)]
    if "extensions" in args.sections:
        lines += ["", "**alignmt's training extensions** (target tokens/s)", ""]
        lines += extension_rows(log)
    if "trained" in args.sections:
        lines += ["", f"**Trained models** (dev BLEU >= {args.bleu_target}), natural lengths", ""]
        lines += header(systems, "figure")
        lines += trained_model_rows(log, systems)
        key = decoding_key(Decoding("greedy", args.batch_sizes[0]))
        lines.append(row(log, "trained", key, "test_bleu", systems, f"test BLEU ({key})"))
        lines.append(row(log, "trained", key, "mean_output_len", systems, "mean output length"))
        lines += decoding_rows(log, "trained", args, systems)[2:]
    return "\n".join(lines) + "\n"


def trained_model_rows(log: Log, systems: list[str]) -> list[str]:
    """How each system's model was trained: one model per system, so no medians and no ratios
    (a system that missed the target decodes its last checkpoint and says so)."""
    models = {
        r["system"]: r for r in log.records if r["section"] == "trained" and r["key"] == "model"
    }
    ratio_cells = [""] * len(ratio_columns(systems))
    figures = {
        "training steps": lambda m: f"{m['steps']:,}",
        "dev BLEU (greedy)": lambda m: f"{m['dev_bleu']:.2f}",
        "reached the target": lambda m: "yes" if m["reached"] else "**no**",
        "resumed at steps": lambda m: ", ".join(f"{s:,}" for s in m["resumed_at"]) or "-",
    }
    lines = []
    for label, cell in figures.items():
        cells = [cell(models[s]) if s in models else "-" for s in systems]
        lines.append(f"| {label} | " + " | ".join([*cells, *ratio_cells]) + " |")
    return lines


def decoding_rows(log: Log, section: str, args, systems: list[str]) -> list[str]:
    lines = header(systems, "search, batch")
    for decoding in decodings(args):
        key = decoding_key(decoding)
        n = decoding.sentences or "all"
        lines.append(row(log, section, key, "sent_per_s", systems, f"{key}: sentences/s ({n})"))
        lines.append(row(log, section, key, "out_tok_per_s", systems, f"{key}: tokens/s"))
    return lines


def extension_rows(log: Log) -> list[str]:
    values = log.values("extensions", "train", "train_tok_per_s")
    lines = ["| configuration | tokens/s | / plain |", "|---|---|---|"]
    for name, (model, _) in EXTENSIONS.items():
        repeats = sorted(r for s, r in values if s == name)
        if not repeats:
            continue
        ratios = [values[name, r] / values[model, r] for r in repeats if (model, r) in values]
        median = statistics.median(values[name, r] for r in repeats)
        ratio = f"{statistics.median(ratios):.2f}" if ratios else "-"
        lines.append(f"| {name} | {median:,.0f} | {ratio} |")
    return lines


def precision_suffixes(args) -> list[str]:
    return [SUFFIXES[p] for p in args.precisions]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", type=Path)
    parser.add_argument("scratch", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-peers", action="store_true", help="alignmt only")
    parser.add_argument(
        "--peers", nargs="*", default=list(peers.PEERS), choices=list(peers.PEERS),
        help="the peer toolkits to run",
    )  # fmt: skip
    parser.add_argument(
        "--sections", nargs="+", default=["speed", "extensions", "trained"],
        choices=["speed", "extensions", "trained"],
    )  # fmt: skip
    parser.add_argument(
        "--extensions", nargs="+", default=list(EXTENSIONS), choices=list(EXTENSIONS),
        help="the configurations of the extensions section (each with its plain model)",
    )  # fmt: skip
    parser.add_argument(
        "--models", nargs="*", default=list(OURS), choices=list(OURS),
        help="alignmt's configurations to run (the peers run Luong's)",
    )  # fmt: skip
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=60, help="training steps, warm-up included")
    parser.add_argument("--warmup", type=int, default=10, help="steps left out of the timing")
    parser.add_argument("--length", type=int, default=100, help="output tokens (the cap)")
    parser.add_argument("--sentences", type=int, default=None, help="first N test sentences")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 1])
    parser.add_argument(
        "--no-decoding", action="store_true", help="the speed section trains only (no decoding)"
    )
    parser.add_argument("--batch1-sentences", type=int, default=100)
    parser.add_argument(
        "--precisions", nargs="+", default=["float32", "bfloat16", "int8"],
        choices=list(SUFFIXES), help="alignmt's decoding precisions (float32: exact)",
    )  # fmt: skip
    parser.add_argument("--bleu-target", type=float, default=90.0)
    parser.add_argument("--round-steps", type=int, default=500)
    parser.add_argument("--max-rounds", type=int, default=20)
    parser.add_argument(
        "--resume-trained", action="store_true",
        help="the trained section goes on from the last training round SCRATCH_DIR/runs.jsonl "
        "recorded (an invocation killed before its models reached the target)",
    )  # fmt: skip
    parser.add_argument("--peer-configs", type=Path, default=peers.DEFAULT_CONFIGS)
    parser.add_argument("--peers-dir", type=Path, default=None)
    parser.add_argument(
        "--override", action="append", default=[],
        help="a Hydra override for alignmt's runs, `luong:` or `rnnsearch:` before it for "
        "one model only (tests shrink the models)",
    )  # fmt: skip
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if not (args.workload / "train.src").is_file():
        maker = peers.REPOSITORY.parent / "shared" / "bench" / "make_workload.py"
        subprocess.run([sys.executable, str(maker), str(args.workload)], check=True)
    args.workload, args.scratch = args.workload.resolve(), args.scratch.resolve()
    args.scratch.mkdir(parents=True, exist_ok=True)
    systems = {name: Ours(OURS[name], args.override, args.threads) for name in args.models}
    if not args.no_peers:
        for name in args.peers:
            systems[name] = peers.make_peer(
                name, configs=args.peer_configs, peers_dir=args.peers_dir, threads=args.threads
            )
    log = Log(args.scratch / "runs.jsonl")
    if "speed" in args.sections:
        speed_section(systems, args, log)
    if "extensions" in args.sections:
        extensions_section(args, log)
    if "trained" in args.sections:
        trained_section(systems, args, log)
    columns = [n + suffix for n in args.models for suffix in precision_suffixes(args)]
    summary = table(log, args, [*columns, *(n for n in systems if not is_ours(n))])
    (args.scratch / "summary.md").write_text(summary)
    print(summary)


if __name__ == "__main__":
    main()
