"""The LightningModule: loss, optimisation, decoding, metrics and the files of a run."""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path

import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from alignmt.data.batching import Batch
from alignmt.data.vocab import PAD_ID
from alignmt.evaluation.alignment import alignment_error_rate, hard_alignment, parse_pharaoh
from alignmt.evaluation.bleu import corpus_scores
from alignmt.evaluation.by_length import (
    bleu_by_length,
    bucket_metric_key,
    write_bleu_by_length_csv,
)
from alignmt.models.coverage import coverage_loss
from alignmt.models.seq2seq import Seq2Seq
from alignmt.plots import plot_attention, plot_bleu_by_length
from alignmt.sampling import Schedule, TeacherForcing, scheduled_forward
from alignmt.translator import Translator

log = logging.getLogger(__name__)


class TranslationTask(pl.LightningModule):
    """Trains a `Seq2Seq` model with token-level NLL and scores it with sacrebleu.

    Validation decodes the validation split (greedy by default) for `val/bleu`, on which the
    best checkpoint is chosen. Test also writes the run's result files to `out_dir`:
    metrics.json, hypotheses.txt, bleu_by_length.{csv,png} and attention heatmaps.
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
        self.out_dir = Path(out_dir) if out_dir else None
        self.translator: Translator | None = None
        self.test_metrics: dict = {}
        self._outputs: list = []
        self._nll = self._tokens = 0.0
        self._clock: tuple[float, int] | None = None

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
        )

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        dm = self.trainer.datamodule
        checkpoint["vocabularies"] = {
            "source": dm.source_vocab.itos,
            "target": dm.target_vocab.itos,
        }

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
        tokens = batch.num_target_tokens
        loss = F.cross_entropy(
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
        self._count_tokens(tokens)
        return loss

    def _count_tokens(self, tokens: int) -> None:
        """Logs training target tokens/s over each logging interval."""
        now = time.perf_counter()
        if self._clock is None:
            self._clock = (now, 0)
            return
        start, counted = self._clock
        counted += tokens
        self._clock = (start, counted)
        if (self.global_step + 1) % self.trainer.log_every_n_steps == 0 and now > start:
            self.log("train/tokens_per_sec", counted / (now - start))
            self._clock = (now, 0)

    # ------------------------------------------------------------ evaluation
    def _eval_step(self, batch: Batch) -> None:
        out = self.model(batch.src, batch.src_lengths, batch.tgt_in)
        self._nll += float(self._nll_sum(out.logits, batch))
        self._tokens += batch.num_target_tokens
        translations = self.translator.decode_batch(batch)
        ref_lengths = (batch.tgt_out != PAD_ID).sum(1).tolist()
        src_lengths = batch.src_lengths.tolist()
        for b, index in enumerate(batch.indices.tolist()):
            forced = None
            if out.attention is not None:  # teacher-forced attention: for alignment error
                forced = out.attention[b, : ref_lengths[b] - 1, : src_lengths[b] - 1].cpu()
            self._outputs.append((index, translations[b][0], forced))

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._eval_step(batch)

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._eval_step(batch)

    def on_validation_epoch_start(self) -> None:
        self._reset()

    def on_test_epoch_start(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._outputs, self._nll, self._tokens = [], 0.0, 0.0

    def _gathered(self) -> tuple[list, float, float]:
        outputs, nll, tokens = self._outputs, self._nll, self._tokens
        if self.trainer.world_size > 1:
            every = [None] * self.trainer.world_size
            torch.distributed.all_gather_object(every, (outputs, nll, tokens))
            outputs = [o for rank in every for o in rank[0]]
            nll, tokens = sum(r[1] for r in every), sum(r[2] for r in every)
        outputs.sort(key=lambda o: o[0])
        return outputs, nll, tokens

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking:
            return
        outputs, nll, tokens = self._gathered()
        text = self.trainer.datamodule.text["valid"]
        scores = corpus_scores([o[1].text for o in outputs], text.targets)
        self.log_dict(
            {
                "val/loss": nll / tokens,
                "val/ppl": math.exp(min(nll / tokens, 100)),
                "val/bleu": scores["bleu"],
            },
            prog_bar=True,
        )
        self._outputs = []

    def on_test_epoch_end(self) -> None:
        outputs, nll, tokens = self._gathered()
        text = self.trainer.datamodule.text["test"]
        hypotheses = [o[1].text for o in outputs]
        if len(hypotheses) != len(text):
            raise RuntimeError(f"decoded {len(hypotheses)} of {len(text)} test sentences")
        scores = corpus_scores(hypotheses, text.targets)
        source_lengths = [len(s.split()) for s in text.sources]
        rows = bleu_by_length(hypotheses, text.targets, source_lengths)
        metrics = {
            "test/bleu": scores["bleu"],
            "test/chrf": scores["chrf"],
            "test/loss": nll / tokens,
            "test/ppl": math.exp(min(nll / tokens, 100)),
        }
        for row in rows:
            if row["bleu"] is not None:
                metrics[f"test/{bucket_metric_key(row['lo'], row['hi'])}"] = row["bleu"]
        if text.alignments is not None and outputs[0][2] is not None:
            gold = [parse_pharaoh(a) for a in text.alignments]
            for method in ("argmax", "threshold"):
                predicted = [hard_alignment(o[2].numpy(), method) for o in outputs]
                key = "test/aer" if method == "argmax" else f"test/aer_{method}"
                metrics[key] = alignment_error_rate(predicted, gold)
        self.log_dict(metrics)
        self.test_metrics = {
            **metrics,
            "bleu_signature": scores["bleu_signature"],
            "chrf_signature": scores["chrf_signature"],
            "test_sentences": len(hypotheses),
            "global_step": self.global_step,
        }
        if self.out_dir is not None and self.trainer.is_global_zero:
            self._write_results(outputs, rows, source_lengths)
        self._outputs = []

    def _write_results(self, outputs, rows, source_lengths) -> None:
        out = self.out_dir
        out.mkdir(parents=True, exist_ok=True)
        (out / "hypotheses.txt").write_text("".join(o[1].text + "\n" for o in outputs))
        write_bleu_by_length_csv(rows, out / "bleu_by_length.csv")
        plot_bleu_by_length({"test": rows}, out / "bleu_by_length.png")
        by_length = sorted(range(len(outputs)), key=lambda i: source_lengths[i])
        k = min(self.heatmaps, len(outputs))
        for q in range(k):
            i = by_length[int((q + 0.5) / k * len(outputs))]
            t = outputs[i][1]
            if t.attention is not None:
                plot_attention(
                    t.attention.numpy(),
                    t.source_labels,
                    t.target_labels,
                    out / "attention" / f"test_{i:05d}.png",
                    title=f"test sentence {i}",
                )
        metrics_file = out / "metrics.json"
        previous = json.loads(metrics_file.read_text()) if metrics_file.exists() else {}
        metrics_file.write_text(json.dumps({**previous, **self.test_metrics}, indent=2) + "\n")
