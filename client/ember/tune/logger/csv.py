"""`CSVLoggerCallback`: `progress.csv` in each trial's directory, one row per result.

As Ray's: the config is left out, nested keys are flattened with '/', the header is the first
result's keys and later rows keep only those columns. A restarted trial appends to its file.
"""
from __future__ import annotations

import csv
import io
from typing import Any

from .logger import LoggerCallback, TrialFile, flatten, trial_location

EXPR_PROGRESS_FILE = "progress.csv"


class CSVLoggerCallback(LoggerCallback):
    """Writes each trial's results to `<trial dir>/progress.csv`."""

    def __init__(self) -> None:
        self._files: dict[Any, TrialFile] = {}
        self._fields: dict[Any, list[str]] = {}

    def log_trial_start(self, trial: Any) -> None:
        if trial in self._files:
            return
        fs, path = trial_location(trial)
        self._files[trial] = TrialFile(fs, f"{path}/{EXPR_PROGRESS_FILE}", keep=trial.iteration > 0)

    def log_trial_result(self, iteration: int, trial: Any, result: dict[str, Any]) -> None:
        if trial not in self._files:
            self.log_trial_start(trial)
        row = flatten({k: v for k, v in result.items() if k != "config" and not k.startswith("__")})
        f = self._files[trial]
        if trial not in self._fields:
            self._fields[trial] = list(row)
            if f.empty:
                f.write(_csv_line(self._fields[trial]))
        f.write(_csv_line([row.get(k, "") for k in self._fields[trial]]))

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        f = self._files.pop(trial, None)
        self._fields.pop(trial, None)
        if f is not None:
            f.close()


def _csv_line(values: list[Any]) -> str:
    buf = io.StringIO()
    csv.writer(buf).writerow(values)
    return buf.getvalue()
