"""The LightningModule: loss, optimisation, decoding, metrics and the files of a run."""

from __future__ import annotations

import copy
import logging
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from alignmt.dashboards import has_dashboard, log_validation_samples
from alignmt.data.batching import Batch
from alignmt.decoding.greedy import GreedySearch
from alignmt.decoding.unk import UnkReplacer
from alignmt.evaluation.bleu import corpus_scores
from alignmt.evaluation.results import (
    SentenceResult,
    spread_by_length,
    test_results,
    write_test_files,
)
from alignmt.evaluation.unk import no_unk_mask
from alignmt.loss import token_cross_entropy
from alignmt.models.coverage import coverage_loss
from alignmt.models.seq2seq import Seq2Seq
from alignmt.plots import plot_attention
from alignmt.sampling import Schedule, TeacherForcing, scheduled_forward
from alignmt.special_tokens import EOS_ID, PAD_ID, UNK
from alignmt.translator import Translator

log = logging.getLogger(__name__)


class TranslationTask(pl.LightningModule):
    """Trains a `Seq2Seq` model with token-level NLL and scores it with sacrebleu.

    Validation decodes the validation split (greedy by default) for `val/bleu`, on which the
    best checkpoint is chosen. Test also writes the run's result files to `out_dir`:
    metrics.json, hypotheses.txt, bleu_by_length.{csv,png} and attention heatmaps; its
    metrics include BLEU on the paper's "No UNK" subset and decoding speed.
    Under DDP, hypotheses are gathered from every rank before corpus BLEU is computed.
    """

    def __init__(
        self,
        model: Seq2Seq,
        optimizer: Callable[..., torch.optim.Optimizer],
        search,
        lr_scheduler: Callable | None = None,
        lr_scheduler_interval: str = "epoch",
        lr_scheduler_monitor: str = "val/bleu",
        label_smoothing: float = 0.0,
        sampling: Schedule | None = None,
        coverage_loss_weight: float = 0.0,
        heatmaps: int = 4,
        dashboard_samples: int = 4,
        heatmap_sentences: Sequence[int] = (),
        unk_replace: bool = False,
        unk_dictionary: str | None = None,
        out_dir: str | None = None,
        run_config: dict | None = None,
    ):
        super().__init__()
        # Only plain values go into checkpoints (torch.load with weights_only=True).
        self.save_hyperparameters({"config": run_config or {}})
        self.model = model
        self.optimizer_factory = optimizer
        self.scheduler_factory = lr_scheduler
        self.scheduler_interval = lr_scheduler_interval
        self.scheduler_monitor = lr_scheduler_monitor
        self.search = search
        self.label_smoothing = label_smoothing
        self.sampling = sampling or TeacherForcing()
        self.coverage_loss_weight = coverage_loss_weight
        self.heatmaps = heatmaps
        self.dashboard_samples = dashboard_samples
        self.heatmap_sentences = list(heatmap_sentences)
        self.unk_replacer = UnkReplacer.from_file(unk_dictionary) if unk_replace else None
        self.out_dir = Path(out_dir) if out_dir else None
        self.translator: Translator | None = None
        self.test_metrics: dict = {}
        self._outputs: list = []
        self._nll = self._tokens = self._decode_seconds = 0.0
        self.train_tokens, self.train_seconds = 0, 0.0  # for train/tokens_per_sec
        self._interval: tuple[int, float] = (0, 0.0)
        self._step_started = 0.0

    # ---------------------------------------------------------------- set-up
    def setup(self, stage: str) -> None:
        dm = self.trainer.datamodule
        self.translator = Translator(
            self.model,
            self.search,
            dm.source_vocab,
            dm.target_vocab,
            dm.source_tokenizer,
            dm.target_tokenizer,
            unk_replacer=self.unk_replacer,
        )

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        dm = self.trainer.datamodule
        checkpoint["vocabularies"] = {
            "source": dm.source_vocab.itos,
            "target": dm.target_vocab.itos,
        }
        checkpoint["tokenizers"] = dm.tokenizer_state()  # learnt ones (SentencePiece), as bytes

    def configure_optimizers(self):
        optimizer = self.optimizer_factory(self.parameters())
        if self.scheduler_factory is None:
            return optimizer
        scheduler = {
            "scheduler": self.scheduler_factory(optimizer),
            "interval": self.scheduler_interval,
            "monitor": self.scheduler_monitor,
        }
        return {"optimizer": optimizer, "lr_scheduler": scheduler}

    # -------------------------------------------------------------- training
    def _nll_sum(self, logits: torch.Tensor, batch: Batch) -> torch.Tensor:
        return F.cross_entropy(
            logits.flatten(0, 1).float(),
            batch.tgt_out.flatten(),
            ignore_index=PAD_ID,
            reduction="sum",
        )

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        ratio = self.sampling.ratio(self.global_step)
        if ratio < 1.0:  # scheduled sampling: step by step, feeding some of its own tokens
            out = scheduled_forward(
                self.model, batch.src, batch.src_lengths, batch.tgt_in, ratio, self.sampling.mode
            )
        else:
            out = self.model(batch.src, batch.src_lengths, batch.tgt_in)
        loss = token_cross_entropy(
            out.logits.flatten(0, 1).float(),
            batch.tgt_out.flatten(),
            ignore_index=PAD_ID,
            label_smoothing=self.label_smoothing,
        )
        if self.coverage_loss_weight:
            overlap = coverage_loss(out.attention, batch.tgt_out != PAD_ID)
            self.log("train/coverage_loss", overlap, batch_size=len(batch))
            loss = loss + self.coverage_loss_weight * overlap
        self.log("train/teacher_forcing_ratio", ratio, batch_size=len(batch))
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"training loss is {loss.item()} at step {self.global_step}: lower optim.lr, "
                "set trainer.gradient_clip_val, or check the data for degenerate pairs"
            )
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch))
        return loss

    def on_train_batch_start(self, batch: Batch, batch_idx: int) -> None:
        self._step_started = time.perf_counter()

    def on_train_batch_end(self, outputs, batch: Batch, batch_idx: int) -> None:
        """Training throughput: target tokens over the time of the training steps themselves
        (forward, backward, optimiser; not validation), per logging interval and overall."""
        seconds = time.perf_counter() - self._step_started
        tokens = batch.num_target_tokens
        self.train_tokens += tokens
        self.train_seconds += seconds
        self._interval = (self._interval[0] + tokens, self._interval[1] + seconds)
        if (self.global_step % self.trainer.log_every_n_steps == 0) and self._interval[1] > 0:
            self.log("train/tokens_per_sec", self._interval[0] / self._interval[1])
            self._interval = (0, 0.0)

    # ------------------------------------------------------------ evaluation
    def _eval_step(self, batch: Batch) -> None:
        out = self.model(batch.src, batch.src_lengths, batch.tgt_in)
        self._nll += float(self._nll_sum(out.logits, batch))
        self._tokens += batch.num_target_tokens
        words = self._source_words(batch) if self.unk_replacer is not None else None
        start = time.perf_counter()
        translations = self.translator.decode_batch(batch, words)
        self._decode_seconds += time.perf_counter() - start
        testing = self.trainer.testing
        no_unk = self._decode_no_unk(batch, words, translations) if testing else {}
        ref_lengths = (batch.tgt_out != PAD_ID).sum(1).tolist()
        src_lengths = batch.src_lengths.tolist()
        predicted = out.logits.argmax(-1).tolist() if testing else None
        references = batch.tgt_out.tolist()
        vocab = self.translator.target_vocab
        for b, index in enumerate(batch.indices.tolist()):
            best = translations[b][0]
            result = SentenceResult(index, best, no_unk=no_unk.get(b))
            if out.attention is not None:  # teacher-forced attention: for alignment error
                result.forced_attention = out.attention[
                    b, : ref_lengths[b] - 1, : src_lengths[b] - 1
                ].cpu()
            if testing:  # the exposure-bias probe: gold prefixes against the model's own
                n = ref_lengths[b]
                result.exposure = (
                    references[b][:n],
                    predicted[b][:n],
                    [*vocab.encode(best.tokens), EOS_ID],
                )
            self._outputs.append(result)

    def _source_words(self, batch: Batch) -> list[list[str]]:
        """Each source sentence as the tokeniser gives it: [UNK] replacement copies from it."""
        dm = self.trainer.datamodule
        sources = dm.text["test" if self.trainer.testing else "valid"].sources
        return [dm.source_tokenizer.tokenize(sources[i]) for i in batch.indices.tolist()]

    def _decode_no_unk(self, batch: Batch, words, translations) -> dict:
        """The paper's "No UNK" column: sentences with no unknown word in source or reference,
        decoded with [UNK] forbidden. Returns their best translations by position in the batch."""
        subset = no_unk_mask(batch.src, batch.tgt_out).nonzero().squeeze(1).tolist()
        if self.search.forbid_unk:  # the translations already are those
            return {b: translations[b][0] for b in subset}
        reused = {}
        if isinstance(self.search, GreedySearch) and self.unk_replacer is None:
            # Greedy output without [UNK] is what greedy search with [UNK] forbidden gives too.
            reused = {b: translations[b][0] for b in subset if UNK not in translations[b][0].tokens}
            subset = [b for b in subset if b not in reused]
        if not subset:
            return reused
        search = copy.copy(self.search)
        search.forbid_unk = True
        index = torch.tensor(subset)
        src_lengths, tgt_in, tgt_out, indices = (
            t[index.to(t.device)]
            for t in (batch.src_lengths, batch.tgt_in, batch.tgt_out, batch.indices)
        )
        src = batch.src[index.to(batch.src.device), : int(src_lengths.max())]
        sub = Batch(src, src_lengths, tgt_in, tgt_out, indices)
        decoded = self.translator.with_search(search).decode_batch(
            sub, None if words is None else [words[b] for b in subset]
        )
        return {**reused, **{b: nbest[0] for b, nbest in zip(subset, decoded, strict=True)}}

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._eval_step(batch)

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._eval_step(batch)

    def on_validation_epoch_start(self) -> None:
        self._reset()

    def on_test_epoch_start(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._outputs, self._nll, self._tokens, self._decode_seconds = [], 0.0, 0.0, 0.0

    def _gathered(self) -> tuple[list, float, float]:
        outputs, nll, tokens = self._outputs, self._nll, self._tokens
        if self.trainer.world_size > 1:
            every = [None] * self.trainer.world_size
            torch.distributed.all_gather_object(every, (outputs, nll, tokens))
            outputs = [o for rank in every for o in rank[0]]
            nll, tokens = sum(r[1] for r in every), sum(r[2] for r in every)
        outputs.sort(key=lambda o: o.index)
        return outputs, nll, tokens

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking:
            return
        outputs, nll, tokens = self._gathered()
        text = self.trainer.datamodule.text["valid"]
        scores = corpus_scores([o.translation.text for o in outputs], text.targets)
        self.log_dict(
            {
                "val/loss": nll / tokens,
                "val/ppl": math.exp(min(nll / tokens, 100)),
                "val/bleu": scores["bleu"],
            },
            prog_bar=True,
            sync_dist=True,  # every rank holds the same gathered value; this only says so
        )
        if self.dashboard_samples and self.trainer.is_global_zero and has_dashboard(self.loggers):
            self._log_samples(outputs, text)
        self._outputs = []

    def _log_samples(self, outputs: list[SentenceResult], text) -> None:
        """A few validation sentences of increasing length, with their heatmaps."""
        lengths = [len(text.sources[o.index].split()) for o in outputs]
        rows, images = [], []
        for o in (outputs[i] for i in spread_by_length(lengths, self.dashboard_samples)):
            rows.append([text.sources[o.index], text.targets[o.index], o.translation.text])
            if o.translation.attention is not None and self.out_dir is not None:
                name = f"step{self.global_step:06d}_{o.index:05d}.png"
                path = self.out_dir / "attention" / "validation" / name
                images.append(
                    plot_attention(
                        o.translation.attention.numpy(),
                        o.translation.source_labels,
                        o.translation.target_labels,
                        path,
                        title=f"validation sentence {o.index}, step {self.global_step}",
                    )
                )
        log_validation_samples(self.loggers, self.global_step, rows, images)

    def on_test_epoch_end(self) -> None:
        outputs, nll, tokens = self._gathered()
        text = self.trainer.datamodule.text["test"]
        results = test_results(outputs, text, nll, tokens, self._decode_seconds)
        self.log_dict(results.metrics, sync_dist=True)
        self.test_metrics = {
            **results.metrics,
            **results.details,
            "global_step": self.global_step,
        }
        if self.out_dir is not None and self.trainer.is_global_zero:
            write_test_files(
                self.out_dir,
                outputs,
                text,
                results,
                self.test_metrics,
                self.heatmaps,
                self.heatmap_sentences,
            )
        self._outputs = []
