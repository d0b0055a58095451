"""The Moses-port comparison runs end to end and counts differing lines exactly: a stand-in
`mosestokenizer` module (the port's interface) built on sacremoses agrees everywhere, one that
splits differently is caught line by line."""

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "moses_port.py"

# The port's interface, backed by sacremoses; `__SPLIT__` decides whether it differs.
STAND_IN = """
from sacremoses import MosesTokenizer as Moses


class MosesTokenizer:
    def __init__(self, lang, aggressive_dash_splits=False, escape_xml=False):
        self._moses = Moses(lang)

    def tokenize(self, text):
        tokens = self._moses.tokenize(text, escape=False, aggressive_dash_splits=False)
        if __SPLIT__:
            tokens = [piece for token in tokens for piece in token.split("-")]
        return tokens
"""


def corpora(folder: Path) -> Path:
    lines = {"en": ["A well-known man.", "Two dogs run."], "de": ["Ein Hund.", "Zwei Katzen."]}
    lines["fr"] = ["Un chien-loup.", "Deux chats."]
    (folder / "multi30k").mkdir(parents=True)
    for split in ("train", "test_2016_flickr"):
        for lang, text in lines.items():
            with gzip.open(folder / "multi30k" / f"{split}.{lang}.gz", "wt") as f:
                f.write("".join(line + "\n" for line in text))
    (folder / "tatoeba-en-fr").mkdir()
    (folder / "tatoeba-en-fr" / "eng-fra.tsv").write_text("Run-time!\tCours !\tCC-BY\n")
    return folder


@pytest.mark.parametrize("split, differing", [(False, 0), (True, 5)])
def test_the_comparison_counts_the_lines_the_two_tokenise_differently(tmp_path, split, differing):
    port = tmp_path / "port" / "mosestokenizer"
    port.mkdir(parents=True)
    (port / "__init__.py").write_text(STAND_IN.replace("__SPLIT__", str(split)))
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            f"--port-python={sys.executable}",
            f"--data={corpora(tmp_path / 'data')}",
            "--repeats=1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(port.parent)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # 2 lines in each of 6 Multi30k files, 1 in each Tatoeba column; with the split, the
    # hyphenated words differ: train and test en ("well-known"), fr ("chien-loup"), Tatoeba en.
    assert f"all: 14 lines, {differing} tokenised differently" in done.stdout, done.stdout
