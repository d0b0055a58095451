"""Train and decode with the peer toolkits (Joey NMT 2.2.1, OpenNMT-py 3.5.1) on the speed workload.

    python benchmarks/peers/peers.py {joeynmt,onmt} WORKLOAD_DIR SCRATCH_DIR
        [--steps 60] [--warmup 10] [--sentences N] [--searches greedy beam5]
        [--checkpoint PATH] [--onmt-length-ratio 0] [--peers-dir DIR] [--threads 2]

WORKLOAD_DIR is what `make_workload.py` wrote (train/dev/test .src/.trg, vocab.src/.trg);
SCRATCH_DIR takes the written configs, the peer's model and outputs, and one log per command
(it is overwritten run after run). The peers live in the virtualenvs that
`benchmarks/peers/setup_peers.sh` makes (PEERS_DIR, default ~/.cache/alignmt-peers). The
command trains the peer once, decodes with its checkpoint and prints all figures as JSON
(with --checkpoint it only decodes). A driver imports the module and calls `train` and
`decode` (or `run_peer`): plain functions, paths as arguments, a dict of figures back.
Every run is a fresh process of the peer's own command line, with OMP_NUM_THREADS and
MKL_NUM_THREADS set to `threads` and TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 (both peers pickle
non-tensor objects into their checkpoints, which torch >= 2.6 refuses to load by default).

How each figure is obtained (nothing is injected into the peers; all comes from their logs,
their output files and the operating system):

Training (`train`), steps warmup+1..steps (11..60 by default). The configs log every
gcd(warmup, steps) steps (10 for the protocol's 60). Each peer logs, per logging interval,
the non-padding target tokens (words + end of sentence: Joey's `Batch.ntokens`, OpenNMT-py's
`n_words`, both count the target shifted past begin-of-sentence) per second over that
interval, timed by the peer around its training loop:
  - `seconds`: the time between the log line of step `warmup` and that of step `steps`, from
    the lines' own timestamps (millisecond resolution).
  - `target_tokens`: OpenNMT-py logs the average target tokens per batch of the interval
    ("bsz: src/tgt/sents"), so tokens = that average x the interval's steps (exact up to the
    rounding of the average to an integer, < 0.05%). Joey logs only the rate, so its tokens
    are rate x the interval's duration between its log lines.
  - `train_tok_per_s` = target_tokens / seconds: the headline figure.
  - `train_tok_per_s_peer`: the peers' own interval rates combined over the window as
    sum(tokens_i) / sum(tokens_i / rate_i), i.e. on the peer's own clock (for Joey the same
    number as above by construction; for OpenNMT-py an independent check, within ~0.5%).
  - `sentences_per_s`: 64 x (steps - warmup) / seconds (batches are 64 sentences).
  - Joey's validation (needed to save a checkpoint) runs after the last logged step, OpenNMT-py
    saves its checkpoint after the last step: neither is inside the window. Joey is started
    with --skip-test (no decoding of the test set after training).
  - `wall_s` is the whole command: start-up, OpenNMT-py's data loaders filling their first
    bucket (minutes: they cycle the 20,000 pairs many times over; that is also why each
    worker grows to ~3 GiB), Joey's validation and the checkpoint.
  - Memory: the process tree of the command (the peer process and its children: OpenNMT-py's
    data-loader workers) is sampled from /proc every `poll_s` (0.25 s) seconds.
    `peak_rss_main_mib` is the peer process's own high-water mark (VmHWM, exact);
    `peak_rss_children_mib` the children's VmHWM (one entry per child, largest first; forked
    workers share pages with their parent, so they do not add up); `peak_rss_tree_mib` the
    largest sampled sum of VmRSS over the whole tree at one instant (shared pages counted in
    every process). No psutil or /usr/bin/time is needed.

Decoding (`decode`): the peer's own test command (`joeynmt test ... --ckpt`,
`onmt_translate -config ... -model ... -output ...`) on the first `sentences` test sentences
(all 500 by default), batch 64 sentences, greedy or beam 5, at most 100 output tokens.
  - `decode_s`: the generation time the peer reports for its loop over the batches, which
    leaves out process start-up, imports, vocabulary and model loading, writing the output
    and (Joey) BLEU scoring: Joey's "generation: X[sec]" (4 decimals); OpenNMT-py's "Average
    translation time (ms)" x the number of sentences (its "Total translation time" is printed
    to 0.1 s only).
  - `wall_s`: wall time of the whole command; `startup_s` = wall_s - decode_s.
  - The cap: Joey's `max_output_length: 100` is exact. OpenNMT-py 3.5.1 caps each batch at
    min(max_length, max_length_ratio x longest source in the batch + 5) with
    max_length_ratio 1.25 by default, i.e. about 67 tokens on this workload, not the config's
    100. `decode` writes `max_length_ratio: 0` into its config (onmt_length_ratio=0.0, the
    default) so both peers stop at exactly 100 tokens; onmt_length_ratio=None keeps the
    toolkit's ratio, as the shared config alone does.
  - `output_tokens`: whitespace tokens of the written translations, i.e. output words without
    end of sentence (as benchmarks/decoding.py counts); `output_tokens_with_eos` adds one for
    each sentence that ended before the cap (those produced an end of sentence).
    `out_tok_per_s` = output_tokens / decode_s and `sent_per_s` = sentences / decode_s.
    `capped_sentences` counts outputs of `max_output_length` (100) tokens. Output lengths
    differ between the peers' barely trained models (after 60 steps Joey's run to the cap),
    so compare decoding by output tokens/s, not sentences/s.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

PEERS = ("joeynmt", "onmt")
SEARCHES = ("greedy", "beam5")
CONFIG_DIR = Path(os.environ.get("PEER_CONFIGS", "/work/shared/bench/peer-configs"))
MAX_OUTPUT_LENGTH = 100
BATCH_SENTENCES = 64


def default_peers_dir() -> Path:
    """Where setup_peers.sh put the virtualenvs."""
    return Path(os.environ.get("PEERS_DIR", Path.home() / ".cache" / "alignmt-peers"))


def peer_bin(peer: str, peers_dir: Path | None = None) -> Path:
    """The bin/ folder of a peer's virtualenv."""
    if peer not in PEERS:
        raise ValueError(f"unknown peer {peer!r}; one of {PEERS}")
    path = Path(peers_dir or default_peers_dir()) / peer / "bin"
    if not (path / "python").exists():
        raise FileNotFoundError(f"{path} has no python: run benchmarks/peers/setup_peers.sh")
    return path


def peer_env(threads: int = 2) -> dict[str, str]:
    """Environment for a peer command: thread count, and pickled checkpoints allowed."""
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
        TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1",
        PYTHONUNBUFFERED="1",
    )
    return env


# ---------------------------------------------------------------------------------------------
# Configs


def _sub_line(text: str, key: str, value: object) -> str:
    """Replace the value of the (single) line `key: ...` in a YAML text, keeping its comment."""
    pattern = re.compile(rf"^(\s*{re.escape(key)}:\s*)([^#\n]*?)(\s*(?:#.*)?)$", re.MULTILINE)
    text, n = pattern.subn(lambda m: f"{m.group(1)}{value}{m.group(3)}", text)
    if n != 1:
        raise ValueError(f"expected one `{key}:` line in the config, found {n}")
    return text


def test_subset(data_dir: Path, scratch_dir: Path, sentences: int | None) -> Path:
    """The folder whose test.{src,trg} holds the first `sentences` test pairs (or data_dir)."""
    data_dir = Path(data_dir)
    if sentences is None:
        return data_dir
    out = Path(scratch_dir) / f"test_head{sentences}"
    out.mkdir(parents=True, exist_ok=True)
    for side in ("src", "trg"):
        lines = (data_dir / f"test.{side}").read_text().splitlines(keepends=True)
        if sentences > len(lines):
            raise ValueError(f"asked for {sentences} test sentences, there are {len(lines)}")
        (out / f"test.{side}").write_text("".join(lines[:sentences]))
    return out


def _fill(name: str, data_dir: Path, scratch_dir: Path) -> str:
    text = (CONFIG_DIR / name).read_text()
    return text.replace("__DATA__", str(data_dir)).replace("__RUNS__", str(scratch_dir))


def write_train_config(
    peer: str, data_dir: Path, scratch_dir: Path, *, steps: int = 60, warmup: int = 10
) -> Path:
    """Write the peer's training config into scratch_dir and return its path.

    `__DATA__` becomes data_dir and `__RUNS__` scratch_dir. For steps other than the
    protocol's 60, the step count, the logging interval (gcd(warmup, steps), so steps
    `warmup` and `steps` are both logged) and Joey's validation step (it saves the
    checkpoint) follow.
    """
    if not 0 < warmup < steps:
        raise ValueError(f"need 0 < warmup < steps, got warmup={warmup}, steps={steps}")
    data_dir, scratch_dir = Path(data_dir).resolve(), Path(scratch_dir).resolve()
    scratch_dir.mkdir(parents=True, exist_ok=True)
    log_every = math.gcd(warmup, steps)
    if peer == "joeynmt":
        if steps > 300:
            # One epoch is 20,000 / 64 = 312 batches; Joey restarts its interval timer at an
            # epoch boundary, so the interval rates would no longer cover the window.
            raise ValueError("Joey's window must stay in its first epoch: steps <= 300")
        text = _fill("joey_train.yaml", data_dir, scratch_dir)
        text = _sub_line(text, "updates", steps)
        text = _sub_line(text, "validation_freq", steps)
        text = _sub_line(text, "logging_freq", log_every)
        path = scratch_dir / "joey_train.yaml"
    elif peer == "onmt":
        text = _fill("onmt_train.yaml", data_dir, scratch_dir)
        text = _sub_line(text, "train_steps", steps)
        text = _sub_line(text, "report_every", log_every)
        path = scratch_dir / "onmt_train.yaml"
    else:
        raise ValueError(f"unknown peer {peer!r}; one of {PEERS}")
    path.write_text(text)
    return path


def write_decode_config(
    peer: str,
    data_dir: Path,
    scratch_dir: Path,
    *,
    search: str = "greedy",
    sentences: int | None = None,
    onmt_length_ratio: float | None = 0.0,
) -> Path:
    """Write the peer's decoding config for `search` into scratch_dir and return its path.

    `__DATA__` becomes data_dir and `__RUNS__` scratch_dir; with `sentences`, it reads the
    first `sentences` test pairs (copied into scratch_dir). For OpenNMT-py,
    `onmt_length_ratio` is written as its `max_length_ratio` (0: the cap is max_length, 100,
    as Joey's; None: left out, so the toolkit's 1.25 applies: see the module doc).
    """
    if search not in SEARCHES:
        raise ValueError(f"unknown search {search!r}; one of {SEARCHES}")
    data_dir, scratch_dir = Path(data_dir).resolve(), Path(scratch_dir).resolve()
    scratch_dir.mkdir(parents=True, exist_ok=True)
    test_dir = test_subset(data_dir, scratch_dir, sentences)
    if peer == "joeynmt":
        text = _fill(f"joey_decode_{search}.yaml", data_dir, scratch_dir)
        text = text.replace(f'"{data_dir}/test"', f'"{test_dir}/test"')
        path = scratch_dir / f"joey_decode_{search}.yaml"
    elif peer == "onmt":
        text = _fill(f"onmt_decode_{search}.yaml", data_dir, scratch_dir)
        text = _sub_line(text, "src", test_dir / "test.src")
        if onmt_length_ratio is not None:
            text += f"max_length_ratio: {onmt_length_ratio}\n"
        path = scratch_dir / f"onmt_decode_{search}.yaml"
    else:
        raise ValueError(f"unknown peer {peer!r}; one of {PEERS}")
    path.write_text(text)
    return path


def write_configs(
    peer: str,
    data_dir: Path,
    scratch_dir: Path,
    *,
    steps: int = 60,
    warmup: int = 10,
    sentences: int | None = None,
    onmt_length_ratio: float | None = 0.0,
) -> dict[str, Path]:
    """All of a peer's configs written into scratch_dir: {"train" | search: path}."""
    paths = {"train": write_train_config(peer, data_dir, scratch_dir, steps=steps, warmup=warmup)}
    for search in SEARCHES:
        paths[search] = write_decode_config(
            peer,
            data_dir,
            scratch_dir,
            search=search,
            sentences=sentences,
            onmt_length_ratio=onmt_length_ratio,
        )
    return paths


# ---------------------------------------------------------------------------------------------
# Running a command and watching its memory


def _status_kib(pid: int) -> tuple[int, int] | None:
    """(VmRSS, VmHWM) of a process in KiB, or None when it is gone (or a zombie)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    try:
        return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])
    except KeyError:
        return None


def _descendants(root: int) -> list[int]:
    """root and every live process below it, from the parent ids in /proc/*/stat."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


class TreeMemory:
    """Samples the RSS of a process tree from /proc in a background thread."""

    def __init__(self, pid: int, poll_s: float = 0.25):
        self.pid, self.poll_s = pid, poll_s
        self.hwm_kib: dict[int, int] = {}
        self.peak_tree_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        total = 0
        for pid in _descendants(self.pid):
            status = _status_kib(pid)
            if status is None:
                continue
            rss, hwm = status
            total += rss
            self.hwm_kib[pid] = max(hwm, self.hwm_kib.get(pid, 0))
        self.peak_tree_kib = max(self.peak_tree_kib, total)

    def _run(self) -> None:
        while True:
            self._sample()
            if self._stop.wait(self.poll_s):
                return

    def figures(self) -> dict:
        main = self.hwm_kib.get(self.pid, 0)
        children = sorted((v for k, v in self.hwm_kib.items() if k != self.pid), reverse=True)
        return {
            "peak_rss_main_mib": round(main / 1024),
            "peak_rss_children_mib": [round(v / 1024) for v in children],
            "peak_rss_tree_mib": round(self.peak_tree_kib / 1024),
        }


def run_logged(
    cmd: list[str], log_path: Path, env: dict[str, str], *, watch_memory: bool, poll_s: float
) -> dict:
    """Run cmd with stdout and stderr into log_path; {"wall_s", memory figures}. Raises on failure.

    The memory watcher samples the peer process itself: the command is a venv console script or
    `python -m`, so its pid is the peer's Python process.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        start = time.perf_counter()
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        watcher = TreeMemory(proc.pid, poll_s) if watch_memory else contextlib.nullcontext()
        try:
            with watcher:
                rc = proc.wait()
        except BaseException:
            # Interrupted: end the peer and its data loaders (its own process group) too.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        wall = time.perf_counter() - start
    if rc != 0:
        tail = "".join(log_path.read_text().splitlines(keepends=True)[-25:])
        raise RuntimeError(f"{' '.join(cmd)} exited {rc}; log {log_path}:\n{tail}")
    figures = {"wall_s": round(wall, 3)}
    if watch_memory:
        figures.update(watcher.figures())
    return figures


# ---------------------------------------------------------------------------------------------
# Log parsing

_JOEY_STEP = re.compile(
    r"^(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) - INFO - joeynmt\.training - "
    r"Epoch\s+\d+, Step:\s+(?P<step>\d+), .*Tokens per Sec:\s+(?P<rate>\d+)",
    re.MULTILINE,
)
_ONMT_STEP = re.compile(
    r"^\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO\] Step\s+(?P<step>\d+)/\s*\d+;"
    r".*?sents:\s+(?P<sents>\d+); bsz:\s+\d+/\s*(?P<tgt_bsz>\d+)/\s*\d+;"
    r"\s+\d+/\s*(?P<rate>\d+) tok/s;",
    re.MULTILINE,
)


def _timestamp(text: str) -> float:
    return dt.datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def parse_train_log(peer: str, log: str, warmup: int, steps: int) -> dict:
    """Target tokens/s over steps warmup+1..steps from a peer's training log (see module doc)."""
    pattern = _JOEY_STEP if peer == "joeynmt" else _ONMT_STEP
    entries = {int(m["step"]): m for m in pattern.finditer(log)}
    logged = sorted(entries)
    if warmup not in entries or steps not in entries:
        raise ValueError(f"{peer} log has steps {logged}, needs {warmup} and {steps}")
    window = [s for s in logged if warmup < s <= steps]
    tokens = peer_seconds = 0.0
    previous = warmup
    for step in window:
        m = entries[step]
        span = _timestamp(m["ts"]) - _timestamp(entries[previous]["ts"])
        rate = float(m["rate"])
        if peer == "joeynmt":
            interval_tokens = rate * span
        else:
            interval_tokens = float(m["tgt_bsz"]) * (step - previous)
        tokens += interval_tokens
        peer_seconds += interval_tokens / rate
        previous = step
    seconds = _timestamp(entries[steps]["ts"]) - _timestamp(entries[warmup]["ts"])
    window_steps = steps - warmup
    return {
        "window": [warmup + 1, steps],
        "target_tokens": round(tokens),
        "seconds": round(seconds, 3),
        "train_tok_per_s": round(tokens / seconds, 1),
        "train_tok_per_s_peer": round(tokens / peer_seconds, 1),
        "sentences_per_s": round(BATCH_SENTENCES * window_steps / seconds, 2),
        "s_per_step": round(seconds / window_steps, 4),
    }


def parse_decode_log(peer: str, log: str, sentences: int) -> float:
    """The peer's own generation time in seconds (see module doc)."""
    if peer == "joeynmt":
        found = re.findall(r"generation: ([\d.]+)\[sec\]", log) or re.findall(
            r"Generation took ([\d.]+)\[sec\]", log
        )
        if not found:
            raise ValueError("no generation time in Joey's test log")
        return float(found[-1])
    found = re.findall(r"Average translation time \(ms\): ([\d.]+)", log)
    if not found:
        raise ValueError("no 'Average translation time' in OpenNMT-py's log")
    return float(found[-1]) * sentences / 1000


# ---------------------------------------------------------------------------------------------
# Train and decode


def train(
    peer: str,
    data_dir: Path,
    scratch_dir: Path,
    *,
    steps: int = 60,
    warmup: int = 10,
    peers_dir: Path | None = None,
    threads: int = 2,
    poll_s: float = 0.25,
) -> dict:
    """Train `peer` for `steps` steps; figures over steps warmup+1..steps and the checkpoint.

    The returned dict holds train_tok_per_s (the headline), train_tok_per_s_peer,
    sentences_per_s, target_tokens, seconds, peak_rss_*_mib, wall_s (whole command), log and
    checkpoint (pass it to `decode`). The model is written under scratch_dir, replacing the
    previous one.
    """
    scratch_dir = Path(scratch_dir).resolve()
    bin_dir = peer_bin(peer, peers_dir)
    config = write_train_config(peer, data_dir, scratch_dir, steps=steps, warmup=warmup)
    if peer == "joeynmt":
        model_dir = scratch_dir / "joey_train"
        cmd = [str(bin_dir / "python"), "-m", "joeynmt", "train", str(config)]
        cmd.append("--skip-test")
    else:
        model_dir = scratch_dir / "onmt_train"
        shutil.rmtree(model_dir, ignore_errors=True)
        cmd = [str(bin_dir / "onmt_train"), "-config", str(config)]
    log_path = scratch_dir / f"{peer}_train.log"
    run = run_logged(cmd, log_path, peer_env(threads), watch_memory=True, poll_s=poll_s)
    figures = {"peer": peer, "phase": "train", "steps": steps, "threads": threads}
    figures.update(parse_train_log(peer, log_path.read_text(), warmup, steps))
    figures.update(run)
    if peer == "joeynmt":
        checkpoint = model_dir / f"{steps}.ckpt"
    else:
        checkpoint = model_dir / f"model_step_{steps}.pt"
    if not checkpoint.exists():
        raise FileNotFoundError(f"{peer} wrote no checkpoint {checkpoint}")
    figures.update(log=str(log_path), checkpoint=str(checkpoint))
    return figures


def count_outputs(lines: list[str], cap: int = MAX_OUTPUT_LENGTH) -> dict:
    """Output token counts of translations, one per line (see module doc)."""
    lengths = [len(line.split()) for line in lines]
    capped = sum(n >= cap for n in lengths)
    return {
        "output_tokens": sum(lengths),
        "output_tokens_with_eos": sum(lengths) + len(lengths) - capped,
        "capped_sentences": capped,
        "mean_output_len": round(sum(lengths) / max(len(lengths), 1), 2),
        "max_output_len": max(lengths, default=0),
    }


def decode(
    peer: str,
    data_dir: Path,
    scratch_dir: Path,
    checkpoint: Path,
    *,
    search: str = "greedy",
    sentences: int | None = None,
    onmt_length_ratio: float | None = 0.0,
    peers_dir: Path | None = None,
    threads: int = 2,
    poll_s: float = 0.25,
) -> dict:
    """Decode the test set (or its first `sentences`) with `checkpoint`, greedy or beam5.

    Batch 64 sentences, at most 100 output tokens (for OpenNMT-py with the default
    onmt_length_ratio=0; see `write_decode_config`). The returned dict holds out_tok_per_s
    and sent_per_s (on the peer's own generation time decode_s), wall_s, startup_s, the output
    counts of `count_outputs`, peak_rss_main_mib and the paths of the log and the output.
    """
    if search not in SEARCHES:
        raise ValueError(f"unknown search {search!r}; one of {SEARCHES}")
    scratch_dir = Path(scratch_dir).resolve()
    bin_dir = peer_bin(peer, peers_dir)
    config = write_decode_config(
        peer,
        data_dir,
        scratch_dir,
        search=search,
        sentences=sentences,
        onmt_length_ratio=onmt_length_ratio,
    )
    test_src = test_subset(data_dir, scratch_dir, sentences) / "test.src"
    n = len(test_src.read_text().splitlines())
    output = scratch_dir / f"{peer}_{search}.out"
    if peer == "joeynmt":
        (scratch_dir / "joey_decode").mkdir(parents=True, exist_ok=True)  # its model_dir
        cmd = [str(bin_dir / "python"), "-m", "joeynmt", "test", str(config)]
        cmd += ["--ckpt", str(checkpoint), "--output-path", str(output)]
        written = Path(f"{output}.test")  # Joey appends the split's name
    else:
        cmd = [str(bin_dir / "onmt_translate"), "-config", str(config)]
        cmd += ["-model", str(checkpoint), "-output", str(output)]
        written = output
    written.unlink(missing_ok=True)
    log_path = scratch_dir / f"{peer}_{search}.log"
    run = run_logged(cmd, log_path, peer_env(threads), watch_memory=True, poll_s=poll_s)
    lines = written.read_text().splitlines()
    if len(lines) != n:
        raise RuntimeError(f"{written} has {len(lines)} lines for {n} sentences")
    decode_s = parse_decode_log(peer, log_path.read_text(), n)
    counts = count_outputs(lines)
    figures = {"peer": peer, "phase": "decode", "search": search, "sentences": n}
    figures["max_output_length"] = MAX_OUTPUT_LENGTH
    if peer == "onmt":
        figures["onmt_length_ratio"] = onmt_length_ratio
    figures.update(counts)
    figures.update(
        decode_s=round(decode_s, 4),
        out_tok_per_s=round(counts["output_tokens"] / decode_s, 1),
        out_tok_with_eos_per_s=round(counts["output_tokens_with_eos"] / decode_s, 1),
        sent_per_s=round(n / decode_s, 2),
        wall_s=run["wall_s"],
        startup_s=round(run["wall_s"] - decode_s, 3),
        peak_rss_main_mib=run["peak_rss_main_mib"],
        log=str(log_path),
        output=str(written),
    )
    return figures


def run_peer(
    peer: str,
    data_dir: Path,
    scratch_dir: Path,
    *,
    steps: int = 60,
    warmup: int = 10,
    sentences: int | None = None,
    searches: tuple[str, ...] = SEARCHES,
    onmt_length_ratio: float | None = 0.0,
    peers_dir: Path | None = None,
    threads: int = 2,
) -> dict:
    """Train once, then decode with each search: {"train": {...}, search: {...}}."""
    result = {
        "train": train(
            peer,
            data_dir,
            scratch_dir,
            steps=steps,
            warmup=warmup,
            peers_dir=peers_dir,
            threads=threads,
        )
    }
    for search in searches:
        result[search] = decode(
            peer,
            data_dir,
            scratch_dir,
            result["train"]["checkpoint"],
            search=search,
            sentences=sentences,
            onmt_length_ratio=onmt_length_ratio,
            peers_dir=peers_dir,
            threads=threads,
        )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("peer", choices=PEERS)
    parser.add_argument("data_dir", type=Path, help="the folder make_workload.py wrote")
    parser.add_argument("scratch_dir", type=Path, help="configs, models, outputs, logs")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--sentences", type=int, default=None, help="first N test sentences")
    parser.add_argument("--searches", nargs="*", choices=SEARCHES, default=list(SEARCHES))
    parser.add_argument(
        "--checkpoint", type=Path, default=None, help="skip training, decode with this"
    )
    parser.add_argument(
        "--onmt-length-ratio",
        default="0",
        help="OpenNMT-py's max_length_ratio: 0 caps outputs at 100 tokens like Joey; "
        "'default' keeps the toolkit's 1.25 x longest source in the batch + 5",
    )
    parser.add_argument("--peers-dir", type=Path, default=None)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    ratio = None if args.onmt_length_ratio == "default" else float(args.onmt_length_ratio)
    if args.checkpoint is None:
        result = run_peer(
            args.peer,
            args.data_dir,
            args.scratch_dir,
            steps=args.steps,
            warmup=args.warmup,
            sentences=args.sentences,
            searches=tuple(args.searches),
            onmt_length_ratio=ratio,
            peers_dir=args.peers_dir,
            threads=args.threads,
        )
    else:
        result = {
            search: decode(
                args.peer,
                args.data_dir,
                args.scratch_dir,
                args.checkpoint.resolve(),
                search=search,
                sentences=args.sentences,
                onmt_length_ratio=ratio,
                peers_dir=args.peers_dir,
                threads=args.threads,
            )
            for search in args.searches
        }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
