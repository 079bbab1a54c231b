"""Train's errors (Ray Train 2.60's names, `ray.train.v2.api.exceptions`).

    RuntimeError
     └── TrainingFailedError        fit() failed: `.result` holds the Result (with `.error`)
          ├── WorkerGroupError      a rank's training function raised or its process died;
          │    │                    `.worker_failures` maps rank -> the exception
          │    └── NCCLHangError    (Ray's NCCL RAS hang report; Ember has no RAS monitor and
          │                         never raises it: importable for `except` clauses)
          └── ControllerError       the controller itself failed: a UserCallback hook raised,
                                    or the worker group could not be started;
                                    `.controller_failure` is that exception
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ember.air.result import Result


class TrainingFailedError(RuntimeError):
    """The run failed (after `FailureConfig.max_failures` restarts). `result.error` is the
    cause, `result.checkpoint` the latest checkpoint, so the run can be restored from it."""

    def __init__(self, message: str, result: Result | None = None) -> None:
        super().__init__(message)
        self.result = result


class WorkerGroupError(TrainingFailedError):
    """One or more ranks failed: their exceptions (a user error, or ActorDiedError when the
    rank's process died) by rank; the message carries the first one's traceback. `fit()` raises
    it (as Ray 2.60 does), with `.result` set."""

    def __init__(self, message: str, worker_failures: dict[int, BaseException], result: Result | None = None) -> None:
        super().__init__(message, result)
        self.worker_failures = worker_failures

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.args[0], self.worker_failures))


class NCCLHangError(WorkerGroupError):
    """Ray's report of a hung NCCL job (from NCCL's RAS subsystem). Ember does not watch NCCL
    and never raises it; the class exists so that code catching it imports."""


class ControllerError(TrainingFailedError):
    """The controller failed rather than a rank: a `UserCallback` hook raised (the run ends
    at once, as Ray's) or the worker group could not be started (its placement group was not
    placed in time, or a worker actor failed to start)."""

    def __init__(self, controller_failure: BaseException, result: Result | None = None,
                 message: str | None = None) -> None:
        super().__init__(message or f"Training failed due to controller error:\n{controller_failure}", result)
        self.controller_failure = controller_failure

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.controller_failure, None, self.args[0]))
