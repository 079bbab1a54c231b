"""`JsonLoggerCallback`: `result.json` in each trial's directory (one JSON object per line, per
result, config included, as Ray writes it) and the trial's config as `params.json` and
`params.pkl`."""
from __future__ import annotations

import json
from typing import Any

import cloudpickle

from ember.air import storage

from ..trainable.trainable import json_safe
from .logger import LoggerCallback, TrialFile, trial_location

EXPR_RESULT_FILE = "result.json"
EXPR_PARAM_FILE = "params.json"
EXPR_PARAM_PICKLE_FILE = "params.pkl"


class JsonLoggerCallback(LoggerCallback):
    """Writes each trial's results to `<trial dir>/result.json`."""

    def __init__(self) -> None:
        self._files: dict[Any, TrialFile] = {}

    def log_trial_start(self, trial: Any) -> None:
        fs, path = trial_location(trial)
        storage.write_bytes(fs, f"{path}/{EXPR_PARAM_FILE}",
                            json.dumps(json_safe(trial.config), indent=2, sort_keys=True).encode())
        storage.write_bytes(fs, f"{path}/{EXPR_PARAM_PICKLE_FILE}", cloudpickle.dumps(trial.config))
        if trial not in self._files:
            self._files[trial] = TrialFile(fs, f"{path}/{EXPR_RESULT_FILE}", keep=trial.iteration > 0)

    def log_trial_result(self, iteration: int, trial: Any, result: dict[str, Any]) -> None:
        if trial not in self._files:
            self.log_trial_start(trial)
        row = {k: v for k, v in result.items() if not k.startswith("__")}
        row.setdefault("config", trial.config)
        self._files[trial].write(json.dumps(json_safe(row)) + "\n")

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        f = self._files.pop(trial, None)
        if f is not None:
            f.close()
