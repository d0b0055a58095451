"""The one wiring: a config (or a checkpoint) into data module, model, translator and task.

Entry points, benchmarks and tests all build through `build` and `restore`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytorch_lightning as pl
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.loggers import Logger

from alignmt.atomic import AtomicCheckpointIO
from alignmt.checkpoint import load_checkpoint_file
from alignmt.config import instantiate
from alignmt.data.datamodule import TranslationDataModule
from alignmt.data.vocab import Vocabulary
from alignmt.decoding.unk import UnkReplacer
from alignmt.evaluation.evaluator import Evaluator
from alignmt.models.compiled import fast_path
from alignmt.models.seq2seq import Seq2Seq
from alignmt.task import TranslationTask
from alignmt.translator import Translator


@dataclass
class Built:
    """Everything a training run needs; `trainer()` makes its Lightning trainer."""

    cfg: DictConfig
    datamodule: TranslationDataModule
    model: Seq2Seq
    translator: Translator
    task: TranslationTask

    def trainer(self, **overrides) -> pl.Trainer:
        """The configured trainer with the configured loggers and callbacks (`overrides`
        replace any of its arguments)."""
        arguments = {
            "logger": build_loggers(self.cfg),
            "callbacks": build_callbacks(self.cfg),
            "plugins": [AtomicCheckpointIO()],
            **overrides,
        }
        return instantiate(self.cfg.trainer, **arguments)


@dataclass
class Restored:
    """A trained model from its checkpoint, ready to evaluate or translate."""

    config: DictConfig  # the resolved training config stored in the checkpoint
    datamodule: TranslationDataModule  # vocabularies and tokenisers set; splits load on `setup`
    model: Seq2Seq
    translator: Translator


def build(cfg: DictConfig) -> Built:
    """Seeds, prepares the data (vocabularies fix the model's sizes), builds the rest."""
    pl.seed_everything(cfg.seed, workers=True)
    datamodule = instantiate(cfg.data, seed=cfg.seed)
    datamodule.prepare_data()
    datamodule.setup("fit")
    model = build_model(cfg.model, datamodule)
    model.fast_path = fast_path(model.decoder, cfg.get("fast_path"))
    translator = build_translator(cfg, model, cfg.decoding, datamodule)
    make_task = instantiate(cfg.task, _partial_=True)
    task = make_task(
        model=model,
        optimizer=instantiate(cfg.optim),
        evaluator=evaluator(translator, datamodule),
        objective=instantiate(cfg.objective),
        sampling=instantiate(cfg.sampling),
        run_config=OmegaConf.to_container(cfg, resolve=True),
    )
    return Built(cfg, datamodule, model, translator, task)


def restore(
    path: str | Path, decoding: DictConfig | None = None, options: DictConfig | None = None
) -> Restored:
    """The checkpoint's model, data module and translator. `decoding` replaces the search it
    was trained with; `options` holds `unk_replace`, `unk_dictionary` (and, for translation,
    `nbest`), as in conf/evaluate.yaml and conf/translate.yaml."""
    checkpoint = load_checkpoint_file(path)
    try:
        config = OmegaConf.create(checkpoint["hyper_parameters"]["config"])
        vocabularies = checkpoint["vocabularies"]
    except KeyError as e:
        raise ValueError(f"{path} is not an alignmt checkpoint (no {e} entry)") from None
    datamodule = instantiate(config.data, seed=config.seed)
    datamodule.set_vocabularies(
        Vocabulary(vocabularies["source"]), Vocabulary(vocabularies["target"])
    )
    datamodule.load_tokenizer_state(checkpoint.get("tokenizers", {}))
    model = build_model(config.model, datamodule)
    prefix = "model."
    state = checkpoint["state_dict"]
    model.load_state_dict({k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)})
    model.eval()
    translator = build_translator(options or config, model, decoding or config.decoding, datamodule)
    return Restored(config, datamodule, model, translator)


def evaluator(translator: Translator, datamodule: TranslationDataModule) -> Evaluator:
    return Evaluator(translator, datamodule.text, datamodule.oracle, datamodule.alignment_unit)


def build_model(node: DictConfig, datamodule: TranslationDataModule) -> Seq2Seq:
    return instantiate(
        node,
        src_vocab_size=len(datamodule.source_vocab),
        tgt_vocab_size=len(datamodule.target_vocab),
    )


def build_translator(
    options: DictConfig, model: Seq2Seq, decoding: DictConfig, datamodule: TranslationDataModule
) -> Translator:
    """`options.unk_replace` / `unk_dictionary` choose [UNK] replacement; `options.nbest` > 1
    asks the search for n-best lists."""
    nbest = options.get("nbest") or 1
    if nbest > 1 and "nbest" not in decoding:
        raise ValueError(
            f"nbest={nbest} needs a search that keeps several hypotheses: "
            f"decoding=beam decoding.beam_size={max(nbest, 5)}"
        )
    search = instantiate(decoding, **({"nbest": nbest} if nbest > 1 else {}))
    replacer = None
    if options.get("unk_replace"):
        replacer = UnkReplacer.from_file(options.get("unk_dictionary"))
    return Translator(
        model,
        search,
        datamodule.source_vocab,
        datamodule.target_vocab,
        datamodule.source_tokenizer,
        datamodule.target_tokenizer,
        unk_replacer=replacer,
    )


def build_loggers(cfg: DictConfig) -> list[Logger]:
    """One logger per entry of the `logger` group (`logger=csv`, `logger=[csv,wandb]`)."""
    return [instantiate(node) for node in (cfg.get("logger") or {}).values()]


def build_callbacks(cfg: DictConfig) -> list[Callback]:
    """Every entry of the `callbacks` group that is not null. The progress bar follows
    `trainer.enable_progress_bar`; the learning-rate monitor needs a logger."""
    skip = set()
    if not cfg.trainer.get("enable_progress_bar", True):
        skip.add("progress_bar")
    if not cfg.get("logger"):
        skip.add("learning_rate")
    nodes = (cfg.get("callbacks") or {}).items()
    return [instantiate(node) for name, node in nodes if node is not None and name not in skip]


def finish_loggers() -> None:
    """Always close wandb runs, also after an error, so runs of a multirun never share one."""
    if "wandb" in sys.modules:
        import wandb

        if wandb.run is not None:
            wandb.finish()
