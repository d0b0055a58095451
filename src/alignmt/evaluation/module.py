"""Validation and test as Lightning loops around an `Evaluator`, so that they run on every
strategy Lightning has (one CPU, GPUs, DDP). The training task extends this module;
`alignmt-evaluate` uses it alone."""

from __future__ import annotations

import pytorch_lightning as pl

from alignmt.data.batching import Batch
from alignmt.evaluation.evaluator import Evaluator
from alignmt.evaluation.results import Evaluation, TestResults
from alignmt.models.seq2seq import Seq2Seq


class EvaluationModule(pl.LightningModule):
    """Validation decodes the validation split for `val/loss`, `val/ppl` and `val/bleu`;
    test computes every test metric (`alignmt.evaluation.results`). Each process decodes its
    share and the evaluator gathers them. Callbacks read `last_validation`, `test_evaluation`
    and `test_results`."""

    def __init__(self, model: Seq2Seq, evaluator: Evaluator | None):
        super().__init__()
        self.model = model
        self.evaluator = evaluator
        self.last_validation: Evaluation | None = None
        self.test_evaluation: Evaluation | None = None
        self.test_results: TestResults | None = None

    def on_validation_epoch_start(self) -> None:
        self.evaluator.reset()

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self.evaluator.add(batch, "valid")

    def on_validation_epoch_end(self) -> None:
        evaluation = self.evaluator.gather("valid")
        if self.trainer.sanity_checking:
            return
        evaluation.metrics = self.evaluator.validation_metrics(evaluation)
        # Every process holds the same gathered value; sync_dist only says so.
        self.log_dict(evaluation.metrics, prog_bar=True, sync_dist=True)
        self.last_validation = evaluation

    def on_test_epoch_start(self) -> None:
        self.evaluator.reset()

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self.evaluator.add(batch, "test", detailed=True)

    def on_test_epoch_end(self) -> None:
        evaluation = self.evaluator.gather("test")
        results = self.evaluator.test_results(evaluation)
        results.details["global_step"] = self.global_step
        evaluation.metrics = results.metrics
        self.log_dict(results.metrics, sync_dist=True)
        self.test_evaluation, self.test_results = evaluation, results
