"""ember.train: distributed training with Ray Train's API.

    from ember.train import ScalingConfig, RunConfig, Checkpoint
    from ember.train.torch import TorchTrainer

`ember.train.torch` (TorchTrainer, prepare_model, ...) is a subpackage, imported on first use.

Inside a training function: `report(metrics, checkpoint=)`, `get_checkpoint()`,
`get_context()`, `get_dataset_shard(dataset_name)`. The same `report`/`get_checkpoint` work inside Tune
function trainables.
"""
from __future__ import annotations

import dataclasses
import enum
from typing import Any, Callable

from ember.air.checkpoint import Checkpoint
from ember.air.config import (
    CheckpointConfig,
    DataConfig,
    FailureConfig,
    LoggingConfig,
    RunConfig,
    ScalingConfig,
    SyncConfig,
)
from ember.air.result import Result
from ember.air.session import TrainContext, require_session

from .backend import BackendConfig
from .callback import UserCallback
from .data_parallel_trainer import DataParallelTrainer
from .exceptions import ControllerError, NCCLHangError, TrainingFailedError, WorkerGroupError

__all__ = [
    "TRAIN_DATASET_KEY", "BackendConfig", "Checkpoint", "CheckpointConfig", "CheckpointConsistencyMode",
    "CheckpointUploadMode", "ControllerError", "DataConfig", "DataParallelTrainer", "FailureConfig", "LoggingConfig", "NCCLHangError", "ReportedCheckpoint",
    "ReportedCheckpointStatus", "Result", "RunConfig", "ScalingConfig", "SyncConfig", "TrainContext", "TrainingFailedError",
    "UserCallback", "WorkerGroupError", "get_all_reported_checkpoints", "get_checkpoint", "get_context",
    "get_dataset_shard", "report",
]

TRAIN_DATASET_KEY = "train"  # the dataset get_dataset_shard() returns when given no name


class CheckpointUploadMode(enum.Enum):
    """How `report()` persists a checkpoint (Ray's names). Ember uploads before `report()`
    returns in both SYNC and ASYNC; ASYNC also deletes the local directory by default, as Ray's."""

    ASYNC = "ASYNC"
    SYNC = "SYNC"
    NO_UPLOAD = "NO_UPLOAD"

    def default_delete_local_checkpoint_after_upload(self) -> bool:
        return self is CheckpointUploadMode.ASYNC


def report(metrics: dict[str, Any], checkpoint: Checkpoint | None = None,
           checkpoint_dir_name: str | None = None,
           checkpoint_upload_mode: CheckpointUploadMode = CheckpointUploadMode.SYNC,
           delete_local_checkpoint_after_upload: bool | None = None,
           checkpoint_upload_fn: Callable[[Checkpoint, str], Checkpoint] | None = None,
           validation: Any = False) -> None:
    """Reports metrics (and optionally a checkpoint, persisted to the run's storage) from a
    training function. In a multi-worker run every worker must call it the same number of times.

    `checkpoint_upload_fn(checkpoint, checkpoint_dir_name)` persists the checkpoint itself and
    returns the persisted Checkpoint; `delete_local_checkpoint_after_upload` removes a local
    checkpoint directory once persisted (default: only with ASYNC)."""
    if not isinstance(metrics, dict):
        raise TypeError(f"report() expects a dict of metrics, got {type(metrics).__name__}")
    if checkpoint is not None and not isinstance(checkpoint, Checkpoint):
        raise TypeError(f"report(checkpoint=) expects an ember.train.Checkpoint, got {type(checkpoint).__name__}")
    if validation:
        raise NotImplementedError("report(validation=...) is not supported by Ember (Ray's ValidationConfig is "
                                  "not implemented): validate in the training function and report the metrics")
    mode = CheckpointUploadMode(checkpoint_upload_mode)
    if mode is CheckpointUploadMode.NO_UPLOAD:
        raise NotImplementedError("report(checkpoint_upload_mode=NO_UPLOAD) is not supported by Ember: give "
                                  "checkpoint_upload_fn to persist the checkpoint yourself")
    delete = (mode.default_delete_local_checkpoint_after_upload() if delete_local_checkpoint_after_upload is None
              else bool(delete_local_checkpoint_after_upload))
    session = require_session("ember.train.report()")
    report_with = getattr(session, "report_with", None)
    if report_with is not None:
        report_with(metrics, checkpoint, checkpoint_dir_name, delete, checkpoint_upload_fn)
        return
    if delete or checkpoint_upload_fn is not None:
        raise NotImplementedError("report(delete_local_checkpoint_after_upload=, checkpoint_upload_fn=) apply in "
                                  "a Train worker, not in a Tune trial")
    session.report(metrics, checkpoint, checkpoint_dir_name)


class ReportedCheckpointStatus(enum.Enum):
    """Where a reported checkpoint stands (Ray's names); Ember has no validation, so a recorded
    checkpoint is COMMITTED."""

    COMMITTED = "COMMITTED"
    PENDING_VALIDATION = "PENDING_VALIDATION"
    VALIDATED = "VALIDATED"
    VALIDATION_TIMEOUT = "VALIDATION_TIMEOUT"
    VALIDATION_FAILED = "VALIDATION_FAILED"


class CheckpointConsistencyMode(enum.Enum):
    """What `get_all_reported_checkpoints` waits for (Ray's names). `report()` returns once its
    checkpoint is committed, and there is no validation, so both modes read the same list."""

    COMMITTED = "COMMITTED"
    VALIDATED = "VALIDATED"


@dataclasses.dataclass
class ReportedCheckpoint:
    """A checkpoint the run keeps, with the metrics reported with it."""

    checkpoint: Checkpoint
    metrics: dict[str, Any]
    status: ReportedCheckpointStatus = ReportedCheckpointStatus.COMMITTED


def get_all_reported_checkpoints(
        consistency_mode: CheckpointConsistencyMode = CheckpointConsistencyMode.VALIDATED,
        timeout_s: float | None = None) -> list[ReportedCheckpoint]:
    """The checkpoints the run keeps (per CheckpointConfig), in report order, with their metrics,
    as of this worker's last `report()` (which returns only once every rank's report is
    recorded, so nothing is pending and `timeout_s` is never waited for)."""
    CheckpointConsistencyMode(consistency_mode)
    if timeout_s is not None and timeout_s < 0:
        raise ValueError(f"get_all_reported_checkpoints(timeout_s=) must be >= 0 or None, got {timeout_s!r}")
    session = require_session("ember.train.get_all_reported_checkpoints()")
    reported = getattr(session, "reported_checkpoints", None)
    if reported is None:
        raise RuntimeError("ember.train.get_all_reported_checkpoints() works in a Train worker, not in a Tune trial")
    return [ReportedCheckpoint(c, m) for c, m in reported()]


def get_checkpoint() -> Checkpoint | None:
    """The checkpoint to resume from (latest reported, or the one a restarted run starts from)."""
    return require_session("ember.train.get_checkpoint()").get_checkpoint()


def get_context() -> TrainContext:
    """Ranks, world size, experiment and trial names of the calling worker."""
    return require_session("ember.train.get_context()").get_context()


def get_dataset_shard(dataset_name: str | None = None) -> Any:
    """This worker's shard of the trainer's dataset `dataset_name` (default "train"; a streaming
    iterator of the Dataset)."""
    return require_session("ember.train.get_dataset_shard()").get_dataset_shard(dataset_name or TRAIN_DATASET_KEY)


def __getattr__(name: str) -> Any:
    # `ray.train.torch.prepare_model(...)` works without importing ember.train.torch first.
    if name == "torch":
        import importlib

        return importlib.import_module("ember.train.torch")
    raise AttributeError(f"module 'ember.train' has no attribute {name!r}")
