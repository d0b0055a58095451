"""Decoding a split into per-sentence results, and those into corpus metrics: what validation,
test and `alignmt-evaluate` share."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F

from alignmt.data.batching import Batch
from alignmt.data.corpus import ParallelText
from alignmt.evaluation.bleu import corpus_scores
from alignmt.evaluation.results import Evaluation, SentenceResult, TestResults, test_results
from alignmt.evaluation.unk import no_unk_mask
from alignmt.special_tokens import EOS_ID, PAD_ID
from alignmt.translator import Translation, Translator


class Evaluator:
    """Scores teacher-forced likelihood, decodes with the translator's search, and keeps what
    the metrics need. `detailed` (test) adds the paper's "No UNK" subset decoded with [UNK]
    forbidden, teacher-forced attention for alignment error and the exposure-bias probe."""

    def __init__(
        self,
        translator: Translator,
        texts: Mapping[str, ParallelText],
        oracle: Callable[[str], Callable | None] | None = None,
        alignment_unit: str = "words",
    ):
        self.translator = translator
        self.texts = texts  # split name -> raw text (the data module's, filled at set-up)
        self.oracle = oracle  # split -> the right next tokens after any prefix, if known
        self.alignment_unit = alignment_unit  # what gold alignments index: words or tokens
        self.reset()

    def reset(self) -> None:
        self._sentences: list[SentenceResult] = []
        self._nll, self._tokens, self._decode_seconds = 0.0, 0, 0.0

    @torch.no_grad()
    def add(self, batch: Batch, split: str, detailed: bool = False) -> None:
        model = self.translator.model
        forced = model(batch.src, batch.src_lengths, batch.tgt_in, src_copy=batch.src_copy)
        self._nll += float(
            F.cross_entropy(
                forced.logits.flatten(0, 1).float(),
                batch.output_targets.flatten(),  # extended ids where the model copies
                ignore_index=PAD_ID,
                reduction="sum",
            )
        )
        self._tokens += batch.num_target_tokens
        words = self._source_words(batch, split)
        started = time.perf_counter()
        best = [nbest[0] for nbest in self.translator.decode_batch(batch, words)]
        self._decode_seconds += time.perf_counter() - started
        results = [SentenceResult(i, t) for i, t in zip(batch.indices.tolist(), best, strict=True)]
        if detailed:
            self._add_details(results, batch, forced, words)
        self._sentences += results

    def _source_words(self, batch: Batch, split: str) -> list[list[str]] | None:
        """Each source sentence as the tokeniser gives it: [UNK] replacement copies from it."""
        if self.translator.unk_replacer is None:
            return None
        sources = self.texts[split].sources
        tokenize = self.translator.source_tokenizer.tokenize
        return [tokenize(sources[i]) for i in batch.indices.tolist()]

    def _add_details(self, results, batch: Batch, forced, words) -> None:
        for row, translation in self._decode_no_unk(batch, results, words).items():
            results[row].no_unk = translation
        references = batch.output_targets.tolist()
        predicted = forced.logits.argmax(-1).tolist()
        ref_lengths = (batch.tgt_out != PAD_ID).sum(1).tolist()
        src_lengths = batch.src_lengths.tolist()
        # One copy from the device per batch, not one per sentence.
        attention = None if forced.attention is None else forced.attention.float().cpu().numpy()
        for b, result in enumerate(results):
            n = ref_lengths[b]
            if attention is not None:
                result.forced_attention = attention[b, : n - 1, : src_lengths[b] - 1].copy()
            own = [*result.translation.ids, EOS_ID]  # before [UNK] replacement
            result.exposure = (references[b][:n], predicted[b][:n], own)

    def _decode_no_unk(self, batch: Batch, results, words) -> dict[int, Translation]:
        """The paper's "No UNK" column: sentences with no unknown word in source or reference,
        decoded with [UNK] forbidden. Returns their best translations by row of the batch."""
        rows = no_unk_mask(batch.src, batch.tgt_out).nonzero().squeeze(1).tolist()
        forbidden = self.translator.search.forbid_unk  # the outputs already hold no [UNK]
        translations = {b: results[b].translation for b in rows}
        kept = {b: t for b, t in translations.items() if forbidden or t.same_without_unk}
        todo = [b for b in rows if b not in kept]
        if todo:
            decoded = self.translator.decode_batch(
                batch.select(todo), None if words is None else [words[b] for b in todo], True
            )
            kept.update({b: nbest[0] for b, nbest in zip(todo, decoded, strict=True)})
        return kept

    def gather(self, split: str) -> Evaluation:
        """This split's results from every process, in split order."""
        sentences, nll, tokens = self._sentences, self._nll, self._tokens
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            every = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(every, (sentences, nll, tokens))
            sentences = [s for rank in every for s in rank[0]]
            nll, tokens = sum(r[1] for r in every), sum(r[2] for r in every)
        sentences.sort(key=lambda s: s.index)
        evaluation = Evaluation(split, sentences, nll, tokens, self._decode_seconds)
        self.reset()
        return evaluation

    def validation_metrics(self, evaluation: Evaluation) -> dict[str, float]:
        """val/loss (per reference token, [EOS] included), val/ppl, val/nll_per_sentence (the
        unit of Bahdanau et al.'s Table 2) and val/bleu (sacrebleu, detokenised)."""
        hypotheses = [s.translation.text for s in evaluation.sentences]
        references = list(self.texts[evaluation.split].targets)
        return {
            "val/loss": evaluation.loss,
            "val/ppl": math.exp(min(evaluation.loss, 100)),
            "val/nll_per_sentence": evaluation.nll / len(evaluation.sentences),
            "val/bleu": corpus_scores(hypotheses, references)["bleu"],
        }

    def test_results(self, evaluation: Evaluation) -> TestResults:
        """Every test metric (`alignmt.evaluation.results.test_results`)."""
        translator = self.translator
        return test_results(
            evaluation,
            self.texts[evaluation.split],
            (translator.source_tokenizer, translator.target_tokenizer),
            self.oracle(evaluation.split) if self.oracle else None,
            self.alignment_unit,
        )
