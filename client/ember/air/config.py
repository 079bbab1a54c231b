"""Train's configuration objects, with Ray Train's names, fields and defaults. Tune takes the
same `RunConfig` / `CheckpointConfig` / `FailureConfig` (`ember.tune` re-exports them)."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow.fs


@dataclass
class ScalingConfig:
    """How many workers, and what each one holds.

    `resources_per_worker` overrides the default of 1 CPU (or 1 GPU when `use_gpu`) per worker;
    `placement_strategy` is the placement group strategy of the worker group; `trainer_resources`
    are held by the trainer process itself (default none)."""

    num_workers: int = 1
    use_gpu: bool = False
    resources_per_worker: dict[str, float] | None = None
    placement_strategy: str = "PACK"
    trainer_resources: dict[str, float] | None = None
    accelerator_type: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.num_workers, tuple):
            raise NotImplementedError(f"ScalingConfig(num_workers={self.num_workers!r}): Ray's elastic training "
                                      "(num_workers=(min, max)) is not supported by Ember; give an int")
        if not isinstance(self.num_workers, int) or self.num_workers < 1:
            raise ValueError(f"ScalingConfig.num_workers must be an int >= 1, got {self.num_workers!r}")
        if self.placement_strategy not in ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"):
            raise ValueError("ScalingConfig.placement_strategy must be PACK, SPREAD, STRICT_PACK or "
                             f"STRICT_SPREAD, got {self.placement_strategy!r}")
        for what, res in (("resources_per_worker", self.resources_per_worker),
                          ("trainer_resources", self.trainer_resources)):
            for k, v in (res or {}).items():
                if not isinstance(v, (int, float)) or v < 0:
                    raise ValueError(f"ScalingConfig.{what}[{k!r}] must be a number >= 0, got {v!r}")

    @property
    def worker_resources(self) -> dict[str, float]:
        """The resources one worker holds (Ray's defaults when not given)."""
        if self.resources_per_worker is not None:
            res = {k: float(v) for k, v in self.resources_per_worker.items() if v}
            if self.use_gpu and "GPU" not in res:
                res["GPU"] = 1.0
            return res
        return {"CPU": 1.0, "GPU": 1.0} if self.use_gpu else {"CPU": 1.0}

    @property
    def total_resources(self) -> dict[str, float]:
        out: dict[str, float] = dict(self.trainer_resources or {})
        for k, v in self.worker_resources.items():
            out[k] = out.get(k, 0.0) + v * self.num_workers
        return out


@dataclass
class CheckpointConfig:
    """Which reported checkpoints to keep: the `num_to_keep` best by
    `checkpoint_score_attribute` (most recent when no attribute is given). As in Ray 2.60, Train's
    refuses `checkpoint_frequency` / `checkpoint_at_end` (DeprecationWarning); Tune's takes them."""

    num_to_keep: int | None = None
    checkpoint_score_attribute: str | None = None
    checkpoint_score_order: Literal["max", "min"] = "max"
    checkpoint_frequency: int = 0
    checkpoint_at_end: bool | None = None

    def __post_init__(self) -> None:
        if self.num_to_keep is not None and (not isinstance(self.num_to_keep, int) or self.num_to_keep < 1):
            raise ValueError(f"CheckpointConfig.num_to_keep must be None or an int >= 1, got {self.num_to_keep!r}")
        if self.checkpoint_score_order not in ("max", "min"):
            raise ValueError("CheckpointConfig.checkpoint_score_order must be 'max' or 'min', "
                             f"got {self.checkpoint_score_order!r}")
        if type(self) is CheckpointConfig:  # Train's; Tune's subclass saves class trainables by them
            for what, value, default in (("checkpoint_frequency", self.checkpoint_frequency, 0),
                                         ("checkpoint_at_end", self.checkpoint_at_end, None)):
                if value != default:
                    raise DeprecationWarning(
                        f"ember.train.CheckpointConfig({what}=...) is deprecated, as in Ray Train 2.60: a "
                        "training function checkpoints when it calls report(checkpoint=...). Drop it "
                        "(tune.CheckpointConfig takes it for class trainables)")


@dataclass
class FailureConfig:
    """How many times a failed run (Train worker group, Tune trial) is restarted from its latest
    checkpoint; -1 means without limit. Train's refuses `fail_fast` (Ray 2.60); Tune's takes it."""

    max_failures: int = 0
    fail_fast: bool | str = False

    def __post_init__(self) -> None:
        if not isinstance(self.max_failures, int) or self.max_failures < -1:
            raise ValueError(f"FailureConfig.max_failures must be an int >= -1, got {self.max_failures!r}")
        if type(self) is FailureConfig and self.fail_fast is not False:  # Tune's subclass reads it
            raise DeprecationWarning(
                "ember.train.FailureConfig(fail_fast=...) is deprecated, as in Ray Train 2.60: it concerns "
                "the trials of a Tune run. Use tune.FailureConfig(fail_fast=...) there")


@dataclass
class LoggingConfig:
    """The level of Train's own logger `ember.train` (Ray's `ray.train` logger) on the console
    and in Train's application log files, in the controller and in every worker. Train's system
    log files always hold every level; other loggers are not affected."""

    log_level: str = "INFO"

    def __post_init__(self) -> None:
        names = logging.getLevelNamesMapping()
        if not isinstance(self.log_level, str) or self.log_level.upper() not in names:
            raise ValueError(f"LoggingConfig.log_level must be a logging level name, one of "
                             f"{', '.join(sorted(names))}; got {self.log_level!r}")
        self.log_level = self.log_level.upper()


@dataclass
class SyncConfig:
    """Ray's `SyncConfig` (syncing a Tune experiment's driver files to storage), importable as in
    Ray 2.60. Ember writes results straight to `storage_path`, so nothing takes it: Train's
    RunConfig refuses it (DeprecationWarning, as Ray's), Tune's with NotImplementedError."""

    sync_period: int = 300
    sync_timeout: int = 1800
    sync_artifacts: bool = False
    sync_artifacts_on_checkpoint: bool = True


# Ray 2.60's Train RunConfig refuses these Tune-era fields (they are Tune's RunConfig's).
TUNE_ONLY_FIELDS = ("sync_config", "verbose", "stop", "progress_reporter", "log_to_file")
TRAIN_ONLY_FIELDS = ("worker_runtime_env", "logging_config")


@dataclass
class RunConfig:
    """Where results go and how failures and checkpoints are handled.

    `storage_path` is a local directory or any pyarrow.fs URI (default `~/ember_results`);
    results live under `storage_path/name`. `worker_runtime_env` is the runtime env of every
    training worker; `logging_config` the level of Train's own logger.

    This is Train's RunConfig (Ray's `ray.train.RunConfig`): as in Ray 2.60, `sync_config`,
    `verbose`, `stop`, `progress_reporter` and `log_to_file` raise DeprecationWarning when set.
    Tune's RunConfig subclasses it and takes `stop`, `verbose`, `callbacks` and
    `progress_reporter` instead of the two worker fields."""

    name: str | None = None
    storage_path: str | None = None
    storage_filesystem: pyarrow.fs.FileSystem | None = None
    failure_config: FailureConfig | None = None
    checkpoint_config: CheckpointConfig | None = None
    callbacks: list[Any] | None = None
    worker_runtime_env: dict[str, Any] | None = None
    logging_config: LoggingConfig | None = None
    sync_config: Any = None
    verbose: int | None = None
    stop: Any = None
    progress_reporter: Any = None
    log_to_file: bool = False

    def __post_init__(self) -> None:
        if self.failure_config is None:
            self.failure_config = FailureConfig()
        if self.checkpoint_config is None:
            self.checkpoint_config = CheckpointConfig()
        if self.name is not None and ("/" in self.name or not self.name.strip()):
            raise ValueError(f"RunConfig.name must be a non-empty name without '/', got {self.name!r}")
        if isinstance(self.storage_path, os.PathLike):  # a pathlib.Path, as Ray takes it
            self.storage_path = os.fspath(self.storage_path)
        if type(self) is RunConfig:
            self._check_train_fields()
            return
        for what, value, default in (("log_to_file", self.log_to_file, False),
                                     ("sync_config", self.sync_config, None),
                                     ("worker_runtime_env", self.worker_runtime_env, None),
                                     ("logging_config", self.logging_config, None)):
            if value != default:
                owner = " (it is ember.train.RunConfig's)" if what in TRAIN_ONLY_FIELDS else ""
                raise NotImplementedError(f"RunConfig({what}=...) is not supported by Ember's tune.RunConfig{owner}")

    def _check_train_fields(self) -> None:
        defaults = {"log_to_file": False}
        for what in TUNE_ONLY_FIELDS:
            if getattr(self, what) != defaults.get(what):
                raise DeprecationWarning(
                    f"ember.train.RunConfig({what}=...) is deprecated, as in Ray Train 2.60: it was a Tune "
                    "setting. Drop it, or run the trainer as one trial of ember.tune.Tuner, whose "
                    "tune.RunConfig takes it")
        if self.logging_config is None:
            self.logging_config = LoggingConfig()
        elif not isinstance(self.logging_config, LoggingConfig):
            raise TypeError("RunConfig.logging_config must be an ember.train.LoggingConfig, got "
                            f"{type(self.logging_config).__name__}")
        env = self.worker_runtime_env
        if env is None:
            self.worker_runtime_env = {}
        elif not isinstance(env, dict):
            raise TypeError(f"RunConfig.worker_runtime_env must be a dict or an ember.runtime_env.RuntimeEnv, "
                            f"got {type(env).__name__}")


@dataclass
class DataConfig:
    """Which of a trainer's `datasets` are split across workers (the others go whole to every
    worker), and the execution options of the split."""

    datasets_to_split: str | list[str] = "all"
    execution_options: Any = None
    enable_shard_locality: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (self.datasets_to_split == "all" or isinstance(self.datasets_to_split, list)):
            raise ValueError("DataConfig.datasets_to_split must be 'all' or a list of dataset names, "
                             f"got {self.datasets_to_split!r}")

    def splits(self, name: str) -> bool:
        return self.datasets_to_split == "all" or name in self.datasets_to_split
