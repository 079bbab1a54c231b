"""`TrialScheduler`: the interface of early-stopping / resource policies (Ray Tune's), and
`FIFOScheduler`, the default that runs every trial to its end.

A scheduler is a pure policy: the controller tells it about trials (`on_trial_add`,
`on_trial_result`, `on_trial_complete`, `on_trial_error`, `on_trial_remove`) and asks it which
waiting trial to run next (`choose_trial_to_run`). `on_trial_result` answers CONTINUE, PAUSE or
STOP. The first argument of each call is the controller, of which schedulers use only
`get_trials()` and, to stop a trial other than the one reporting, `stop_trial(trial)` (any
object with those methods will do; `TrialList` is the smallest).
"""
from __future__ import annotations

from typing import Any, Iterable

from ..experiment.trial import Trial

__all__ = ["FIFOScheduler", "TrialList", "TrialScheduler"]


class TrialList:
    """The least a scheduler needs of a controller: the trials, in creation order."""

    def __init__(self, trials: Iterable[Trial] = ()) -> None:
        self.trials = list(trials)

    def get_trials(self) -> list[Trial]:
        """The trials."""
        return self.trials

    def stop_trial(self, trial: Trial) -> None:
        """Marks a trial TERMINATED."""
        trial.set_status(Trial.TERMINATED)


def check_mode(mode: str | None) -> None:
    """Raises ValueError unless mode is None, 'min' or 'max'."""
    if mode is not None and mode not in ("min", "max"):
        raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")


class TrialScheduler:
    """Decides, result by result, whether a trial continues, pauses or stops."""

    CONTINUE = "CONTINUE"
    PAUSE = "PAUSE"
    STOP = "STOP"
    NOOP = "NOOP"

    _metric: str | None = None
    _mode: str | None = None
    _supports_buffered_results = True

    @property
    def metric(self) -> str | None:
        """The metric the scheduler compares."""
        return self._metric

    @property
    def mode(self) -> str | None:
        """'min' or 'max'."""
        return self._mode

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        """Takes the Tuner's metric/mode where the scheduler has none of its own. A scheduler given
        a different metric or mode than the TuneConfig raises ValueError."""
        check_mode(mode)
        if self._metric and metric and self._metric != metric:
            raise ValueError(f"{type(self).__name__} was given metric={self._metric!r} but TuneConfig has "
                             f"metric={metric!r}; set it in one place")
        if self._mode and mode and self._mode != mode:
            raise ValueError(f"{type(self).__name__} was given mode={self._mode!r} but TuneConfig has "
                             f"mode={mode!r}; set it in one place")
        self._metric = self._metric or metric
        self._mode = self._mode or mode
        return True

    def _reward(self, result: dict[str, Any]) -> float | None:
        """The result's metric as a reward to maximize (None without a metric or a numeric value)."""
        return signed(None if self._metric is None else result.get(self._metric), self._mode)

    def requires_metric(self) -> bool:
        """Whether results must carry `metric` (all but FIFO)."""
        return True

    def on_trial_add(self, controller: Any, trial: Trial) -> None:
        """A trial was created."""
        pass

    def on_trial_error(self, controller: Any, trial: Trial) -> None:
        """A trial ended in ERROR (after its retries)."""
        pass

    def on_trial_result(self, controller: Any, trial: Trial, result: dict[str, Any]) -> str:
        """A trial reported `result`: CONTINUE, PAUSE or STOP."""
        return TrialScheduler.CONTINUE

    def on_trial_complete(self, controller: Any, trial: Trial, result: dict[str, Any]) -> None:
        """A trial ended normally (or was stopped) with its last result."""
        pass

    def on_trial_remove(self, controller: Any, trial: Trial) -> None:
        """A trial was removed without completing."""
        pass

    def choose_trial_to_run(self, controller: Any) -> Trial | None:
        """The next trial to start or resume: pending ones first, then paused ones."""
        trials: list[Trial] = controller.get_trials()
        for t in trials:
            if t.status == Trial.PENDING:
                return t
        for t in trials:
            if t.status == Trial.PAUSED:
                return t
        return None

    def debug_string(self) -> str:
        """A one-line summary for logs."""
        return type(self).__name__


class FIFOScheduler(TrialScheduler):
    """Runs trials in the order they were created, each to its end."""

    def __init__(self) -> None:
        pass

    def requires_metric(self) -> bool:
        """FIFO itself ignores metrics; the schedulers built on it (ASHA, PBT, ...) need one."""
        return type(self) is not FIFOScheduler


def signed(value: Any, mode: str | None) -> float | None:
    """A metric value as a reward to maximize (negated for mode "min")."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if mode == "max" else -float(value)
