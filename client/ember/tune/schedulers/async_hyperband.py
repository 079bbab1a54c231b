"""ASHA (asynchronous successive halving, Li et al. 2018): `AsyncHyperBandScheduler` and its alias
`ASHAScheduler`, with Ray Tune's arguments and defaults.

Each bracket has rungs at `grace_period * reduction_factor**(k + s)` (up to `max_t`). When a trial
reaches a rung it has not been recorded at, its reward is compared with the
`1 - 1/reduction_factor` quantile of the rewards recorded there so far: below it, the trial
stops; otherwise it is recorded and goes on. Nothing waits for other trials, so a trial that
reaches a rung early is only compared with those that came before it. Trials stop at `max_t`
(`stop_last_trials`). With several `brackets`, a new trial joins bracket s with probability
proportional to exp(number of rungs of s).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..experiment.trial import Trial
from .trial_scheduler import FIFOScheduler, TrialScheduler, check_mode

__all__ = ["ASHAScheduler", "AsyncHyperBandScheduler"]


class _Bracket:
    """The rungs of one bracket: milestone → {trial_id: reward recorded there}."""

    def __init__(self, min_t: float, max_t: float, reduction_factor: float, s: int,
                 stop_last_trials: bool = True) -> None:
        self.rf = reduction_factor
        self.max_t = max_t
        self.stop_last_trials = stop_last_trials
        n_rungs = int(math.log(max_t / min_t) / math.log(reduction_factor) - s + 1 + 1e-9)
        # Highest milestone first: a trial is judged at the highest rung it has reached.
        self.rungs: list[tuple[float, dict[str, float]]] = [
            (min_t * reduction_factor ** (k + s), {}) for k in reversed(range(max(n_rungs, 0)))]

    def cutoff(self, recorded: dict[str, float]) -> float | None:
        if not recorded:
            return None
        return float(np.nanpercentile(list(recorded.values()), (1 - 1 / self.rf) * 100))

    def on_result(self, trial_id: str, cur_iter: float, reward: float | None) -> str:
        action = TrialScheduler.CONTINUE
        if cur_iter >= self.max_t and self.stop_last_trials:
            action = TrialScheduler.STOP
        for milestone, recorded in self.rungs:
            if cur_iter < milestone or trial_id in recorded:
                continue
            cutoff = self.cutoff(recorded)
            if reward is None:
                break
            if cutoff is not None and reward < cutoff:
                action = TrialScheduler.STOP
            recorded[trial_id] = reward
            break
        return action

    def debug_str(self) -> str:
        return " | ".join(f"t={m:g}: {len(r)} recorded, cutoff={self.cutoff(r)}" for m, r in self.rungs)


class AsyncHyperBandScheduler(FIFOScheduler):
    """Stops poorly performing trials early, asynchronously (ASHA)."""

    def __init__(self, time_attr: str = "training_iteration", metric: str | None = None,
                 mode: str | None = None, max_t: float = 100, grace_period: float = 1,
                 reduction_factor: float = 4, brackets: int = 1, stop_last_trials: bool = True) -> None:
        if not isinstance(max_t, (int, float)) or max_t <= 0:
            raise ValueError(f"max_t must be > 0, got {max_t!r}")
        if not isinstance(grace_period, (int, float)) or grace_period <= 0:
            raise ValueError(f"grace_period must be > 0, got {grace_period!r}")
        if grace_period > max_t:
            raise ValueError(f"grace_period ({grace_period}) must be <= max_t ({max_t})")
        if not isinstance(reduction_factor, (int, float)) or reduction_factor <= 1:
            raise ValueError(f"reduction_factor must be > 1, got {reduction_factor!r}")
        if not isinstance(brackets, int) or brackets < 1:
            raise ValueError(f"brackets must be an int >= 1, got {brackets!r}")
        check_mode(mode)
        self._time_attr = time_attr
        self._metric = metric
        self._mode = mode
        self._max_t = max_t
        self._brackets = [_Bracket(grace_period, max_t, reduction_factor, s, stop_last_trials)
                          for s in range(brackets)]
        self._trial_info: dict[str, _Bracket] = {}
        self._num_stopped = 0
        self._rng = np.random.default_rng()

    def on_trial_add(self, controller: Any, trial: Trial) -> None:
        if trial.trial_id in self._trial_info:
            return  # a resumed trial keeps its bracket
        sizes = np.array([len(b.rungs) for b in self._brackets], dtype=float)
        probs = np.exp(sizes - sizes.max())
        idx = int(self._rng.choice(len(self._brackets), p=probs / probs.sum()))
        self._trial_info[trial.trial_id] = self._brackets[idx]

    def on_trial_result(self, controller: Any, trial: Trial, result: dict[str, Any]) -> str:
        bracket = self._trial_info.get(trial.trial_id)
        if bracket is None:
            self.on_trial_add(controller, trial)
            bracket = self._trial_info[trial.trial_id]
        if self._time_attr not in result:
            return TrialScheduler.CONTINUE
        action = bracket.on_result(trial.trial_id, result[self._time_attr],
                                   self._reward(result))
        if action == TrialScheduler.STOP:
            self._num_stopped += 1
        return action

    def on_trial_complete(self, controller: Any, trial: Trial, result: dict[str, Any]) -> None:
        bracket = self._trial_info.pop(trial.trial_id, None)
        if bracket is not None and result and self._time_attr in result:
            bracket.on_result(trial.trial_id, result[self._time_attr],
                              self._reward(result))

    def on_trial_remove(self, controller: Any, trial: Trial) -> None:
        self._trial_info.pop(trial.trial_id, None)

    def debug_string(self) -> str:
        out = f"Using AsyncHyperBand: num_stopped={self._num_stopped}"
        return out + "".join(f"\nBracket: {b.debug_str()}" for b in self._brackets)


ASHAScheduler = AsyncHyperBandScheduler
