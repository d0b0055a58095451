"""`alignmt-translate ckpt=PATH [decoding=beam] < input > output`: translate lines.

One translation per input line, or with `nbest=K` (beam search) K lines per input in the
Moses n-best format `i ||| translation ||| score`, i counting input lines from 0. An empty
line gives an empty line (in n-best mode, one entry with an empty translation).
`attention_file=FILE` writes one JSON line per input line: the source tokens, the output
tokens and the attention weights [output][source], [EOS] included on both sides. A line
longer than the longest training sentences (the training config's `data.max_length`) is
still translated, with a warning on stderr naming it. `ckpt=[A,B,...]` translates with the
ensemble of several checkpoints (`alignmt.models.ensemble`).
"""

from __future__ import annotations

import json
import sys

import hydra
import numpy as np
from omegaconf import DictConfig

from alignmt.atomic import write_text
from alignmt.build import restore
from alignmt.config import CONF_DIR
from alignmt.console import quiet_known_noise
from alignmt.special_tokens import EOS
from alignmt.translator import Translation, Translator


def load_translator(cfg: DictConfig) -> tuple[Translator, int | None]:
    """The checkpoint's translator, and the longest sentence its training data kept."""
    restored = restore(cfg.ckpt, cfg.get("decoding"), cfg)
    return restored.translator, restored.config.data.get("max_length")


def warn_long_lines(lines: list[str], tokenizer, max_length: int | None) -> None:
    if max_length is None:
        return
    for number, line in enumerate(lines, start=1):
        length = len(tokenizer.tokenize(line))
        if length > max_length:
            print(
                f"alignmt-translate: warning: line {number} has {length} tokens, more than the "
                f"model was trained on (data.max_length={max_length}); translating it anyway",
                file=sys.stderr,
            )


def translate_all(
    translator: Translator, lines: list[str], batch_size: int
) -> list[list[Translation]]:
    """Every line's n-best list; an empty list for an empty line."""
    nonempty = [i for i, line in enumerate(lines) if line.strip()]
    results: list[list[Translation]] = [[] for _ in lines]
    if not nonempty:
        return results
    translated = translator.translate([lines[i] for i in nonempty], batch_size=batch_size)
    for i, nbest in zip(nonempty, translated, strict=True):
        results[i] = nbest
    return results


def moses_nbest(results: list[list[Translation]]) -> list[str]:
    return [
        f"{i} ||| {text} ||| {score:.4f}"
        for i, nbest in enumerate(results)
        for text, score in ([(t.text, t.score) for t in nbest] or [("", 0.0)])
    ]


def attention_record(nbest: list[Translation]) -> dict:
    """The best translation's attention, rows = output tokens, columns = source tokens."""
    if not nbest:
        return {"source": [], "output": [], "weights": []}
    best = nbest[0]
    weights = None
    if best.attention is not None:
        weights = np.round(best.attention.astype(np.float64), 5).tolist()
    return {"source": [*best.source_words, EOS], "output": best.target_labels, "weights": weights}


def translate_lines(cfg: DictConfig, lines: list[str]) -> list[str]:
    """The output lines for `lines` (and the attention file, if asked for)."""
    translator, max_length = load_translator(cfg)
    warn_long_lines(lines, translator.source_tokenizer, max_length)
    results = translate_all(translator, lines, cfg.batch_size)
    if cfg.attention_file:
        with open(cfg.attention_file, "w", encoding="utf-8") as dump:
            for nbest in results:
                dump.write(json.dumps(attention_record(nbest), ensure_ascii=False) + "\n")
    if cfg.nbest > 1:
        return moses_nbest(results)
    return [nbest[0].text if nbest else "" for nbest in results]


def read_lines(stream, name: str) -> list[str]:
    """Lines of a byte stream without their newline; a line that is not valid UTF-8 is
    translated with its undecodable bytes replaced, and a warning names it."""
    lines = []
    for number, raw in enumerate(stream, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            print(
                f"alignmt-translate: warning: {name} line {number} is not valid UTF-8 "
                f"({e.reason} at byte {e.start}); undecodable bytes replaced by U+FFFD",
                file=sys.stderr,
            )
            line = raw.decode("utf-8", errors="replace")
        lines.append(line.rstrip("\r\n"))
    return lines


@hydra.main(config_path=str(CONF_DIR), config_name="translate", version_base="1.3")
def main(cfg: DictConfig) -> None:
    quiet_known_noise()
    if cfg.input:
        with open(cfg.input, "rb") as source:
            lines = read_lines(source, cfg.input)
    else:
        lines = read_lines(sys.stdin.buffer, "standard input")
    text = "".join(o + "\n" for o in translate_lines(cfg, lines))
    if cfg.output:
        write_text(cfg.output, text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
