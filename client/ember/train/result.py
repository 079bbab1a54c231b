"""`Result`: what a Trainer's `fit()` (and each Tune trial) returns."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow.fs

from ._checkpoint import Checkpoint


@dataclass
class Result:
    """The final metrics, the latest checkpoint, the error (if the run failed), where the run's
    files are, every reported metrics row as a DataFrame, and the kept checkpoints with the
    metrics they were reported with."""

    metrics: dict[str, Any] | None
    checkpoint: Checkpoint | None
    error: BaseException | None = None
    path: str = ""
    metrics_dataframe: Any = None  # pandas.DataFrame when pandas is installed
    best_checkpoints: list[tuple[Checkpoint, dict[str, Any]]] = field(default_factory=list)
    filesystem: pyarrow.fs.FileSystem | None = None
    _config: dict[str, Any] | None = None

    @property
    def config(self) -> dict[str, Any] | None:
        """The configuration the run was given (Tune: the trial's sampled config)."""
        if self._config is not None:
            return self._config
        return (self.metrics or {}).get("config")

    def get_best_checkpoint(self, metric: str, mode: str) -> Checkpoint | None:
        """The kept checkpoint whose reported `metric` is best (`mode` "max" or "min")."""
        if mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
        scored = [(m[metric], c) for c, m in self.best_checkpoints if metric in m]
        if not scored:
            return None
        pick = max if mode == "max" else min
        return pick(scored, key=lambda t: t[0])[1]

    def __repr__(self) -> str:
        err = f", error={type(self.error).__name__}" if self.error else ""
        return f"Result(metrics={self.metrics!r}, path={self.path!r}, checkpoint={self.checkpoint!r}{err})"
