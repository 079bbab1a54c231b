"""`OptunaSearch`: suggestions from a real `optuna` study (TPE by default), Ray Tune's interface.

The Tuner's param space (or `space=`, a dict of optuna distributions, or a define-by-run function
`space(ot_trial) -> dict | None`) is turned into optuna distributions; each suggestion is an
`ask()` on the study, each finished trial a `tell()`; intermediate results are `report()`ed so
optuna's pruners see them. `points_to_evaluate` are enqueued first; with `evaluated_rewards`
they are added as finished trials instead. Needs the `tune` extra (`pip install ember[tune]`).
"""
from __future__ import annotations

from typing import Any, Callable

from .sample import Categorical, Domain, Float, Function, Integer
from .searcher import Searcher
from .variant_generator import find, flatten_dict, unflatten_dict

__all__ = ["OptunaSearch"]


def _import_optuna() -> Any:
    try:
        import optuna
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError("OptunaSearch needs optuna: pip install 'ember[tune]'") from e
    return optuna


def convert_domain(path: str, domain: Domain) -> Any:
    """The optuna distribution for one Tune domain (ValueError for ones optuna cannot express)."""
    ot = _import_optuna().distributions
    if isinstance(domain, Float):
        if domain.dist == "normal":
            raise ValueError(f"OptunaSearch cannot search {path}: optuna has no normal distribution (randn)")
        return ot.FloatDistribution(domain.lower, domain.upper, log=domain.dist == "loguniform",
                                    step=domain.q if domain.dist == "uniform" else None)
    if isinstance(domain, Integer):
        # Tune's randint excludes upper; optuna's IntDistribution includes it.
        high = domain.upper - 1 if domain.q == 1 else domain.upper
        return ot.IntDistribution(domain.lower, high, log=domain.dist == "loguniform",
                                  step=1 if domain.dist == "loguniform" else domain.q)
    if isinstance(domain, Categorical):
        return ot.CategoricalDistribution(domain.categories)
    if isinstance(domain, Function):
        raise ValueError(f"OptunaSearch cannot search {path}: sample_from has no optuna equivalent")
    raise ValueError(f"OptunaSearch cannot search {path}: unknown domain {domain!r}")


def convert_search_space(space: dict[str, Any]) -> dict[str, Any]:
    """{flattened key: optuna distribution} for every domain of a Tune param space."""
    grids, _ = find(space)
    if grids:
        raise ValueError("OptunaSearch does not support grid_search; use tune.choice")
    flat = flatten_dict(space)
    return {k: convert_domain(k, v) for k, v in flat.items() if isinstance(v, Domain)}


class OptunaSearch(Searcher):
    """Hyperparameter suggestions from optuna (TPESampler(seed=seed) unless `sampler` is given)."""

    def __init__(self, space: dict[str, Any] | Callable[[Any], dict[str, Any] | None] | None = None,
                 metric: str | None = None, mode: str | None = None,
                 points_to_evaluate: list[dict[str, Any]] | None = None, sampler: Any = None,
                 seed: int | None = None, evaluated_rewards: list[float] | None = None,
                 study_name: str | None = None, storage: Any = None) -> None:
        if isinstance(metric, (list, tuple)):
            raise ValueError("OptunaSearch: multi-objective metrics are not supported; give one metric")
        super().__init__(metric=metric, mode=mode)
        optuna = _import_optuna()
        self._sampler = sampler if sampler is not None else optuna.samplers.TPESampler(seed=seed)
        self._points = list(points_to_evaluate or [])
        self._rewards = list(evaluated_rewards or [])
        if self._rewards and len(self._rewards) != len(self._points):
            raise ValueError("evaluated_rewards must have one value per point in points_to_evaluate")
        self._define_by_run: Callable[[Any], Any] | None = None
        self._space: dict[str, Any] | None = None
        if callable(space):
            self._define_by_run = space
        elif isinstance(space, dict) and space:
            self._space = self._to_distributions(space)
        # study_name/storage: an Optuna RDB storage (a URL such as "sqlite:///study.db" or an
        # optuna.storages.BaseStorage) keeps the study's trials where other processes can read it.
        self._study_name, self._storage = study_name, storage
        self._study: Any = None
        self._ot_trials: dict[str, Any] = {}
        if self._space is not None or self._define_by_run is not None:
            self._setup_study()

    @staticmethod
    def _to_distributions(space: dict[str, Any]) -> dict[str, Any]:
        flat = flatten_dict(space)
        optuna = _import_optuna()
        if all(isinstance(v, optuna.distributions.BaseDistribution) for v in flat.values()):
            return flat
        return convert_search_space(space)

    def _setup_study(self) -> None:
        optuna = _import_optuna()
        if self._mode is None:
            return
        direction = "minimize" if self._mode == "min" else "maximize"
        self._study = optuna.create_study(sampler=self._sampler, direction=direction,
                                          study_name=self._study_name, storage=self._storage)
        for i, point in enumerate(self._points):
            flat = flatten_dict(point)
            if self._rewards:
                self._study.add_trial(optuna.trial.create_trial(
                    params=flat, distributions={k: self._space[k] for k in flat} if self._space else {},
                    value=self._rewards[i]))
            else:
                self._study.enqueue_trial(flat)

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any],
                              **spec: Any) -> bool:
        if self._study is not None and self._space:
            return False
        if metric and not self._metric:
            self._metric = metric
        if mode and not self._mode:
            self._mode = mode
        if self._space is None and self._define_by_run is None:
            self._space = convert_search_space(config or {})
        self._setup_study()
        return True

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if self._study is None:
            raise RuntimeError("OptunaSearch has no metric/mode or search space: pass them to "
                               "OptunaSearch(...) or to TuneConfig and Tuner(param_space=...)")
        if self._define_by_run is not None:
            ot_trial = self._study.ask()
            constants = self._define_by_run(ot_trial) or {}
            params = {**ot_trial.params, **constants}
        else:
            ot_trial = self._study.ask(fixed_distributions=self._space)
            params = dict(ot_trial.params)
        self._ot_trials[trial_id] = ot_trial
        return unflatten_dict(params)

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        ot_trial = self._ot_trials.get(trial_id)
        if ot_trial is None or self._metric not in result:
            return
        step = result.get("training_iteration", 0)
        ot_trial.report(float(result[self._metric]), step)

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                          error: bool = False) -> None:
        optuna = _import_optuna()
        ot_trial = self._ot_trials.pop(trial_id, None)
        if ot_trial is None:
            return
        value = None if result is None or self._metric is None else result.get(self._metric)
        if error or value is None:
            self._study.tell(ot_trial, state=optuna.trial.TrialState.FAIL)
        else:
            self._study.tell(ot_trial, float(value))

    def add_evaluated_point(self, parameters: dict[str, Any], value: float, error: bool = False,
                            pruned: bool = False, intermediate_values: list[float] | None = None) -> None:
        optuna = _import_optuna()
        flat = flatten_dict(parameters)
        state = (optuna.trial.TrialState.FAIL if error else optuna.trial.TrialState.PRUNED if pruned
                 else optuna.trial.TrialState.COMPLETE)
        self._study.add_trial(optuna.trial.create_trial(
            params=flat, distributions={k: self._space[k] for k in flat} if self._space else {},
            value=None if state != optuna.trial.TrialState.COMPLETE else value,
            intermediate_values=dict(enumerate(intermediate_values or [])), state=state))

    @property
    def study(self) -> Any:
        """The optuna study (e.g. `search.study.best_params`)."""
        return self._study
