"""Tune's logger callbacks (Ray's `ray.tune.logger`): each writes a file per trial into the
trial's directory as results arrive.

- `CSVLoggerCallback`: `progress.csv`, one row per result (nested keys flattened with '/');
- `JsonLoggerCallback`: `result.json`, one JSON line per result, and `params.json`/`params.pkl`;
- `TBXLoggerCallback`: TensorBoard event files of the numeric metrics (needs `tensorboardX`).

`LoggerCallback` is the base to subclass: `log_trial_start`, `log_trial_result`, `log_trial_end`.
"""
from __future__ import annotations

from .csv import CSVLoggerCallback
from .json import JsonLoggerCallback
from .logger import LoggerCallback
from .tensorboardx import TBXLoggerCallback

__all__ = ["CSVLoggerCallback", "JsonLoggerCallback", "LoggerCallback", "TBXLoggerCallback"]
