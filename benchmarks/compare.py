"""alignmt against Joey NMT and OpenNMT-py on the shared workload, in one invocation.

    bash benchmarks/peers/setup_peers.sh                      # once: the peers' virtualenvs
    python benchmarks/compare.py WORKLOAD_DIR SCRATCH_DIR [--repeats 3]

WORKLOAD_DIR is what ../shared/bench/make_workload.py writes (made there if missing). Each
repeat trains every system for 60 steps and decodes the 500 test sentences greedy and with
beam 5 from that model (batches of 64, at most 100 output tokens), the systems in a rotated
order so none always runs first; every run is a fresh process with 2 threads. The medians
over the repeats go to SCRATCH_DIR/summary.md and are printed, with the ratio of each alignmt
configuration to the faster peer; every single figure is in SCRATCH_DIR/runs.jsonl.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "peers"))
import peers  # noqa: E402

OURS = ("alignmt-luong", "alignmt-rnnsearch")
PEERS = ("joeynmt", "onmt")
FIGURES = (
    ("train", "train_tok_per_s", "training target tokens/s"),
    ("greedy", "out_tok_per_s", "greedy output tokens/s"),
    ("beam5", "out_tok_per_s", "beam-5 output tokens/s"),
    ("greedy", "sent_per_s", "greedy sentences/s"),
    ("beam5", "sent_per_s", "beam-5 sentences/s"),
    ("train", "peak_rss_main_mib", "training peak RSS, MiB (main process)"),
)


def ours(command: list[str], threads: int) -> dict:
    """benchmarks/workload.py in a fresh process; its JSON figures."""
    out = subprocess.run(
        [sys.executable, str(HERE / "workload.py"), *command, "--threads", str(threads)],
        capture_output=True,
        text=True,
        check=True,
        env={**peers.peer_env(threads), "PYTHONPATH": str(HERE.parent / "src")},
    ).stdout
    return json.loads(out[out.index("{") :])


def run_system(system: str, workload: Path, scratch: Path, args: argparse.Namespace) -> dict:
    """Train `system` once and decode with each search: {"train": {...}, search: {...}}."""
    if system in PEERS:
        return peers.run_peer(
            system,
            workload,
            scratch,
            steps=args.steps,
            warmup=args.warmup,
            sentences=args.sentences,
            searches=peers.SEARCHES,
            threads=args.threads,
        )
    model = system.split("-", 1)[1]
    budget = ["--steps", str(args.steps), "--warmup", str(args.warmup)]
    trained = ours(["train", str(workload), str(scratch), "--model", model, *budget], args.threads)
    subset = ["--sentences", str(args.sentences)] if args.sentences else []
    decode = ["decode", str(workload), str(scratch), "--checkpoint", trained["checkpoint"]]
    result = {"train": trained}
    for search in peers.SEARCHES:
        result[search] = ours([*decode, "--search", search, *subset], args.threads)
    return result


def summarise(runs: list[dict], systems: list[str]) -> str:
    median = {
        (s, stage, key): statistics.median(r[stage][key] for r in runs if r["system"] == s)
        for s in systems
        for stage, key, _ in FIGURES
    }
    peers_here = [s for s in systems if s in PEERS]
    lines = [
        "| figure | "
        + " | ".join(systems)
        + " | "
        + " | ".join(f"{s} / faster peer" for s in systems if s in OURS)
        + " |"
    ]
    lines.append("|---" * (1 + len(systems) + sum(s in OURS for s in systems)) + "|")
    for stage, key, label in FIGURES:
        row = [f"{median[s, stage, key]:,.1f}" for s in systems]
        if peers_here:
            pick = min if key == "peak_rss_main_mib" else max
            best = pick(median[p, stage, key] for p in peers_here)
            row += [f"{median[s, stage, key] / best:.2f}x" for s in systems if s in OURS]
        lines.append(f"| {label} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", type=Path)
    parser.add_argument("scratch", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--systems", nargs="+", default=[*OURS, *PEERS])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=60, help="training steps, warm-up included")
    parser.add_argument("--warmup", type=int, default=10, help="steps left out of the timing")
    parser.add_argument("--sentences", type=int, default=None, help="first N test sentences")
    args = parser.parse_args()
    if not (args.workload / "train.src").is_file():
        maker = HERE.parents[1] / "shared" / "bench" / "make_workload.py"
        subprocess.run([sys.executable, str(maker), str(args.workload)], check=True)
    args.scratch.mkdir(parents=True, exist_ok=True)
    runs = []
    with (args.scratch / "runs.jsonl").open("a") as log:
        for repeat in range(args.repeats):
            shift = repeat % len(args.systems)
            for system in args.systems[shift:] + args.systems[:shift]:
                figures = {
                    "system": system,
                    "repeat": repeat,
                    **run_system(system, args.workload, args.scratch, args),
                }
                runs.append(figures)
                log.write(json.dumps(figures) + "\n")
                log.flush()
                print(
                    f"repeat {repeat} {system}: train "
                    f"{figures['train']['train_tok_per_s']:.0f} tok/s, greedy "
                    f"{figures['greedy']['out_tok_per_s']:.0f}, beam-5 "
                    f"{figures['beam5']['out_tok_per_s']:.0f} output tok/s",
                    flush=True,
                )
    table = summarise(runs, args.systems)
    (args.scratch / "summary.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
