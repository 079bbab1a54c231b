"""`PopulationBasedTraining` (Jaderberg et al. 2017), asynchronous, with Ray Tune's arguments.

Every `perturbation_interval` (in `time_attr` units, after `burn_in_period`) a trial's latest
score is ranked against the population's. A trial in the bottom `quantile_fraction` *exploits*:
it takes the config and the latest checkpoint of a random trial in the top quantile, then
*explores*: each key of `hyperparam_mutations` is resampled with `resample_probability`, else
perturbed (a number multiplied by one of `perturbation_factors`, a list value moved to a
neighbour). The decision is recorded on the trial (`set_config`, `restore_checkpoint`) and the
trial is PAUSEd; the controller restarts it from that checkpoint with the new config.
"""
from __future__ import annotations

import copy
import math
import random
from typing import Any, Callable

from ..experiment.trial import Trial
from ..search.sample import Domain
from .trial_scheduler import FIFOScheduler, TrialScheduler, check_mode, signed

__all__ = ["PopulationBasedTraining", "explore"]


def explore(config: dict[str, Any], mutations: dict[str, Any], resample_probability: float,
            perturbation_factors: tuple[float, ...], custom_explore_fn: Callable[[dict[str, Any]], dict[str, Any]] | None,
            rng: random.Random) -> dict[str, Any]:
    """A perturbed copy of `config` (the pure explore step)."""
    new = copy.deepcopy(config)
    for key, spec in mutations.items():
        if isinstance(spec, dict):
            new[key] = explore(config.get(key, {}), spec, resample_probability, perturbation_factors,
                               None, rng)
            continue
        old = config.get(key)
        resample = rng.random() < resample_probability
        if isinstance(spec, (list, tuple)):
            values = list(spec)
            if resample or old not in values:
                new[key] = rng.choice(values)
            else:
                i = values.index(old) + rng.choice([-1, 1])
                new[key] = values[min(max(i, 0), len(values) - 1)]
        elif isinstance(spec, Domain) or callable(spec):
            if resample or not isinstance(old, (int, float)):
                new[key] = spec.sample() if isinstance(spec, Domain) else spec()
            else:
                factor = rng.choice(perturbation_factors)
                new[key] = int(old * factor) if isinstance(old, int) and not isinstance(old, bool) else old * factor
        else:
            raise ValueError(f"hyperparam_mutations[{key!r}] must be a list, a dict, a tune search space "
                             f"or a callable, got {type(spec).__name__}")
    if custom_explore_fn is not None:
        new = custom_explore_fn(new)
        if new is None:
            raise ValueError("custom_explore_fn must return the new config, got None")
    return new


class _PBTState:
    def __init__(self) -> None:
        self.last_score: float | None = None
        self.last_perturbation_time: float = 0.0


class PopulationBasedTraining(FIFOScheduler):
    """Exploit (copy a better trial's checkpoint and config) and explore (perturb) as trials run."""

    def __init__(self, time_attr: str = "time_total_s", metric: str | None = None, mode: str | None = None,
                 perturbation_interval: float = 60.0, burn_in_period: float = 0.0,
                 hyperparam_mutations: dict[str, Any] | None = None, quantile_fraction: float = 0.25,
                 resample_probability: float = 0.25,
                 perturbation_factors: tuple[float, ...] = (1.2, 0.8),
                 custom_explore_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                 log_config: bool = True, require_attrs: bool = True, synch: bool = False) -> None:
        check_mode(mode)
        if not hyperparam_mutations and custom_explore_fn is None:
            raise ValueError("PopulationBasedTraining needs hyperparam_mutations or custom_explore_fn")
        if not isinstance(perturbation_interval, (int, float)) or perturbation_interval <= 0:
            raise ValueError(f"perturbation_interval must be > 0, got {perturbation_interval!r}")
        if not 0 <= quantile_fraction <= 0.5:
            raise ValueError(f"quantile_fraction must be in [0, 0.5], got {quantile_fraction!r}")
        if synch:
            raise ValueError("PopulationBasedTraining(synch=True) is not implemented in Ember; use synch=False")
        for k, v in (hyperparam_mutations or {}).items():
            if not isinstance(v, (list, tuple, dict, Domain)) and not callable(v):
                raise ValueError(f"hyperparam_mutations[{k!r}] must be a list, a dict, a tune search space "
                                 f"or a callable, got {type(v).__name__}")
        self._time_attr = time_attr
        self._metric = metric
        self._mode = mode
        self._perturbation_interval = perturbation_interval
        self._burn_in_period = burn_in_period
        self._mutations = hyperparam_mutations or {}
        self._quantile_fraction = quantile_fraction
        self._resample_probability = resample_probability
        self._perturbation_factors = tuple(perturbation_factors)
        self._custom_explore_fn = custom_explore_fn
        self._log_config = log_config
        self._require_attrs = require_attrs
        self._state: dict[str, _PBTState] = {}
        self._num_perturbations = 0
        self._rng = random.Random()
        self.exploits: list[tuple[str, str]] = []  # (trial that exploited, trial it copied)

    def on_trial_add(self, controller: Any, trial: Trial) -> None:
        self._state.setdefault(trial.trial_id, _PBTState())

    def on_trial_result(self, controller: Any, trial: Trial, result: dict[str, Any]) -> str:
        if self._time_attr not in result or self._metric not in result:
            if self._require_attrs:
                missing = [a for a in (self._time_attr, self._metric) if a not in result]
                raise ValueError(f"PopulationBasedTraining needs {missing} in every result; trial "
                                 f"{trial.trial_id} reported keys {sorted(result)}")
            return TrialScheduler.CONTINUE
        state = self._state.setdefault(trial.trial_id, _PBTState())
        t = float(result[self._time_attr])
        if t < self._burn_in_period or t - state.last_perturbation_time < self._perturbation_interval:
            return TrialScheduler.CONTINUE
        state.last_score = signed(result[self._metric], self._mode)
        state.last_perturbation_time = t
        lower, upper = self._quantiles(controller)
        if trial not in lower:
            return TrialScheduler.CONTINUE
        candidates = [u for u in upper if u.checkpoint is not None and u.trial_id != trial.trial_id]
        if not candidates:
            return TrialScheduler.CONTINUE
        source = self._rng.choice(candidates)
        self._exploit(trial, source)
        return TrialScheduler.PAUSE

    _TAG = "perturbed"  # the experiment tag's mark of an exploit

    def _explore(self, source: Trial) -> dict[str, Any]:
        """The config a trial exploiting `source` continues with."""
        return explore(source.config, self._mutations, self._resample_probability,
                       self._perturbation_factors, self._custom_explore_fn, self._rng)

    def _exploit(self, trial: Trial, source: Trial) -> None:
        trial.set_config(self._explore(source))
        trial.set_experiment_tag(f"{trial.experiment_tag}@{self._TAG}[{source.trial_id}]")
        trial.restore_checkpoint = source.checkpoint
        src_state = self._state.get(source.trial_id)
        if src_state is not None:
            self._state[trial.trial_id].last_perturbation_time = src_state.last_perturbation_time
        self._num_perturbations += 1
        self.exploits.append((trial.trial_id, source.trial_id))

    def _quantiles(self, controller: Any) -> tuple[list[Trial], list[Trial]]:
        """(bottom, top) trials by their score at their last perturbation point."""
        scored: list[tuple[float, Trial]] = []
        for t in controller.get_trials():
            state = self._state.get(t.trial_id)
            if not t.is_finished and state is not None and state.last_score is not None:
                scored.append((state.last_score, t))
        if len(scored) <= 1:
            return [], []
        scored.sort(key=lambda pair: pair[0])
        ranked = [t for _, t in scored]
        n = min(int(math.ceil(len(ranked) * self._quantile_fraction)), len(ranked) // 2)
        if n == 0:
            return [], []
        return ranked[:n], ranked[-n:]

    def on_trial_complete(self, controller: Any, trial: Trial, result: dict[str, Any]) -> None:
        pass

    def on_trial_remove(self, controller: Any, trial: Trial) -> None:
        self._state.pop(trial.trial_id, None)

    def choose_trial_to_run(self, controller: Any) -> Trial | None:
        """Paused (exploited) trials first, so the population stays in step; then pending ones."""
        trials: list[Trial] = controller.get_trials()
        for t in trials:
            if t.status == Trial.PAUSED:
                return t
        for t in trials:
            if t.status == Trial.PENDING:
                return t
        return None

    def debug_string(self) -> str:
        return f"PopulationBasedTraining: {self._num_perturbations} perturbs"
