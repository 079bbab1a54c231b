"""Stop criteria (`RunConfig(stop=...)`): a dict (`{"training_iteration": 10, "mean_accuracy":
0.98}`: a trial stops when any result value reaches its threshold), a function
`(trial_id, result) -> bool`, or a `Stopper` (which can also stop the whole experiment).
"""
from __future__ import annotations

import time
from typing import Any, Callable

__all__ = ["CombinedStopper", "FunctionStopper", "MaximumIterationStopper", "Stopper",
           "TimeoutStopper", "as_stopper"]


class Stopper:
    """Decides when a trial (`__call__`) or the whole experiment (`stop_all`) stops."""

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return False

    def stop_all(self) -> bool:
        """Whether the whole experiment should stop now."""
        return False


class FunctionStopper(Stopper):
    """Wraps `fn(trial_id, result) -> bool`."""

    def __init__(self, function: Callable[[str, dict[str, Any]], bool]) -> None:
        self._fn = function

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return bool(self._fn(trial_id, result))


class MaximumIterationStopper(Stopper):
    """Stops each trial after `max_iter` iterations."""

    def __init__(self, max_iter: int) -> None:
        self._max_iter = max_iter

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return result.get("training_iteration", 0) >= self._max_iter


class TimeoutStopper(Stopper):
    """Stops the experiment after `timeout` seconds."""

    def __init__(self, timeout: float) -> None:
        self._deadline = time.monotonic() + float(timeout)

    def stop_all(self) -> bool:
        """Whether the whole experiment should stop now."""
        return time.monotonic() >= self._deadline


class CombinedStopper(Stopper):
    """Stops when any of its stoppers does."""

    def __init__(self, *stoppers: Stopper) -> None:
        self._stoppers = stoppers

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return any(s(trial_id, result) for s in self._stoppers)

    def stop_all(self) -> bool:
        """Whether the whole experiment should stop now."""
        return any(s.stop_all() for s in self._stoppers)


class _DictStopper(Stopper):
    def __init__(self, criteria: dict[str, Any]) -> None:
        for k, v in criteria.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ValueError(f"stop criterion {k!r} must be a number, got {v!r}")
        self.criteria = dict(criteria)

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        for k, v in self.criteria.items():
            if k not in result:
                raise ValueError(f"stopping criterion {k!r} is not in the trial's result; it reported "
                                 f"{sorted(x for x in result if not x.startswith('__'))}")
            if result[k] >= v:
                return True
        return False


def as_stopper(stop: Any) -> Stopper | None:
    """The Stopper for a RunConfig.stop value (None for no criteria)."""
    if stop is None:
        return None
    if isinstance(stop, Stopper):
        return stop
    if isinstance(stop, dict):
        return _DictStopper(stop) if stop else None
    if callable(stop):
        return FunctionStopper(stop)
    raise ValueError(f"RunConfig.stop must be a dict, a function (trial_id, result) -> bool or a "
                     f"tune.Stopper, got {type(stop).__name__}")
