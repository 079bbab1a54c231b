"""ember.air: the layer Train and Tune share, as Ray's `ray.air`.

Both libraries build on it and neither reaches into the other's private modules:

- `checkpoint`: `Checkpoint`, a directory in local or remote storage;
- `config`: `ScalingConfig`, `RunConfig`, `CheckpointConfig`, `FailureConfig`, `DataConfig`,
  `LoggingConfig`;
- `result`: `Result`, what a trainer's `fit()` and each Tune trial return;
- `session`: the per-process session that `ember.train.report` / `ember.tune.report` dispatch to
  (a Train worker or a Tune trial installs one), and `TrainContext`;
- `storage`: a `storage_path` resolved to a `pyarrow.fs` filesystem, and directory copies;
- `placement`: pure feasibility checks of placement-group bundles against the cluster's nodes.

The face re-exports what Ray's `ray.air` exports, so `from ray.air import RunConfig, ScalingConfig`
keeps working. `ember.air` imports no other library.
"""
from __future__ import annotations

from .checkpoint import Checkpoint
from .config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from .result import Result

__all__ = ["Checkpoint", "CheckpointConfig", "FailureConfig", "Result", "RunConfig", "ScalingConfig"]
