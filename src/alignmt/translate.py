"""`alignmt-translate ckpt=PATH < input > output`: one translation per input line."""

from __future__ import annotations

import logging
import sys

import hydra
from omegaconf import DictConfig

from alignmt.checkpoint import load_checkpoint
from alignmt.config import CONF_DIR, instantiate
from alignmt.runtime import keep_freed_memory
from alignmt.translator import Translator

log = logging.getLogger(__name__)


def translate_lines(cfg: DictConfig, lines: list[str]) -> list[str]:
    restored = load_checkpoint(cfg.ckpt)
    dm = restored.datamodule
    search = instantiate(cfg.decoding if cfg.get("decoding") else restored.config.decoding)
    translator = Translator(
        restored.model,
        search,
        dm.source_vocab,
        dm.target_vocab,
        dm.source_tokenizer,
        dm.target_tokenizer,
    )
    nonempty = [i for i, line in enumerate(lines) if line.strip()]
    outputs = [""] * len(lines)  # an empty line translates to an empty line
    results = translator.translate([lines[i] for i in nonempty], batch_size=cfg.batch_size)
    for i, nbest in zip(nonempty, results, strict=True):
        outputs[i] = nbest[0].text
    return outputs


@hydra.main(config_path=str(CONF_DIR), config_name="translate", version_base="1.3")
def main(cfg: DictConfig) -> None:
    keep_freed_memory()
    if cfg.input:
        with open(cfg.input, encoding="utf-8") as source:
            lines = [line.rstrip("\r\n") for line in source]
    else:
        lines = [line.rstrip("\r\n") for line in sys.stdin]
    text = "".join(o + "\n" for o in translate_lines(cfg, lines))
    if cfg.output:
        with open(cfg.output, "w", encoding="utf-8") as target:
            target.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
