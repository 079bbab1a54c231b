"""Train's errors (Ray Train's names).

    RuntimeError
     └── TrainingFailedError        fit() failed: `.result` holds the Result (with `.error`)
          └── WorkerGroupError      a rank's training function raised or its process died;
                                    `.worker_failures` maps rank -> the exception
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
        return (WorkerGroupError, (self.args[0], self.worker_failures))
