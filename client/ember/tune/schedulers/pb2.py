"""`PB2`, Population Based Bandits (Parker-Holder et al. 2020), with Ray Tune's arguments.

PBT's exploit step as it is (a trial in the bottom quantile takes a top trial's checkpoint and
config), but the explore step picks the continuous hyperparameters of `hyperparam_bounds` with a
GP bandit instead of random perturbation: every perturbation point adds a row (time, the trial's
hyperparameters, its score's improvement per time unit since its previous point); a Gaussian
process over those rows (scikit-learn's, an RBF kernel with noise, on inputs scaled to [0, 1] and
standardized targets) predicts the improvement of the next period, and the new hyperparameters
maximize its upper confidence bound (mean + `_KAPPA` x std) at the current time over random
candidates within the bounds. Hyperparameters in the bounds that a trial's config lacks are drawn
uniformly from the bounds when the trial is added.
"""
from __future__ import annotations

import copy
import random
import warnings
from typing import Any, Callable

from ..experiment.trial import Trial
from .pbt import PopulationBasedTraining
from .trial_scheduler import signed

__all__ = ["PB2"]

_KAPPA = 2.0  # the UCB's exploration weight
_CANDIDATES = 1000  # random points the acquisition is maximized over
_MAX_ROWS = 200  # the GP is fitted on the latest rows only (its cost grows as rows^3)

Path = tuple[str, ...]


def _flat_bounds(bounds: dict[str, Any], prefix: Path = ()) -> list[tuple[Path, float, float]]:
    """(key path, low, high) of every bound, nested dicts flattened; ValueError naming a bad one."""
    out: list[tuple[Path, float, float]] = []
    for key, b in bounds.items():
        path = (*prefix, key)
        if isinstance(b, dict):
            out += _flat_bounds(b, path)
            continue
        if not (isinstance(b, (list, tuple)) and len(b) == 2
                and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in b) and b[0] < b[1]):
            raise ValueError(f"hyperparam_bounds[{'/'.join(path)!r}] must be [low, high] with low < high, got {b!r}")
        out.append((path, float(b[0]), float(b[1])))
    return out


def _get(config: dict[str, Any], path: Path) -> Any:
    for key in path:
        if not isinstance(config, dict) or key not in config:
            return None
        config = config[key]
    return config


def _set(config: dict[str, Any], path: Path, value: float) -> None:
    for key in path[:-1]:
        config = config.setdefault(key, {})
    config[path[-1]] = value


def select_config(rows: list[tuple[float, list[float], float]], bounds: list[tuple[Path, float, float]],
                  t_now: float, rng: random.Random) -> list[float]:
    """The hyperparameters (one value per bound) that maximize the GP-UCB of the next period's
    improvement at time t_now, given rows of (time, hyperparameters, improvement); uniform
    random draws while there are fewer than two rows (the pure explore step)."""
    if len(rows) < 2:
        return [rng.uniform(lo, hi) for _, lo, hi in bounds]
    import numpy as np
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

    rows = rows[-_MAX_ROWS:]
    lows = np.array([lo for _, lo, _ in bounds])
    spans = np.array([hi - lo for _, lo, hi in bounds])
    times = np.array([r[0] for r in rows] + [t_now])
    t_lo, t_span = times.min(), max(times.max() - times.min(), 1e-9)
    x = np.array([[(r[0] - t_lo) / t_span, *((np.array(r[1]) - lows) / spans)] for r in rows])
    y = np.array([r[2] for r in rows])
    y = (y - y.mean()) / (y.std() or 1.0)
    d = len(bounds)
    kernel = ConstantKernel(1.0, (1e-2, 1e2)) * RBF(np.ones(d + 1), (1e-2, 1e2)) + WhiteKernel(0.1, (1e-5, 1e1))
    gp = GaussianProcessRegressor(kernel=kernel, normalize_y=False, random_state=rng.randrange(2**31))
    with warnings.catch_warnings():  # a dimension with no effect (often time) hits its length bound
        warnings.simplefilter("ignore", ConvergenceWarning)
        gp.fit(x, y)
    gen = np.random.default_rng(rng.randrange(2**31))
    cand = np.column_stack([np.full(_CANDIDATES, (t_now - t_lo) / t_span), gen.random((_CANDIDATES, d))])
    mean, std = gp.predict(cand, return_std=True)
    best = cand[int(np.argmax(mean + _KAPPA * std)), 1:]
    return [float(v) for v in lows + best * spans]


class PB2(PopulationBasedTraining):
    """PBT whose explore step is a GP bandit over `hyperparam_bounds` (Ray's `PB2`)."""

    def __init__(self, time_attr: str = "time_total_s", metric: str | None = None, mode: str | None = None,
                 perturbation_interval: float = 60.0, hyperparam_bounds: dict[str, Any] | None = None,
                 quantile_fraction: float = 0.25, log_config: bool = True, require_attrs: bool = True,
                 synch: bool = False, custom_explore_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None
                 ) -> None:
        if not hyperparam_bounds:
            raise ValueError("PB2 needs hyperparam_bounds: {name: [low, high], ...}")
        self._bounds = _flat_bounds(hyperparam_bounds)
        try:
            import sklearn  # noqa: F401
        except ImportError:
            raise ImportError("PB2 needs scikit-learn (pip install scikit-learn)") from None
        super().__init__(time_attr=time_attr, metric=metric, mode=mode, perturbation_interval=perturbation_interval,
                         hyperparam_mutations={"/".join(p): [lo, hi] for p, lo, hi in self._bounds},
                         quantile_fraction=quantile_fraction, custom_explore_fn=custom_explore_fn,
                         log_config=log_config, require_attrs=require_attrs, synch=synch)
        self._rows: list[tuple[float, list[float], float]] = []
        self._last: dict[str, tuple[float, float]] = {}  # trial -> (time, score) at its last point

    def on_trial_add(self, controller: Any, trial: Trial) -> None:
        super().on_trial_add(controller, trial)
        config = copy.deepcopy(trial.config)
        missing = [(p, lo, hi) for p, lo, hi in self._bounds if _get(config, p) is None]
        for p, lo, hi in missing:
            _set(config, p, self._rng.uniform(lo, hi))
        if missing:
            trial.set_config(config)

    def on_trial_result(self, controller: Any, trial: Trial, result: dict[str, Any]) -> str:
        state = self._state.get(trial.trial_id)
        before = state.last_perturbation_time if state is not None else None
        x = [_get(trial.config, p) for p, _, _ in self._bounds]  # the config this period ran with
        decision = super().on_trial_result(controller, trial, result)
        state = self._state.get(trial.trial_id)
        if state is None or before is None or self._metric not in result or \
                (state.last_perturbation_time == before and decision != self.PAUSE):
            return decision
        # a perturbation point: the period since the trial's previous point is one more GP row
        t, score = float(result[self._time_attr]), signed(result[self._metric], self._mode)
        if score is None:
            return decision
        prev = self._last.get(trial.trial_id)
        if prev is not None and t > prev[0] and all(isinstance(v, (int, float)) for v in x):
            self._rows.append((t, [float(v) for v in x], (score - prev[1]) / (t - prev[0])))
        if decision == self.PAUSE:  # exploited: its next period starts from the copied state
            self._last.pop(trial.trial_id, None)
        else:
            self._last[trial.trial_id] = (t, score)
        return decision

    _TAG = "pb2"

    def _explore(self, source: Trial) -> dict[str, Any]:
        """The source's config with the bounded hyperparameters the GP bandit picks now."""
        t_now = max((r[0] for r in self._rows), default=0.0)
        new_config = copy.deepcopy(source.config)
        for (p, _, _), v in zip(self._bounds, select_config(self._rows, self._bounds, t_now, self._rng),
                                strict=True):
            _set(new_config, p, v)
        if self._custom_explore_fn is not None:
            new_config = self._custom_explore_fn(new_config)
            if new_config is None:
                raise ValueError("custom_explore_fn must return the new config, got None")
        return new_config

    def debug_string(self) -> str:
        return f"PB2: {self._num_perturbations} perturbs, {len(self._rows)} observations"
