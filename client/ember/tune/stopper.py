"""Stop criteria (`RunConfig(stop=...)`): a dict (`{"training_iteration": 10, "mean_accuracy":
0.98}`: a trial stops when any result value reaches its threshold), a function
`(trial_id, result) -> bool`, or a `Stopper` (which can also stop the whole experiment).
"""
from __future__ import annotations

import collections
import statistics
import time
from typing import Any, Callable

__all__ = ["CombinedStopper", "FunctionStopper", "MaximumIterationStopper", "Stopper",
           "TimeoutStopper", "TrialPlateauStopper", "as_stopper"]


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
        done: bool = result.get("training_iteration", 0) >= self._max_iter
        return done


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


class TrialPlateauStopper(Stopper):
    """Stops a trial once its `metric` plateaus: the (population) standard deviation of its last
    `num_results` values is below `std`, after at least `grace_period` results and, when
    `metric_threshold` is given, once the metric is at least that good for `mode`."""

    def __init__(self, metric: str, std: float = 0.01, num_results: int = 4, grace_period: int = 4,
                 metric_threshold: float | None = None, mode: str | None = None) -> None:
        if metric_threshold is not None and mode not in ("min", "max"):
            raise ValueError("TrialPlateauStopper with a metric_threshold needs mode 'min' or 'max', "
                             f"got {mode!r}")
        if num_results < 1:
            raise ValueError(f"TrialPlateauStopper.num_results must be >= 1, got {num_results!r}")
        self._metric, self._std, self._num_results = metric, float(std), int(num_results)
        self._grace_period, self._threshold, self._mode = int(grace_period), metric_threshold, mode
        self._values: dict[str, collections.deque[float]] = {}
        self._seen: dict[str, int] = {}

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        value = result.get(self._metric)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ValueError(f"TrialPlateauStopper: metric {self._metric!r} is not a number in the "
                             f"trial's result (got {value!r})")
        values = self._values.setdefault(trial_id, collections.deque(maxlen=self._num_results))
        values.append(float(value))
        self._seen[trial_id] = self._seen.get(trial_id, 0) + 1
        if self._seen[trial_id] < self._grace_period or len(values) < self._num_results:
            return False
        if self._threshold is not None and (value > self._threshold if self._mode == "min"
                                            else value < self._threshold):
            return False
        return statistics.pstdev(values) < self._std


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
