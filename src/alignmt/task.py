"""The LightningModule: loss, optimisation, decoding, metrics and the files of a run."""

from __future__ import annotations

import copy
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from alignmt.dashboards import has_dashboard, log_validation_samples
from alignmt.data.batching import Batch
from alignmt.data.vocab import EOS_ID, PAD_ID, UNK
from alignmt.decoding.greedy import GreedySearch
from alignmt.decoding.unk import UnkReplacer
from alignmt.evaluation.alignment import alignment_error_rate, hard_alignment, parse_pharaoh
from alignmt.evaluation.bleu import corpus_scores
from alignmt.evaluation.by_length import (
    bleu_by_length,
    bucket_metric_key,
    write_bleu_by_length_csv,
)
from alignmt.evaluation.exposure import exposure_curves
from alignmt.evaluation.source_coverage import source_coverage_errors
from alignmt.evaluation.unk import no_unk_mask
from alignmt.models.coverage import coverage_loss
from alignmt.models.seq2seq import Seq2Seq
from alignmt.plots import plot_attention, plot_bleu_by_length, plot_exposure
from alignmt.sampling import Schedule, TeacherForcing, scheduled_forward
from alignmt.translator import Translation, Translator

log = logging.getLogger(__name__)


@dataclass
class SentenceResult:
    """What evaluation keeps of one sentence until the corpus-level metrics are computed."""

    index: int  # position in the split
    translation: Translation  # the best one
    forced_attention: torch.Tensor | None = None  # teacher-forced, for alignment error
    no_unk: Translation | None = None  # decoded with [UNK] forbidden, if in the No-UNK subset
    exposure: tuple | None = None  # (reference, teacher-forced argmax, own output) ids


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
        by_length = sorted(outputs, key=lambda o: len(text.sources[o.index].split()))
        k = min(self.dashboard_samples, len(outputs))
        chosen = [by_length[int((q + 0.5) / k * len(outputs))] for q in range(k)]
        rows, images = [], []
        for o in chosen:
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
        hypotheses = [o.translation.text for o in outputs]
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
        no_unk = [o for o in outputs if o.no_unk is not None]
        if no_unk:
            no_unk_references = [text.targets[o.index] for o in no_unk]
            scores_no_unk = corpus_scores([o.no_unk.text for o in no_unk], no_unk_references)
            metrics["test/bleu_no_unk"] = scores_no_unk["bleu"]
        exposure = exposure_curves(*zip(*(o.exposure for o in outputs), strict=True))
        for name, value in exposure.summary().items():
            metrics[f"test/exposure/{name}"] = value
        decoded_attention = [o.translation.attention for o in outputs]
        if decoded_attention[0] is not None:  # source words the output skipped or repeated
            counts = source_coverage_errors(a[:-1, :-1].numpy() for a in decoded_attention)
            metrics.update({f"test/{name}": value for name, value in counts.items()})
        if self._decode_seconds > 0:  # this rank's decoding time (all ranks decode at once)
            output_tokens = sum(len(o.translation.tokens) for o in outputs)
            metrics["test/decode_sentences_per_sec"] = len(outputs) / self._decode_seconds
            metrics["test/decode_tokens_per_sec"] = output_tokens / self._decode_seconds
        if text.alignments is not None and outputs[0].forced_attention is not None:
            gold = [parse_pharaoh(a) for a in text.alignments]
            for method in ("argmax", "threshold"):
                predicted = [hard_alignment(o.forced_attention.numpy(), method) for o in outputs]
                key = "test/aer" if method == "argmax" else f"test/aer_{method}"
                metrics[key] = alignment_error_rate(predicted, gold)
        self.log_dict(metrics, sync_dist=True)
        self.test_metrics = {
            **metrics,
            "bleu_signature": scores["bleu_signature"],
            "chrf_signature": scores["chrf_signature"],
            "test_sentences": len(hypotheses),
            "no_unk_sentences": len(no_unk),
            "global_step": self.global_step,
        }
        if self.out_dir is not None and self.trainer.is_global_zero:
            self._write_results(outputs, rows, source_lengths, exposure)
        self._outputs = []

    def _write_results(self, outputs, rows, source_lengths, exposure) -> None:
        out = self.out_dir
        out.mkdir(parents=True, exist_ok=True)
        (out / "hypotheses.txt").write_text("".join(o.translation.text + "\n" for o in outputs))
        write_bleu_by_length_csv(rows, out / "bleu_by_length.csv")
        plot_bleu_by_length({"test": rows}, out / "bleu_by_length.png")
        exposure.write_csv(out / "exposure.csv")
        plot_exposure(exposure, out / "exposure.png")
        by_length = sorted(range(len(outputs)), key=lambda i: source_lengths[i])
        k = min(self.heatmaps, len(outputs))
        chosen = {by_length[int((q + 0.5) / k * len(outputs))] for q in range(k)}
        for i in self.heatmap_sentences:
            if 0 <= i < len(outputs):
                chosen.add(i)
            else:
                log.warning("no heatmap for test sentence %d: the test set has %d", i, len(outputs))
        for i in sorted(chosen):
            t = outputs[i].translation
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
