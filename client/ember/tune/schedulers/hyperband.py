"""`HyperBandScheduler` (Li et al. 2016): synchronous successive halving in brackets, Ray Tune's
arguments and defaults (`max_t=81`, `reduction_factor=3`).

Trials fill brackets in turn; bracket s (cycling from s_max down to 0) takes
n = ceil(s_max_1 / (s + 1) * eta**s) trials and first runs them for r = max_t * eta**-s units of
`time_attr`. A trial that reaches its bracket's milestone pauses until every live trial of the
bracket has; then the best 1/eta (at least one) continue to the next milestone (r * eta, at
most max_t) and the rest stop. Paused trials hold no resources and resume from their checkpoint.
Trials that are stopped while paused are stopped through `controller.stop_trial(trial)`.
"""
from __future__ import annotations

import math
from typing import Any

from ..experiment.trial import Trial
from .trial_scheduler import FIFOScheduler, TrialScheduler, check_mode

__all__ = ["HyperBandScheduler"]


class _HBBracket:
    """One bracket: its trials, the current milestone and the rewards recorded there."""

    def __init__(self, s: int, n0: int, r0: float, max_t: float, eta: float, stop_last_trials: bool) -> None:
        self.s, self.n0, self.max_t, self.eta = s, n0, max_t, eta
        self.milestone = min(max(r0, 1), max_t)
        self.trials: list[str] = []
        self.live: set[str] = set()
        self.recorded: dict[str, float] = {}
        self.stop_last_trials = stop_last_trials

    def filled(self) -> bool:
        return len(self.trials) >= self.n0

    def add(self, trial_id: str) -> None:
        self.trials.append(trial_id)
        self.live.add(trial_id)

    def waiting(self, trial_id: str) -> bool:
        """Has reached the milestone and waits for the others."""
        return trial_id in self.recorded

    def all_recorded(self) -> bool:
        return bool(self.live) and all(t in self.recorded for t in self.live)

    def halve(self) -> tuple[list[str], list[str]]:
        """(continue, stop) at the current milestone; moves to the next milestone."""
        ranked = sorted(self.live, key=lambda t: self.recorded[t], reverse=True)
        if self.milestone >= self.max_t:
            keep: list[str] = [] if self.stop_last_trials else ranked
        else:
            keep = ranked[:max(1, int(math.floor(len(ranked) / self.eta)))]
        stop = [t for t in ranked if t not in keep]
        self.live = set(keep)
        self.recorded = {}
        self.milestone = min(self.milestone * self.eta, self.max_t)
        return keep, stop


class HyperBandScheduler(FIFOScheduler):
    """Synchronous HyperBand: successive halving over brackets of different aggressiveness."""

    def __init__(self, time_attr: str = "training_iteration", metric: str | None = None,
                 mode: str | None = None, max_t: float = 81, reduction_factor: float = 3,
                 stop_last_trials: bool = True) -> None:
        if not isinstance(max_t, (int, float)) or max_t <= 0:
            raise ValueError(f"max_t must be > 0, got {max_t!r}")
        if not isinstance(reduction_factor, (int, float)) or reduction_factor <= 1:
            raise ValueError(f"reduction_factor must be > 1, got {reduction_factor!r}")
        check_mode(mode)
        self._time_attr = time_attr
        self._metric = metric
        self._mode = mode
        self._max_t = max_t
        self._eta = reduction_factor
        self._stop_last_trials = stop_last_trials
        self._s_max_1 = int(round(math.log(max_t) / math.log(reduction_factor))) + 1
        self._next_s = self._s_max_1 - 1
        self._brackets: list[_HBBracket] = []
        self._trial_bracket: dict[str, _HBBracket] = {}
        self._num_stopped = 0

    def _new_bracket(self) -> _HBBracket:
        s = self._next_s
        self._next_s = self._next_s - 1 if self._next_s > 0 else self._s_max_1 - 1
        n0 = int(math.ceil(self._s_max_1 / (s + 1) * self._eta ** s))
        r0 = self._max_t * self._eta ** (-s)
        b = _HBBracket(s, n0, r0, self._max_t, self._eta, self._stop_last_trials)
        self._brackets.append(b)
        return b

    def on_trial_add(self, controller: Any, trial: Trial) -> None:
        if trial.trial_id in self._trial_bracket:
            return
        current = self._brackets[-1] if self._brackets and not self._brackets[-1].filled() else None
        bracket = current or self._new_bracket()
        bracket.add(trial.trial_id)
        self._trial_bracket[trial.trial_id] = bracket

    def on_trial_result(self, controller: Any, trial: Trial, result: dict[str, Any]) -> str:
        bracket = self._trial_bracket.get(trial.trial_id)
        if bracket is None or trial.trial_id not in bracket.live:
            return TrialScheduler.STOP if bracket is not None else TrialScheduler.CONTINUE
        t = result.get(self._time_attr)
        reward = self._reward(result)
        if t is None or t < bracket.milestone:
            return TrialScheduler.CONTINUE
        bracket.recorded[trial.trial_id] = reward if reward is not None else float("-inf")
        return self._process(controller, bracket, trial)

    def _process(self, controller: Any, bracket: _HBBracket, trial: Trial | None) -> str:
        if not bracket.all_recorded():
            return TrialScheduler.PAUSE
        keep, stop = bracket.halve()
        self._num_stopped += len(stop)
        by_id = {t.trial_id: t for t in controller.get_trials()}
        for tid in stop:
            other = by_id.get(tid)
            if other is not None and other is not trial and other.status == Trial.PAUSED:
                controller.stop_trial(other)
        if trial is None:
            return TrialScheduler.NOOP
        return TrialScheduler.CONTINUE if trial.trial_id in keep else TrialScheduler.STOP

    def on_trial_complete(self, controller: Any, trial: Trial, result: dict[str, Any]) -> None:
        self._drop(controller, trial)

    def on_trial_error(self, controller: Any, trial: Trial) -> None:
        self._drop(controller, trial)

    def on_trial_remove(self, controller: Any, trial: Trial) -> None:
        self._drop(controller, trial)

    def _drop(self, controller: Any, trial: Trial) -> None:
        bracket = self._trial_bracket.get(trial.trial_id)
        if bracket is None or trial.trial_id not in bracket.live:
            return
        bracket.live.discard(trial.trial_id)
        bracket.recorded.pop(trial.trial_id, None)
        if bracket.all_recorded():  # the others were waiting for this one
            self._process(controller, bracket, None)

    def choose_trial_to_run(self, controller: Any) -> Trial | None:
        trials: list[Trial] = controller.get_trials()
        for t in trials:
            if t.status == Trial.PENDING:
                return t
        for t in trials:
            b = self._trial_bracket.get(t.trial_id)
            if t.status == Trial.PAUSED and (b is None or (t.trial_id in b.live and not b.waiting(t.trial_id))):
                return t
        return None

    def debug_string(self) -> str:
        return "Using HyperBand: " + "; ".join(
            f"bracket s={b.s}: {len(b.live)}/{b.n0} live, milestone={b.milestone:g}" for b in self._brackets)
