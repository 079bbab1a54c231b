"""`HyperOptSearch`: Tree-structured Parzen Estimator suggestions from the `hyperopt` package,
Ray Tune's interface.

The Tuner's param space (or `space=`, a dict of hyperopt expressions) becomes hyperopt
expressions: uniform/quantized/log floats, integers (`tune.randint`), categories (`tune.choice`);
grid_search and sample_from are refused naming the parameter. Each suggestion is one
`tpe.suggest` over the finished trials so far (random for the first `n_initial_points`), each
finished trial is recorded with its metric as hyperopt's loss (negated for mode "max").
Needs the `tune` extra (`pip install 'ember[tune]'`).
"""
from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from .sample import Categorical, Domain, Float, Integer
from .searcher import Searcher
from .variant_generator import find, flatten_dict, unflatten_dict

__all__ = ["HyperOptSearch"]


def _import_hyperopt() -> Any:
    try:
        import hyperopt
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError("HyperOptSearch needs the hyperopt package: pip install hyperopt "
                          "(or 'ember[tune]')") from e
    return hyperopt


def convert_domain(path: str, domain: Domain) -> Any:
    """The hyperopt expression for one Tune domain (ValueError for ones it cannot express)."""
    hp = _import_hyperopt().hp
    if isinstance(domain, Float) and domain.dist in ("uniform", "loguniform"):
        lower, upper = domain._bounds()
        lo, hi = float(lower), float(upper)
        if domain.dist == "loguniform":
            if domain.q:
                return hp.qloguniform(path, math.log(lo), math.log(hi), domain.q)
            return hp.loguniform(path, math.log(lo), math.log(hi))
        return hp.quniform(path, lo, hi, domain.q) if domain.q else hp.uniform(path, lo, hi)
    if isinstance(domain, Integer) and domain.dist == "uniform" and domain.q == 1:
        return hp.uniformint(path, domain.lower, domain.upper - 1)
    if isinstance(domain, Categorical):
        return hp.choice(path, list(domain.categories))
    raise ValueError(f"HyperOptSearch cannot search {path}: {domain!r} has no hyperopt equivalent here")


def convert_search_space(space: dict[str, Any]) -> dict[str, Any]:
    """{flattened key: hyperopt expression} for every domain of a Tune param space."""
    grids, _ = find(space)
    if grids:
        raise ValueError("HyperOptSearch does not support grid_search; use tune.choice")
    return {k: convert_domain(k, v) for k, v in flatten_dict(space).items() if isinstance(v, Domain)}


class HyperOptSearch(Searcher):
    """TPE suggestions from hyperopt (Ray's HyperOptSearch parameters)."""

    def __init__(self, space: dict[str, Any] | None = None, metric: str | None = None,
                 mode: str | None = None, points_to_evaluate: list[dict[str, Any]] | None = None,
                 n_initial_points: int = 20, random_state_seed: int | None = None,
                 gamma: float = 0.25) -> None:
        if points_to_evaluate:
            raise NotImplementedError("HyperOptSearch(points_to_evaluate=...) is not supported by Ember")
        hpo = _import_hyperopt()
        super().__init__(metric=metric, mode=mode)
        self._algo = functools.partial(hpo.tpe.suggest, n_startup_jobs=n_initial_points, gamma=gamma)
        self._rng = np.random.default_rng(random_state_seed)
        self._space: dict[str, Any] | None = None
        if isinstance(space, dict) and space:
            flat = flatten_dict(space)
            self._space = flat if not any(isinstance(v, Domain) for v in flat.values()) \
                else convert_search_space(space)
        self._trials: Any = hpo.Trials()
        self._domain: Any = None
        self._live: dict[str, Any] = {}
        if self._space is not None:
            self._domain = hpo.Domain(lambda spc: spc, self._space)

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any],
                              **spec: Any) -> bool:
        if self._domain is not None and (self._metric and self._mode):
            return False
        if metric and not self._metric:
            self._metric = metric
        if mode and not self._mode:
            self._mode = mode
        if self._space is None:
            self._space = convert_search_space(config or {})
            self._domain = _import_hyperopt().Domain(lambda spc: spc, self._space)
        return True

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        """One TPE suggestion over the trials finished so far."""
        hpo = _import_hyperopt()
        if self._domain is None or not (self._metric and self._mode):
            raise RuntimeError("HyperOptSearch has no metric/mode or search space: pass them to "
                               "HyperOptSearch(...) or to TuneConfig and Tuner(param_space=...)")
        ids = self._trials.new_trial_ids(1)
        self._trials.refresh()
        docs = self._algo(ids, self._domain, self._trials, int(self._rng.integers(2**31 - 1)))
        self._trials.insert_trial_docs(docs)
        self._trials.refresh()
        doc = self._trials.trials[-1]
        self._live[trial_id] = doc
        vals = {k: v[0] for k, v in doc["misc"]["vals"].items() if v}
        return unflatten_dict(dict(hpo.space_eval(self._space, vals)))

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                          error: bool = False) -> None:
        hpo = _import_hyperopt()
        doc = self._live.pop(trial_id, None)
        if doc is None:
            return
        value = None if result is None else result.get(self._metric or "")
        if error or not isinstance(value, (int, float)):
            doc["state"] = hpo.base.JOB_STATE_ERROR
        else:
            doc["state"] = hpo.base.JOB_STATE_DONE
            doc["result"] = {"loss": float(value) if self._mode == "min" else -float(value),
                             "status": hpo.STATUS_OK}
        self._trials.refresh()
