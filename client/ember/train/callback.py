"""`UserCallback` (Ray's `ray.train.UserCallback`): hooks the controller calls in the process
that runs `fit()`, given in `RunConfig(callbacks=[...])`.

- `after_report(run_context, metrics, checkpoint)`: once every rank has made a report and it is
  recorded; `metrics[i]` is rank i's dict, `checkpoint` the persisted one (None without).
- `after_exception(run_context, worker_exceptions)`: when ranks fail (rank -> the exception,
  the user's own or `ActorDiedError`), before the restart or the end of the run.

A hook that raises fails the run with that exception. `TrainRunContext` says which run it is.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ember.air.checkpoint import Checkpoint
    from ember.air.config import DataConfig, RunConfig, ScalingConfig

    from .backend import BackendConfig


@dataclass
class TrainRunContext:
    """The run's configuration, as the trainer was given it, and an id for this `fit()`."""

    run_config: RunConfig
    train_loop_config: dict[str, Any] | None
    scaling_config: ScalingConfig
    backend_config: BackendConfig
    dataset_config: DataConfig | None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def get_run_config(self) -> RunConfig:
        return self.run_config


class UserCallback:
    """Subclass and override the hooks you need; the defaults do nothing."""

    def after_report(self, run_context: TrainRunContext, metrics: list[dict[str, Any]],
                     checkpoint: Checkpoint | None) -> None:
        """Every rank's report is recorded: metrics by rank, and the persisted checkpoint."""

    def after_exception(self, run_context: TrainRunContext, worker_exceptions: dict[int, BaseException]) -> None:
        """Ranks failed: rank -> exception."""
