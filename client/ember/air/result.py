"""`Result`: what a Trainer's `fit()` (and each Tune trial) returns; `Result.from_path` reads one
back from a run's or a trial's directory (local or remote)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow.fs

from . import storage
from .checkpoint import Checkpoint

# Book-keeping columns Train writes into each result.json row besides the user's metrics.
_ROW_KEYS = ("_report_index", "_timestamp", "_checkpoint")


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

    @classmethod
    def from_path(cls, path: str, storage_filesystem: pyarrow.fs.FileSystem | None = None) -> Result:
        """The Result recorded in a Train run's or a Tune trial's directory: the last row of its
        result.json as metrics, every row as the DataFrame, its checkpoints (with the metrics
        they were reported with, where recorded), the config from params.json."""
        fs, root = storage.resolve(str(path), storage_filesystem)
        if not storage.exists(fs, root):
            raise RuntimeError(f"Result.from_path: {path} does not exist")
        result_file = storage.join(root, "result.json")
        if not storage.exists(fs, result_file):
            raise RuntimeError(f"Result.from_path: {path} has no result.json (not a run or trial directory)")
        rows = [json.loads(line) for line in storage.read_bytes(fs, result_file).decode().splitlines()
                if line.strip()]
        config = None
        if storage.exists(fs, storage.join(root, "params.json")):
            config = json.loads(storage.read_bytes(fs, storage.join(root, "params.json")))
        best: list[tuple[Checkpoint, dict[str, Any]]] = []
        recorded = {r["_checkpoint"]: r for r in rows if isinstance(r.get("_checkpoint"), str)}
        for name in storage.list_dir(fs, root):
            ckpt_path = storage.join(root, name)
            if not name.startswith("checkpoint_") or \
                    fs.get_file_info(ckpt_path).type != pyarrow.fs.FileType.Directory:
                continue
            row: dict[str, Any] = recorded.get(ckpt_path) or next((r for p, r in recorded.items() if p.endswith("/" + name)), {})
            best.append((Checkpoint(ckpt_path, fs), {k: v for k, v in row.items() if k not in _ROW_KEYS}))
        frame = None
        try:
            import pandas as pd

            frame = pd.DataFrame([{k: v for k, v in r.items() if k not in _ROW_KEYS} for r in rows])
        except ImportError:  # pragma: no cover - depends on the install
            pass
        metrics = {k: v for k, v in rows[-1].items() if k not in _ROW_KEYS} if rows else {}
        error = None
        if storage.exists(fs, storage.join(root, "error.txt")):
            error = RuntimeError(storage.read_bytes(fs, storage.join(root, "error.txt")).decode())
        return cls(metrics=metrics, checkpoint=best[-1][0] if best else None, error=error, path=root,
                   metrics_dataframe=frame, best_checkpoints=best, filesystem=fs, _config=config)

    def __repr__(self) -> str:
        err = f", error={type(self.error).__name__}" if self.error else ""
        return f"Result(metrics={self.metrics!r}, path={self.path!r}, checkpoint={self.checkpoint!r}{err})"
