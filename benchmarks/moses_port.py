"""sacremoses (what `MosesTokenizer` runs) against a compiled Moses port, on real corpora.

    python benchmarks/moses_port.py --port-python PYTHON [--data ../shared/data] [--repeats 3]

The port is `fast-mosestokenizer` (C++ with Python bindings). It publishes wheels for CPython
3.6 to 3.8 only and no source distribution, so it cannot be installed beside alignmt (Python
>= 3.10): it runs in an interpreter of its own, `--port-python`, e.g. a Python 3.8 virtualenv
with `pip install fast-mosestokenizer==0.0.8.2`. Both tokenise every line of Multi30k (train
and test, en/de/fr) and the Tatoeba en-fr sample with the options alignmt uses (no XML
escaping, no aggressive dash splits). Printed per file: the lines whose tokens differ, the
first differences, and sentences/s of each (the median of `--repeats` timed passes, the two
alternating in one invocation). Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Run by `--port-python`: stdlib and the port only (Python 3.8 syntax).
PORT_WORKER = """
import gzip, json, sys, time
from mosestokenizer import MosesTokenizer

def lines(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\\r\\n") for line in f]

spec = json.loads(sys.argv[1])
text = [line.split("\\t")[spec["column"]] for line in lines(spec["path"])]
tokenizer = MosesTokenizer(spec["lang"], aggressive_dash_splits=False, escape_xml=False)
started = time.perf_counter()
tokens = [tokenizer.tokenize(line) for line in text]
seconds = time.perf_counter() - started
with open(spec["out"], "w", encoding="utf-8") as f:
    json.dump({"seconds": seconds, "tokens": tokens}, f, ensure_ascii=False)
"""


def corpus_files(data: Path) -> list[dict]:
    """Every file to tokenise: path, language, and the tab-separated column (Tatoeba)."""
    files = [
        {"path": str(data / "multi30k" / f"{split}.{lang}.gz"), "lang": lang, "column": 0}
        for split in ("train", "test_2016_flickr")
        for lang in ("en", "de", "fr")
    ]
    tatoeba = data / "tatoeba-en-fr" / "eng-fra.tsv"
    files += [{"path": str(tatoeba), "lang": "en", "column": 0}]
    files += [{"path": str(tatoeba), "lang": "fr", "column": 1}]
    return [f for f in files if Path(f["path"]).is_file()]


def read_text(spec: dict) -> list[str]:
    opener = gzip.open if spec["path"].endswith(".gz") else open
    with opener(spec["path"], "rt", encoding="utf-8") as f:
        return [line.rstrip("\r\n").split("\t")[spec["column"]] for line in f]


def ours(spec: dict, text: list[str]) -> tuple[float, list[list[str]]]:
    from alignmt.data import MosesTokenizer

    tokenizer = MosesTokenizer(spec["lang"])
    started = time.perf_counter()
    tokens = [tokenizer.tokenize(line) for line in text]
    return time.perf_counter() - started, tokens


def port(spec: dict, python: str, scratch: Path) -> tuple[float, list[list[str]]]:
    out = scratch / "port.json"
    job = json.dumps({**spec, "out": str(out)})
    done = subprocess.run([python, "-c", PORT_WORKER, job], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"the port failed under {python}:\n{done.stderr[-2000:]}")
    result = json.loads(out.read_text(encoding="utf-8"))
    return result["seconds"], result["tokens"]


def compare(spec: dict, python: str, repeats: int, scratch: Path) -> dict:
    text = read_text(spec)
    times = {"sacremoses": [], "port": []}
    for _ in range(repeats):
        seconds, mine = ours(spec, text)
        times["sacremoses"].append(seconds)
        seconds, theirs = port(spec, python, scratch)
        times["port"].append(seconds)
    differing = [k for k, (a, b) in enumerate(zip(mine, theirs, strict=True)) if a != b]
    rates = {name: len(text) / statistics.median(t) for name, t in times.items()}
    name = f"{Path(spec['path']).name}[{spec['lang']}]"
    print(
        f"{name}: {len(text):,} lines, {len(differing):,} tokenised differently "
        f"({100 * len(differing) / len(text):.2f}%); sentences/s sacremoses "
        f"{rates['sacremoses']:,.0f}, port {rates['port']:,.0f} "
        f"({rates['port'] / rates['sacremoses']:.1f}x)"
    )
    for k in differing[:3]:
        print(f"  line {k + 1}: {text[k]!r}")
        print(f"    sacremoses {' '.join(mine[k])!r}")
        print(f"    port       {' '.join(theirs[k])!r}")
    return {"lines": len(text), "differing": len(differing), **rates}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port-python", required=True, help="a Python with fast-mosestokenizer")
    default_data = Path(__file__).resolve().parents[2] / "shared" / "data"
    parser.add_argument("--data", type=Path, default=default_data)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    files = corpus_files(args.data)
    if not files:
        sys.exit(f"no corpus files under {args.data} (multi30k/, tatoeba-en-fr/)")
    with tempfile.TemporaryDirectory() as scratch:
        results = [compare(spec, args.port_python, args.repeats, Path(scratch)) for spec in files]
    lines = sum(r["lines"] for r in results)
    differing = sum(r["differing"] for r in results)
    share = 100 * differing / lines
    print(f"all: {lines:,} lines, {differing:,} tokenised differently ({share:.2f}%)")


if __name__ == "__main__":
    main()
