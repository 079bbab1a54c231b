"""Train's configuration objects, with Ray Train's names, fields and defaults. Tune takes the
same `RunConfig` / `CheckpointConfig` / `FailureConfig` (`ember.tune` re-exports them)."""
from __future__ import annotations

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
    `checkpoint_score_attribute` (most recent when no attribute is given)."""

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


@dataclass
class FailureConfig:
    """How many times a failed run (Train worker group, Tune trial) is restarted from its latest
    checkpoint; -1 means without limit."""

    max_failures: int = 0
    fail_fast: bool | str = False

    def __post_init__(self) -> None:
        if not isinstance(self.max_failures, int) or self.max_failures < -1:
            raise ValueError(f"FailureConfig.max_failures must be an int >= -1, got {self.max_failures!r}")


@dataclass
class RunConfig:
    """Where results go and how failures and checkpoints are handled.

    `storage_path` is a local directory or any pyarrow.fs URI (default `~/ember_results`);
    results live under `storage_path/name`. `stop` and `verbose` are read by Tune."""

    name: str | None = None
    storage_path: str | None = None
    storage_filesystem: pyarrow.fs.FileSystem | None = None
    failure_config: FailureConfig | None = None
    checkpoint_config: CheckpointConfig | None = None
    stop: Any = None
    verbose: int | None = None
    callbacks: list[Any] | None = None
    log_to_file: bool = False
    worker_runtime_env: dict[str, Any] | None = None
    sync_config: Any = None

    def __post_init__(self) -> None:
        if self.failure_config is None:
            self.failure_config = FailureConfig()
        if self.checkpoint_config is None:
            self.checkpoint_config = CheckpointConfig()
        if self.name is not None and ("/" in self.name or not self.name.strip()):
            raise ValueError(f"RunConfig.name must be a non-empty name without '/', got {self.name!r}")
        for what, value, default in (("log_to_file", self.log_to_file, False),
                                     ("sync_config", self.sync_config, None),
                                     ("worker_runtime_env", self.worker_runtime_env, None)):
            if value != default:
                raise NotImplementedError(f"RunConfig({what}=...) is not supported by Ember")


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
