"""A CSV logger that keeps what a run logged before it was interrupted."""

from __future__ import annotations

import csv

from pytorch_lightning.loggers import CSVLogger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter
from pytorch_lightning.loggers.logger import rank_zero_experiment


class _AppendingWriter(ExperimentWriter):
    def _check_log_dir_exists(self) -> None:
        """Lightning deletes an existing metrics.csv here; a resumed run appends to it, its
        columns known from the header. Rows logged after the checkpoint it resumed from appear
        twice (the later one is the resumed run's)."""
        if self._fs.isfile(self.metrics_file_path):
            with self._fs.open(self.metrics_file_path, "r", newline="") as file:
                self.metrics_keys = sorted(csv.DictReader(file).fieldnames or [])


class ResumableCSVLogger(CSVLogger):
    """Lightning's CSV logger (logs/metrics.csv), appending to the file of an earlier, resumed
    part of the same run instead of deleting it."""

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _AppendingWriter(log_dir=self.log_dir)
        return self._experiment
