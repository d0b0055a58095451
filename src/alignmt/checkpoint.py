"""Rebuild a trained model, its vocabularies and its data pipeline from one checkpoint file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from alignmt.config import instantiate
from alignmt.data.datamodule import TranslationDataModule
from alignmt.data.vocab import Vocabulary
from alignmt.models.seq2seq import Seq2Seq


@dataclass
class Restored:
    config: DictConfig  # the resolved training config stored in the checkpoint
    model: Seq2Seq
    datamodule: TranslationDataModule  # vocabularies set; splits load on `setup`


def load_checkpoint(path: str | Path, map_location: str = "cpu") -> Restored:
    """Checkpoints hold only plain values, so they load with `weights_only=True`."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    ckpt = torch.load(path, map_location=map_location, weights_only=True)
    try:
        config = OmegaConf.create(ckpt["hyper_parameters"]["config"])
        vocabularies = ckpt["vocabularies"]
    except KeyError as e:
        raise ValueError(f"{path} is not an alignmt checkpoint (no {e} entry)") from None
    datamodule = instantiate(config.data, seed=config.seed)
    source, target = Vocabulary(vocabularies["source"]), Vocabulary(vocabularies["target"])
    datamodule.set_vocabularies(source, target)
    datamodule.load_tokenizer_state(ckpt.get("tokenizers", {}))
    model = instantiate(config.model, src_vocab_size=len(source), tgt_vocab_size=len(target))
    prefix = "model."
    model.load_state_dict(
        {k[len(prefix) :]: v for k, v in ckpt["state_dict"].items() if k.startswith(prefix)}
    )
    model.eval()
    return Restored(config, model, datamodule)
