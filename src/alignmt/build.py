"""The one wiring: a config (or a checkpoint) into data module, model, translator and task.

Entry points, benchmarks and tests all build through `build` and `restore`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
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
from alignmt.models.ensemble import Ensemble
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
    """A trained model (or an ensemble of several) from checkpoints, ready to evaluate or
    translate."""

    config: DictConfig  # the resolved training config stored in the (first) checkpoint
    datamodule: TranslationDataModule  # vocabularies and tokenisers set; splits load on `setup`
    model: Seq2Seq | Ensemble  # an Ensemble when several checkpoints were given
    translator: Translator
    checkpoints: list[str] = field(default_factory=list)  # the files, in the order given


@dataclass
class _Member:
    path: str
    config: DictConfig
    datamodule: TranslationDataModule
    model: Seq2Seq


def build(cfg: DictConfig) -> Built:
    """Seeds, prepares the data (vocabularies fix the model's sizes), builds the rest."""
    pl.seed_everything(cfg.seed, workers=True)
    datamodule = instantiate(cfg.data, seed=cfg.seed)
    initial = None
    if cfg.get("init_from"):
        initial = read_checkpoint(cfg.init_from)
        set_checkpoint_vocabularies(datamodule, initial)
    datamodule.prepare_data()
    datamodule.setup("fit")
    model = build_model(cfg.model, datamodule)
    if initial is not None:
        load_model_weights(model, initial, f"init_from={cfg.init_from}")
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


def checkpoint_paths(ckpt: str | Path | Sequence[str | Path]) -> list[str]:
    """`ckpt=PATH`, or `ckpt=[A,B,...]` for an ensemble, as a list of paths."""
    paths = [ckpt] if isinstance(ckpt, str | Path) else list(ckpt)
    if not paths:
        raise ValueError("ckpt: no checkpoint given")
    return [str(p) for p in paths]


def restore(
    ckpt: str | Path | Sequence[str | Path],
    decoding: DictConfig | None = None,
    options: DictConfig | None = None,
) -> Restored:
    """The checkpoint's model, data module and translator; several checkpoints decode as one
    `Ensemble` (they must share vocabularies and tokenisers; the first one's data and
    decoding settings are used). `decoding` replaces the search it was trained with;
    `options` holds `unk_replace`, `unk_dictionary` (and, for translation, `nbest`), as in
    conf/evaluate.yaml and conf/translate.yaml."""
    paths = checkpoint_paths(ckpt)
    members = [_restore_member(path) for path in paths]
    first = members[0]
    for other in members[1:]:
        check_same_vocabularies(first, other)
    model = first.model if len(members) == 1 else Ensemble([m.model for m in members])
    decoding = decoding or first.config.decoding
    translator = build_translator(options or first.config, model, decoding, first.datamodule)
    return Restored(first.config, first.datamodule, model, translator, paths)


def _restore_member(path: str) -> _Member:
    checkpoint = read_checkpoint(path)
    config = OmegaConf.create(checkpoint["hyper_parameters"]["config"])
    datamodule = instantiate(config.data, seed=config.seed)
    set_checkpoint_vocabularies(datamodule, checkpoint)
    model = build_model(config.model, datamodule)
    load_model_weights(model, checkpoint, str(path))
    model.eval()
    return _Member(path, config, datamodule, model)


def read_checkpoint(path: str | Path) -> dict:
    """An alignmt checkpoint's contents (read with `weights_only=True`)."""
    checkpoint = load_checkpoint_file(path)
    for key in ("hyper_parameters", "vocabularies", "state_dict"):
        if key not in checkpoint:
            raise ValueError(f"{path} is not an alignmt checkpoint (no {key!r} entry)")
    return checkpoint


def set_checkpoint_vocabularies(datamodule: TranslationDataModule, checkpoint: dict) -> None:
    """The checkpoint's vocabularies and learnt tokenisers, in place of fitting them."""
    vocabularies = checkpoint["vocabularies"]
    datamodule.set_vocabularies(
        Vocabulary(vocabularies["source"]), Vocabulary(vocabularies["target"])
    )
    datamodule.load_tokenizer_state(checkpoint.get("tokenizers", {}))


def load_model_weights(model: Seq2Seq, checkpoint: dict, origin: str) -> None:
    """The checkpoint's model weights (its task's `model.` entries); `origin` names where the
    checkpoint comes from in an error."""
    prefix = "model."
    state = checkpoint["state_dict"]
    weights = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
    try:
        model.load_state_dict(weights)
    except RuntimeError as e:
        raise ValueError(
            f"{origin}: its weights do not fit the model this config builds; the model "
            f"settings must be the checkpoint's ({e})"
        ) from None


def check_same_vocabularies(first: _Member, other: _Member) -> None:
    """Ensemble members read and write the same ids: same vocabularies, same tokenisers."""
    a, b = first.datamodule, other.datamodule
    for what, mine, theirs in (
        ("source vocabularies", a.source_vocab.fingerprint, b.source_vocab.fingerprint),
        ("target vocabularies", a.target_vocab.fingerprint, b.target_vocab.fingerprint),
        ("source tokenisers", a.source_tokenizer.fingerprint, b.source_tokenizer.fingerprint),
        ("target tokenisers", a.target_tokenizer.fingerprint, b.target_tokenizer.fingerprint),
    ):
        if mine != theirs:
            raise ValueError(
                f"cannot ensemble {first.path} and {other.path}: their {what} differ "
                f"({mine} vs {theirs}); members must be trained on the same data settings"
            )


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
