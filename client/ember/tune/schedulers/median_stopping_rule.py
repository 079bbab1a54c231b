"""`MedianStoppingRule` (Golovin et al. 2017, Google Vizier), with Ray Tune's arguments.

After `grace_period` (in `time_attr` units), a trial stops when its best result so far is worse
than the median of the other trials' running averages up to the same time, once at least
`min_samples_required` other trials have reported. With `hard_stop=False` it is paused instead;
`min_time_slice` spaces out the decisions for one trial.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..experiment.trial import Trial
from .trial_scheduler import FIFOScheduler, TrialScheduler, check_mode

__all__ = ["MedianStoppingRule"]


class MedianStoppingRule(FIFOScheduler):
    """Stops trials that do worse than the median of the others at the same point."""

    def __init__(self, time_attr: str = "time_total_s", metric: str | None = None, mode: str | None = None,
                 grace_period: float = 60.0, min_samples_required: int = 3, min_time_slice: float = 0,
                 hard_stop: bool = True) -> None:
        check_mode(mode)
        if not isinstance(grace_period, (int, float)) or grace_period < 0:
            raise ValueError(f"grace_period must be >= 0, got {grace_period!r}")
        if not isinstance(min_samples_required, int) or min_samples_required < 1:
            raise ValueError(f"min_samples_required must be an int >= 1, got {min_samples_required!r}")
        self._time_attr = time_attr
        self._metric = metric
        self._mode = mode
        self._grace_period = grace_period
        self._min_samples_required = min_samples_required
        self._min_time_slice = min_time_slice
        self._hard_stop = hard_stop
        self._results: dict[str, list[tuple[float, float]]] = {}  # trial_id -> [(time, reward)]
        self._last_decision_time: dict[str, float] = {}
        self._stopped: set[str] = set()
        self._completed: set[str] = set()

    def on_trial_add(self, controller: Any, trial: Trial) -> None:
        self._results.setdefault(trial.trial_id, [])

    def on_trial_result(self, controller: Any, trial: Trial, result: dict[str, Any]) -> str:
        tid = trial.trial_id
        if tid in self._stopped:
            return TrialScheduler.STOP
        t = result.get(self._time_attr)
        reward = self._reward(result)
        if t is None or reward is None:
            return TrialScheduler.CONTINUE
        self._results.setdefault(tid, []).append((float(t), reward))
        if t < self._grace_period:
            return TrialScheduler.CONTINUE
        last = self._last_decision_time.get(tid)
        if last is not None and t - last < self._min_time_slice:
            return TrialScheduler.CONTINUE
        self._last_decision_time[tid] = float(t)
        means = self._running_means(tid, float(t))
        if len(means) < self._min_samples_required:
            return TrialScheduler.CONTINUE
        median = float(np.median(means))
        best = max(r for _, r in self._results[tid])
        if best < median:
            if self._hard_stop:
                self._stopped.add(tid)
                return TrialScheduler.STOP
            return TrialScheduler.PAUSE
        return TrialScheduler.CONTINUE

    def _running_means(self, trial_id: str, t_max: float) -> list[float]:
        out = []
        for other, rows in self._results.items():
            if other == trial_id:
                continue
            vals = [r for t, r in rows if t <= t_max]
            if vals:
                out.append(float(np.mean(vals)))
        return out

    def on_trial_complete(self, controller: Any, trial: Trial, result: dict[str, Any]) -> None:
        self._completed.add(trial.trial_id)

    def on_trial_remove(self, controller: Any, trial: Trial) -> None:
        self._results.pop(trial.trial_id, None)

    def debug_string(self) -> str:
        return f"Using MedianStoppingRule: num_stopped={len(self._stopped)}"
