"""Train and decode with the peer toolkits (Joey NMT 2.2.1, OpenNMT-py 3.5.1) on the speed workload.

    python benchmarks/peers/peers.py {joeynmt,onmt} WORKLOAD_DIR SCRATCH_DIR
        [--steps 60] [--warmup 10] [--sentences N] [--searches greedy beam5]
        [--batch-size 64] [--min-length 0] [--max-length 100] [--checkpoint PATH]
        [--peer-configs DIR] [--peers-dir DIR] [--threads 2]

WORKLOAD_DIR is what `make_workload.py` wrote (train/dev/test .src/.trg, vocab.src/.trg);
SCRATCH_DIR takes the written configs, the peer's model and outputs, and one log per command
(overwritten run after run). The configs are the shared ones (`--peer-configs`, by default
../shared/bench/peer-configs from the repository root), their `__DATA__` and `__RUNS__` filled
in and the run's settings written over them. The peers live in the virtualenvs that
`benchmarks/peers/setup_peers.sh` makes (`--peers-dir`, default $PEERS_DIR or
~/.cache/alignmt-peers). A driver makes a peer with `make_peer(name, ...)` and calls its
`train` and `decode`: paths as arguments, a dict of figures back. Every run is a fresh process
of the peer's own command line, with OMP_NUM_THREADS and MKL_NUM_THREADS set to `threads` and
TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 (both peers pickle non-tensor objects into checkpoints).

How each figure is obtained (nothing is injected into the peers; all comes from their logs,
their output files and the operating system):

Training (`train`), steps warmup+1..steps (11..60 by default), logged every gcd(warmup, steps)
steps. Each peer logs, per logging interval, the non-padding target tokens (words + end of
sentence: Joey's `Batch.ntokens`, OpenNMT-py's `n_words`) per second over that interval:
  - `seconds`: between the log lines of steps `warmup` and `steps`, from their timestamps.
  - `target_tokens`: OpenNMT-py logs the average target tokens per batch of the interval, so
    tokens = that average x the interval's steps (exact to < 0.05%); Joey logs only the rate,
    so its tokens are rate x the interval's duration between its log lines.
  - `train_tok_per_s` = target_tokens / seconds: the headline figure; `train_tok_per_s_peer`:
    the peer's own interval rates combined over the window (an independent check for
    OpenNMT-py); `sentences_per_s`: 64 x (steps - warmup) / seconds.
  - Joey's validation (it saves the checkpoint) and OpenNMT-py's checkpoint come after the
    window; Joey runs with --skip-test. `wall_s` is the whole command (start-up, OpenNMT-py's
    data loaders filling their first bucket, Joey's validation, the checkpoint).
  - Memory: the command's process tree is sampled from /proc every 0.25 s:
    `peak_rss_main_mib` is the peer process's own high-water mark (VmHWM, exact),
    `peak_rss_children_mib` its children's (OpenNMT-py's data-loader workers: forked, they
    share pages with their parent), `peak_rss_tree_mib` the largest sum of VmRSS at one instant.
  - `start_training` runs untimed in the background instead, a checkpoint every `save_every`
    steps, every one kept (Joey's validation saves them; `keep_best_ckpts: -1`), from a
    checkpoint `resume` if given (Joey's `load_model`, OpenNMT-py's `train_from`, with the
    optimiser state) up to `steps` in all: how benchmarks/compare.py's trained models are made.

Decoding (`decode`): the peer's own test command on a split (`test` or `dev`, or its first
`sentences`), batches of `batch_size` sentences, greedy or beam 5, at most `max_length` output
tokens and, with `min_length`, no end of sentence before that many (Joey's
`min_output_length`, OpenNMT-py's `min_length`): min = max fixes every output's length.
  - `decode_s`: the generation time the peer reports for its loop over the batches, without
    start-up, model loading, writing and scoring: Joey's "generation: X[sec]"; OpenNMT-py's
    "Average translation time (ms)" x the number of sentences.
  - The cap: Joey's `max_output_length` is exact. OpenNMT-py caps each batch at
    min(max_length, max_length_ratio x longest source + 5), its ratio 1.25 by default; its
    `max_length_ratio` is written as 0, so both peers stop at exactly `max_length`.
  - `output_tokens`: whitespace tokens of the written translations (words, without end of
    sentence); `out_tok_per_s` = output_tokens / decode_s, `sent_per_s` = sentences / decode_s;
    `capped_sentences` counts outputs of `max_length` tokens.
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
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

REPOSITORY = Path(__file__).resolve().parents[2]
DEFAULT_CONFIGS = REPOSITORY.parent / "shared" / "bench" / "peer-configs"
SEARCHES = ("greedy", "beam5")
BATCH_SENTENCES = 64


def default_peers_dir() -> Path:
    """Where setup_peers.sh put the virtualenvs."""
    return Path(os.environ.get("PEERS_DIR", Path.home() / ".cache" / "alignmt-peers"))


def peer_env(threads: int = 2) -> dict[str, str]:
    """Environment for a benchmark command: thread count, and pickled checkpoints allowed."""
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
        TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1",
        PYTHONUNBUFFERED="1",
    )
    return env


@dataclass(frozen=True)
class Decoding:
    """What one decoding run asks for: the search, the batch size, the output lengths, and
    which sentences (the first `sentences` of `split`, all of them by default)."""

    search: str = "greedy"
    batch_size: int = BATCH_SENTENCES
    min_length: int = 0
    max_length: int = 100
    split: str = "test"
    sentences: int | None = None

    def __post_init__(self):
        if self.search not in SEARCHES:
            raise ValueError(f"unknown search {self.search!r}; one of {SEARCHES}")
        if not 0 <= self.min_length <= self.max_length:
            raise ValueError(f"need 0 <= min_length <= max_length, got {self}")

    @property
    def beam_size(self) -> int:
        return 5 if self.search == "beam5" else 1


def split_subset(data_dir: Path, scratch_dir: Path, split: str, sentences: int | None) -> Path:
    """A folder whose test.{src,trg} are the first `sentences` pairs of `split` (all by
    default): the file names every decoding config reads."""
    out = Path(scratch_dir) / f"{split}_head{sentences or 'all'}"
    out.mkdir(parents=True, exist_ok=True)
    for side in ("src", "trg"):
        lines = (Path(data_dir) / f"{split}.{side}").read_text().splitlines(keepends=True)
        if sentences is not None and sentences > len(lines):
            raise ValueError(f"asked for {sentences} {split} sentences, there are {len(lines)}")
        (out / f"test.{side}").write_text("".join(lines[:sentences]))
    return out


def count_outputs(lines: list[str], cap: int) -> dict:
    """Output token counts of translations, one per line (see module doc)."""
    lengths = [len(line.split()) for line in lines]
    capped = sum(n >= cap for n in lengths)
    return {
        "output_tokens": sum(lengths),
        "capped_sentences": capped,
        "mean_output_len": round(sum(lengths) / max(len(lengths), 1), 2),
        "max_output_len": max(lengths, default=0),
    }


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


def run_logged(cmd: list[str], log_path: Path, env: dict[str, str], poll_s: float = 0.25) -> dict:
    """Run cmd with stdout and stderr into log_path; {"wall_s", memory figures}. Raises on
    failure. The command is a venv console script or `python -m`, so its pid is the peer's
    Python process."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        start = time.perf_counter()
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            with TreeMemory(proc.pid, poll_s) as watcher:
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
    return {"wall_s": round(wall, 3), **watcher.figures()}


class Training:
    """A training command running in the background (its own process group, output to
    `log_path`) that saves a checkpoint every few steps; `checkpoint_at(step)` names the one of
    `step` steps. Used as a context manager, it ends the command on the way out."""

    def __init__(
        self,
        cmd: list[str],
        log_path: Path,
        env: dict[str, str],
        checkpoint_at: Callable[[int], Path],
        poll_s: float = 2.0,
    ):
        self.cmd, self.log_path, self.poll_s = cmd, log_path, poll_s
        self.checkpoint_at = checkpoint_at
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "w") as log:
            self.process = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )

    def checkpoint(self, step: int) -> Path:
        """The checkpoint of `step` steps, once completely written; raises if the command
        ends without it."""
        path = self.checkpoint_at(step)
        while not written(path):
            if self.process.poll() is not None and not written(path):
                tail = "".join(self.log_path.read_text().splitlines(keepends=True)[-25:])
                raise RuntimeError(
                    f"{' '.join(self.cmd)} exited {self.process.returncode} without {path}; "
                    f"log {self.log_path}:\n{tail}"
                )
            time.sleep(self.poll_s)
        return path

    def stop(self) -> None:
        """End the command and every process it started."""
        with contextlib.suppress(ProcessLookupError):  # the group outlives its leader
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def __enter__(self) -> Training:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def written(path: Path) -> bool:
    """Whether the checkpoint `path` is completely written: torch.save writes a zip archive
    whose directory comes last, and every entry's checksum must match it."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip() is None
    except (OSError, zipfile.BadZipFile):
        return False


def _timestamp(text: str) -> float:
    return dt.datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


# ---------------------------------------------------------------------------------------------
# The peers


class Peer:
    """What running a peer toolkit takes: its configs, its commands, its logs. Subclasses say
    how their toolkit spells each of these; training, decoding and the figures are shared."""

    name: str
    train_template: str  # the shared training config's file name
    log_step: re.Pattern  # a training log line: ts, step, rate (and OpenNMT-py's tgt_bsz)

    def __init__(
        self,
        configs: Path = DEFAULT_CONFIGS,
        peers_dir: Path | None = None,
        threads: int = 2,
        poll_s: float = 0.25,
    ):
        self.configs = Path(configs)
        self.bin = Path(peers_dir or default_peers_dir()) / self.name / "bin"
        self.threads, self.poll_s = threads, poll_s
        if not (self.bin / "python").exists():
            raise FileNotFoundError(
                f"{self.bin} has no python: run benchmarks/peers/setup_peers.sh"
            )
        if not self.configs.is_dir():
            raise FileNotFoundError(f"peer configs folder {self.configs} does not exist")

    # ----------------------------------------------------------- per toolkit
    def edit_train(
        self, cfg: dict, steps: int, log_every: int, save_every: int, resume: Path | None, timed
    ) -> None:
        raise NotImplementedError

    def train_command(self, config: Path) -> list[str]:
        raise NotImplementedError

    def model_dir(self, scratch: Path) -> Path:
        raise NotImplementedError

    def checkpoint(self, model_dir: Path, steps: int) -> Path:
        raise NotImplementedError

    def interval_tokens(self, line: re.Match, rate: float, span: float, steps: int) -> float:
        """The target tokens of one logging interval of `steps` steps and `span` seconds."""
        raise NotImplementedError

    def decode_template(self, search: str) -> str:
        raise NotImplementedError

    def edit_decode(self, cfg: dict, source_dir: Path, decoding: Decoding) -> None:
        raise NotImplementedError

    def decode_command(self, config: Path, checkpoint: Path, output: Path):
        """(command, the file the translations end up in)."""
        raise NotImplementedError

    def generation_seconds(self, log: str, sentences: int) -> float:
        raise NotImplementedError

    # ----------------------------------------------------------------- shared
    def _config(self, template: str, data_dir: Path, scratch: Path) -> dict:
        text = (self.configs / template).read_text()
        text = text.replace("__DATA__", str(data_dir)).replace("__RUNS__", str(scratch))
        return yaml.safe_load(text)

    def write_train_config(
        self, data_dir, scratch, *, steps=60, warmup=10, save_every=None, resume=None, timed=True
    ) -> Path:
        """The training config in `scratch`: `steps` in all, logged every gcd(warmup, steps)
        steps (so steps `warmup` and `steps` are both logged), a checkpoint every `save_every`
        steps (by default at `steps`), continuing from the checkpoint `resume`. `timed`: the
        log must cover a timing window (untimed runs only train)."""
        if timed and not 0 < warmup < steps:
            raise ValueError(f"need 0 < warmup < steps, got warmup={warmup}, steps={steps}")
        data_dir, scratch = Path(data_dir).resolve(), Path(scratch).resolve()
        scratch.mkdir(parents=True, exist_ok=True)
        cfg = self._config(self.train_template, data_dir, scratch)
        log_every = math.gcd(warmup, steps) if timed else min(100, steps)
        self.edit_train(cfg, steps, log_every, save_every or steps, resume, timed)
        path = scratch / self.train_template
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return path

    def write_decode_config(self, data_dir, scratch, decoding: Decoding) -> Path:
        data_dir, scratch = Path(data_dir).resolve(), Path(scratch).resolve()
        source_dir = split_subset(data_dir, scratch, decoding.split, decoding.sentences)
        template = self.decode_template(decoding.search)
        cfg = self._config(template, data_dir, scratch)
        self.edit_decode(cfg, source_dir, decoding)
        path = scratch / template
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return path

    def parse_train_log(self, log: str, warmup: int, steps: int) -> dict:
        """Target tokens/s over steps warmup+1..steps (see module doc)."""
        entries = {int(m["step"]): m for m in self.log_step.finditer(log)}
        if warmup not in entries or steps not in entries:
            raise ValueError(
                f"{self.name} log has steps {sorted(entries)}, needs {warmup}, {steps}"
            )
        tokens = peer_seconds = 0.0
        previous = warmup
        for step in [s for s in sorted(entries) if warmup < s <= steps]:
            m = entries[step]
            span = _timestamp(m["ts"]) - _timestamp(entries[previous]["ts"])
            rate = float(m["rate"])
            interval = self.interval_tokens(m, rate, span, step - previous)
            tokens += interval
            peer_seconds += interval / rate
            previous = step
        seconds = _timestamp(entries[steps]["ts"]) - _timestamp(entries[warmup]["ts"])
        return {
            "window": [warmup + 1, steps],
            "target_tokens": round(tokens),
            "seconds": round(seconds, 3),
            "train_tok_per_s": round(tokens / seconds, 1),
            "train_tok_per_s_peer": round(tokens / peer_seconds, 1),
            "sentences_per_s": round(BATCH_SENTENCES * (steps - warmup) / seconds, 2),
        }

    def train(self, data_dir, scratch, *, steps=60, warmup=10):
        """Train for `steps` steps. Figures: those over steps warmup+1..steps; peak memory,
        wall time, the log and the checkpoint (pass it to `decode`)."""
        scratch = Path(scratch).resolve()
        model_dir = self.model_dir(scratch)
        shutil.rmtree(model_dir, ignore_errors=True)
        config = self.write_train_config(data_dir, scratch, steps=steps, warmup=warmup)
        log_path = scratch / f"{self.name}_train.log"
        run = run_logged(self.train_command(config), log_path, peer_env(self.threads), self.poll_s)
        figures = {"system": self.name, "phase": "train", "steps": steps, "threads": self.threads}
        figures.update(self.parse_train_log(log_path.read_text(), warmup, steps))
        figures.update(run)
        checkpoint = self.checkpoint(model_dir, steps)
        if not checkpoint.exists():
            raise FileNotFoundError(f"{self.name} wrote no checkpoint {checkpoint}")
        figures.update(log=str(log_path), checkpoint=str(checkpoint))
        return figures

    def start_training(self, data_dir, scratch, *, steps, save_every, resume=None) -> Training:
        """Untimed training in the background up to `steps` steps in all, from the checkpoint
        `resume` if given, a checkpoint every `save_every` steps (see module doc)."""
        scratch = Path(scratch).resolve()
        model_dir = self.model_dir(scratch)
        if resume is not None:  # out of the model folder, which the new run replaces
            resume = Path(shutil.copy(resume, scratch / f"{self.name}_resume.ckpt"))
        shutil.rmtree(model_dir, ignore_errors=True)
        config = self.write_train_config(
            data_dir, scratch, steps=steps, save_every=save_every, resume=resume, timed=False
        )
        return Training(
            self.train_command(config),
            scratch / f"{self.name}_train.log",
            peer_env(self.threads),
            lambda step: self.checkpoint(model_dir, step),
        )

    def decode(self, data_dir, scratch, checkpoint: Path, decoding: Decoding) -> dict:
        """Decode with `checkpoint` as `decoding` asks: the output counts, out_tok_per_s and
        sent_per_s on the peer's own generation time, wall and start-up time, peak memory,
        and the paths of the log and the translations."""
        scratch = Path(scratch).resolve()
        config = self.write_decode_config(data_dir, scratch, decoding)
        tag = f"{self.name}_{decoding.split}_{decoding.search}_b{decoding.batch_size}"
        cmd, written = self.decode_command(config, Path(checkpoint), scratch / f"{tag}.out")
        written.unlink(missing_ok=True)
        log_path = scratch / f"{tag}.log"
        run = run_logged(cmd, log_path, peer_env(self.threads), self.poll_s)
        lines = written.read_text().splitlines()
        source = split_subset(data_dir, scratch, decoding.split, decoding.sentences) / "test.src"
        n = len(source.read_text().splitlines())
        if len(lines) != n:
            raise RuntimeError(f"{written} has {len(lines)} lines for {n} sentences")
        decode_s = self.generation_seconds(log_path.read_text(), n)
        counts = count_outputs(lines, decoding.max_length)
        return {
            "system": self.name,
            "phase": "decode",
            **decoding.__dict__,
            **counts,
            "decode_s": round(decode_s, 4),
            "out_tok_per_s": round(counts["output_tokens"] / decode_s, 1),
            "sent_per_s": round(n / decode_s, 2),
            "wall_s": run["wall_s"],
            "startup_s": round(run["wall_s"] - decode_s, 3),
            "peak_rss_main_mib": run["peak_rss_main_mib"],
            "log": str(log_path),
            "output": str(written),
        }


class JoeyNMT(Peer):
    name = "joeynmt"
    train_template = "joey_train.yaml"
    log_step = re.compile(
        r"^(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) - INFO - joeynmt\.training - "
        r"Epoch\s+\d+, Step:\s+(?P<step>\d+), .*Tokens per Sec:\s+(?P<rate>\d+)",
        re.MULTILINE,
    )

    def edit_train(self, cfg, steps, log_every, save_every, resume, timed):
        if timed and steps > 300:
            # One epoch is 20,000 / 64 = 312 batches; Joey restarts its interval timer at an
            # epoch boundary, so the interval rates would no longer cover the window.
            raise ValueError("Joey's timed window must stay in its first epoch: steps <= 300")
        training = cfg["training"]
        # Its validation saves the checkpoint.
        training.update(updates=steps, logging_freq=log_every, validation_freq=save_every)
        training["keep_best_ckpts"] = -1  # every validation's checkpoint, none deleted
        if resume is not None:
            training["load_model"] = str(resume)

    def train_command(self, config):
        return [str(self.bin / "python"), "-m", "joeynmt", "train", str(config), "--skip-test"]

    def model_dir(self, scratch):
        return scratch / "joey_train"

    def checkpoint(self, model_dir, steps):
        return model_dir / f"{steps}.ckpt"

    def interval_tokens(self, line, rate, span, steps):
        return rate * span

    def decode_template(self, search):
        return f"joey_decode_{search}.yaml"

    def edit_decode(self, cfg, source_dir, decoding):
        cfg["data"]["test"] = str(source_dir / "test")
        cfg["testing"].update(
            batch_size=decoding.batch_size,
            beam_size=decoding.beam_size,
            max_output_length=decoding.max_length,
            min_output_length=decoding.min_length,
        )

    def decode_command(self, config, checkpoint, output):
        (config.parent / "joey_decode").mkdir(parents=True, exist_ok=True)  # its model_dir
        cmd = [str(self.bin / "python"), "-m", "joeynmt", "test", str(config)]
        cmd += ["--ckpt", str(checkpoint), "--output-path", str(output)]
        return cmd, Path(f"{output}.test")  # Joey appends the split's name

    def generation_seconds(self, log, sentences):
        found = re.findall(r"generation: ([\d.]+)\[sec\]", log) or re.findall(
            r"Generation took ([\d.]+)\[sec\]", log
        )
        if not found:
            raise ValueError("no generation time in Joey's test log")
        return float(found[-1])


class OpenNMT(Peer):
    name = "onmt"
    train_template = "onmt_train.yaml"
    log_step = re.compile(
        r"^\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO\] Step\s+(?P<step>\d+)/\s*\d+;"
        r".*?sents:\s+(?P<sents>\d+); bsz:\s+\d+/\s*(?P<tgt_bsz>\d+)/\s*\d+;"
        r"\s+\d+/\s*(?P<rate>\d+) tok/s;",
        re.MULTILINE,
    )

    def edit_train(self, cfg, steps, log_every, save_every, resume, timed):
        cfg.update(train_steps=steps, report_every=log_every, save_checkpoint_steps=save_every)
        if resume is not None:
            cfg.update(train_from=str(resume), reset_optim="none")

    def train_command(self, config):
        return [str(self.bin / "onmt_train"), "-config", str(config)]

    def model_dir(self, scratch):
        return scratch / "onmt_train"

    def checkpoint(self, model_dir, steps):
        return model_dir / f"model_step_{steps}.pt"

    def interval_tokens(self, line, rate, span, steps):
        return float(line["tgt_bsz"]) * steps

    def decode_template(self, search):
        return f"onmt_decode_{search}.yaml"

    def edit_decode(self, cfg, source_dir, decoding):
        cfg.update(
            src=str(source_dir / "test.src"),
            batch_size=decoding.batch_size,
            beam_size=decoding.beam_size,
            max_length=decoding.max_length,
            min_length=decoding.min_length,
            max_length_ratio=0,  # the cap is max_length, as Joey's (see module doc)
        )

    def decode_command(self, config, checkpoint, output):
        cmd = [str(self.bin / "onmt_translate"), "-config", str(config)]
        return [*cmd, "-model", str(checkpoint), "-output", str(output)], output

    def generation_seconds(self, log, sentences):
        found = re.findall(r"Average translation time \(ms\): ([\d.]+)", log)
        if not found:
            raise ValueError("no 'Average translation time' in OpenNMT-py's log")
        return float(found[-1]) * sentences / 1000


PEERS = {peer.name: peer for peer in (JoeyNMT, OpenNMT)}


def make_peer(name: str, **options) -> Peer:
    if name not in PEERS:
        raise ValueError(f"unknown peer {name!r}; one of {sorted(PEERS)}")
    return PEERS[name](**options)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("peer", choices=sorted(PEERS))
    parser.add_argument("data_dir", type=Path, help="the folder make_workload.py wrote")
    parser.add_argument("scratch_dir", type=Path, help="configs, models, outputs, logs")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--sentences", type=int, default=None, help="first N test sentences")
    parser.add_argument("--searches", nargs="*", choices=SEARCHES, default=list(SEARCHES))
    parser.add_argument("--batch-size", type=int, default=BATCH_SENTENCES)
    parser.add_argument("--min-length", type=int, default=0, help="= max: matched lengths")
    parser.add_argument("--max-length", type=int, default=100)
    parser.add_argument("--checkpoint", type=Path, help="skip training, decode with this")
    parser.add_argument("--peer-configs", type=Path, default=DEFAULT_CONFIGS)
    parser.add_argument("--peers-dir", type=Path, default=None)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    peer = make_peer(
        args.peer, configs=args.peer_configs, peers_dir=args.peers_dir, threads=args.threads
    )
    result = {}
    checkpoint = args.checkpoint
    if checkpoint is None:
        result["train"] = peer.train(
            args.data_dir, args.scratch_dir, steps=args.steps, warmup=args.warmup
        )
        checkpoint = Path(result["train"]["checkpoint"])
    for search in args.searches:
        decoding = Decoding(
            search, args.batch_size, args.min_length, args.max_length, "test", args.sentences
        )
        result[search] = peer.decode(
            args.data_dir, args.scratch_dir, checkpoint.resolve(), decoding
        )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
