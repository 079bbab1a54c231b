"""`BayesOptSearch`: Gaussian-process suggestions from the `bayesian-optimization` package
(`bayes_opt`), Ray Tune's interface.

Only continuous parameters can be searched (`tune.uniform`, or `(lower, upper)` tuples in
`space=`), as in Ray; everything else in the param space is refused naming the parameter. Each
suggestion is `optimizer.suggest()`; each finished trial is `register()`ed with its metric
(negated for mode "min": the optimizer maximises). `points_to_evaluate` are handed out first.
Needs the `tune` extra (`pip install 'ember[tune]'`).
"""
from __future__ import annotations

from typing import Any

from .sample import Domain, Float
from .searcher import Searcher
from .variant_generator import find, flatten_dict, unflatten_dict

__all__ = ["BayesOptSearch"]


def _import_bayes_opt() -> Any:
    try:
        import bayes_opt
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError("BayesOptSearch needs the bayesian-optimization package: "
                          "pip install bayesian-optimization (or 'ember[tune]')") from e
    return bayes_opt


def convert_search_space(space: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """{flattened key: (lower, upper)} for a Tune param space of uniform floats."""
    grids, _ = find(space)
    if grids:
        raise ValueError("BayesOptSearch does not support grid_search: it searches continuous ranges")
    out: dict[str, tuple[float, float]] = {}
    for k, v in flatten_dict(space).items():
        if not isinstance(v, Domain):
            continue
        if not isinstance(v, Float) or v.dist != "uniform" or v.q is not None:
            raise ValueError(f"BayesOptSearch can only search uniform floats (tune.uniform); {k} is {v!r}")
        lower, upper = v._bounds()
        out[k] = (float(lower), float(upper))
    return out


class BayesOptSearch(Searcher):
    """Bayesian optimisation of continuous parameters (Ray's BayesOptSearch parameters)."""

    def __init__(self, space: dict[str, Any] | None = None, metric: str | None = None,
                 mode: str | None = None, points_to_evaluate: list[dict[str, Any]] | None = None,
                 utility_kwargs: dict[str, Any] | None = None, random_state: int = 42,
                 random_search_steps: int = 10, verbose: int = 0, patience: int = 5,
                 skip_duplicate: bool = True, analysis: Any = None) -> None:
        for name, value in (("utility_kwargs", utility_kwargs), ("analysis", analysis)):
            if value is not None:
                raise NotImplementedError(f"BayesOptSearch({name}=...) is not supported by Ember")
        _import_bayes_opt()
        super().__init__(metric=metric, mode=mode)
        self._points = [flatten_dict(p) for p in points_to_evaluate or []]
        self._random_state, self._verbose = random_state, verbose
        self._random_steps = int(random_search_steps)
        self._space: dict[str, tuple[float, float]] | None = None
        if isinstance(space, dict) and space:
            flat = flatten_dict(space)
            bounds = {k: (float(v[0]), float(v[1])) for k, v in flat.items() if isinstance(v, (tuple, list))}
            self._space = bounds if len(bounds) == len(flat) else convert_search_space(space)
        self._optimizer: Any = None
        self._live: dict[str, dict[str, float]] = {}
        self._suggested = 0
        if self._space is not None and self._mode is not None:
            self._setup()

    def _setup(self) -> None:
        bayes_opt = _import_bayes_opt()
        self._optimizer = bayes_opt.BayesianOptimization(
            f=None, pbounds=self._space, random_state=self._random_state, verbose=self._verbose,
            allow_duplicate_points=True)

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any],
                              **spec: Any) -> bool:
        if self._optimizer is not None:
            return False
        if metric and not self._metric:
            self._metric = metric
        if mode and not self._mode:
            self._mode = mode
        if self._space is None:
            self._space = convert_search_space(config or {})
        self._setup()
        return True

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        """The next point: a point to evaluate, a random one for the first `random_search_steps`
        suggestions, then the optimizer's."""
        if self._optimizer is None:
            raise RuntimeError("BayesOptSearch has no metric/mode or search space: pass them to "
                               "BayesOptSearch(...) or to TuneConfig and Tuner(param_space=...)")
        if self._points:
            params = {k: float(v) for k, v in self._points.pop(0).items()}
        elif self._suggested < self._random_steps or not len(self._optimizer.space):
            params = self._optimizer.space.array_to_params(self._optimizer.space.random_sample())
        else:
            params = self._optimizer.suggest()
        self._suggested += 1
        params = {k: float(v) for k, v in params.items()}
        self._live[trial_id] = params
        return unflatten_dict(dict(params))

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                          error: bool = False) -> None:
        params = self._live.pop(trial_id, None)
        value = None if result is None else result.get(self._metric or "")
        if params is None or error or not isinstance(value, (int, float)):
            return
        self._optimizer.register(params=params, target=float(value) if self._mode == "max" else -float(value))

    @property
    def optimizer(self) -> Any:
        """The bayes_opt optimizer (e.g. `search.optimizer.max`)."""
        return self._optimizer
