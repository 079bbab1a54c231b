"""`LoggerCallback`: the base of Tune's per-trial loggers, and `TrialFile`, a file in a trial's
directory that results are appended to.

On a local disk a line is appended as it comes; on remote storage (any other `pyarrow.fs`
filesystem) the file is written whole when the trial ends, since object stores cannot append.
"""
from __future__ import annotations

import os
from typing import Any

import pyarrow.fs

from ember.air import storage

from ..callback import Callback


def flatten(d: dict[str, Any], delimiter: str = "/", prefix: str = "") -> dict[str, Any]:
    """Nested dicts as one level: {"a": {"b": 1}} -> {"a/b": 1}."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{delimiter}{k}" if prefix else str(k)
        if isinstance(v, dict):
            out.update(flatten(v, delimiter, key))
        else:
            out[key] = v
    return out


class TrialFile:
    """A text file under a trial's directory, appended to line by line."""

    def __init__(self, fs: pyarrow.fs.FileSystem, path: str, keep: bool) -> None:
        self.fs, self.path = fs, path
        self.local = isinstance(fs, pyarrow.fs.LocalFileSystem)
        self._pending: list[str] = []
        if not keep and self.local and os.path.exists(path):
            os.remove(path)
        if not self.local and keep and storage.exists(fs, path):
            self._pending.append(storage.read_bytes(fs, path).decode())
        self.empty = not (os.path.exists(path) and os.path.getsize(path) > 0) if self.local \
            else not "".join(self._pending)

    def write(self, text: str) -> None:
        """Appends text (local: now; remote: at close)."""
        self.empty = False
        if self.local:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(text)
        else:
            self._pending.append(text)

    def close(self) -> None:
        """Writes the whole file to remote storage (nothing to do on a local disk)."""
        if not self.local:
            storage.write_bytes(self.fs, self.path, "".join(self._pending).encode())


def trial_location(trial: Any) -> tuple[pyarrow.fs.FileSystem, str]:
    """The trial directory's filesystem and path (the experiment's storage)."""
    fs = getattr(trial, "filesystem", None) or pyarrow.fs.LocalFileSystem()
    return fs, trial.path


class LoggerCallback(Callback):
    """Turns trial events into `log_trial_start` / `log_trial_result` / `log_trial_end` calls."""

    def log_trial_start(self, trial: Any) -> None:
        """A trial started (or restarted)."""

    def log_trial_restore(self, trial: Any) -> None:
        """A trial restarted from a checkpoint."""

    def log_trial_save(self, trial: Any) -> None:
        """A trial saved a checkpoint."""

    def log_trial_result(self, iteration: int, trial: Any, result: dict[str, Any]) -> None:
        """A trial reported a result."""

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        """A trial ended (failed: it errored)."""

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.log_trial_start(trial)

    def on_trial_restore(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.log_trial_restore(trial)

    def on_trial_save(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.log_trial_save(trial)

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any,
                        result: dict[str, Any], **info: Any) -> None:
        self.log_trial_result(iteration, trial, result)

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.log_trial_end(trial, failed=False)

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.log_trial_end(trial, failed=True)
