"""Search algorithms as the controller sees them: `BasicVariantGenerator` (random sampling and
grid search over the param space, Tune's default) and `SearchGenerator` (any `Searcher`, asked
for up to `num_samples` suggestions). Both hand out one config per `next_config(trial_id)` call
and pickle whole, so the experiment state can hold them for `Tuner.restore`.

Semantics as in Ray: every grid combination is crossed with each of `num_samples` samples
(samples outer, grid inner); `points_to_evaluate` are the first samples (a partial point has its
other keys sampled) and raise `num_samples` when there are more of them.
"""
from __future__ import annotations

import copy
from typing import Any

import numpy as np

from .sample import Domain
from .searcher import Searcher
from .variant_generator import Path, find, grid_variants, merge_dicts, resolve, set_path, unflatten_dict

__all__ = ["BasicVariantGenerator", "SearchAlgorithm", "SearchGenerator"]


class SearchAlgorithm:
    """What the controller drives: configs out, results in."""

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any],
                              **spec: Any) -> bool:
        return True

    def next_config(self, trial_id: str) -> dict[str, Any] | None:
        """A config for a new trial, or None when there is none right now."""
        raise NotImplementedError

    def is_finished(self) -> bool:
        raise NotImplementedError

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        pass

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                          error: bool = False) -> None:
        pass

    @property
    def total_samples(self) -> int | None:
        return None


class BasicVariantGenerator(SearchAlgorithm):
    """Random sampling and grid search over the param space.

    `max_concurrent` (0: no limit) caps trials live at once; `constant_grid_search` samples the
    random values once per sample and reuses them for every grid point; `random_state` seeds it."""

    def __init__(self, points_to_evaluate: list[dict[str, Any]] | None = None, max_concurrent: int = 0,
                 constant_grid_search: bool = False, random_state: Any = None) -> None:
        if points_to_evaluate is not None and not (isinstance(points_to_evaluate, list) and all(
                isinstance(p, dict) for p in points_to_evaluate)):
            raise ValueError("points_to_evaluate must be a list of dicts")
        if not isinstance(max_concurrent, int) or max_concurrent < 0:
            raise ValueError(f"max_concurrent must be an int >= 0, got {max_concurrent!r}")
        self._points = [unflatten_dict(p) if any("/" in k for k in p) else p
                        for p in copy.deepcopy(points_to_evaluate or [])]
        self._max_concurrent = max_concurrent
        self._constant_grid = constant_grid_search
        self._rng = random_state if isinstance(random_state, np.random.Generator) else \
            np.random.default_rng(random_state)
        self._space: dict[str, Any] = {}
        self._num_samples = 1
        self._grid: list[dict[str, Any]] = [{}]
        self._sample = 0
        self._grid_index = 0
        self._constants: dict[Path, Any] | None = None
        self._live: set[str] = set()

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any],
                              **spec: Any) -> bool:
        self._space = copy.deepcopy(config or {})
        self._num_samples = max(int(spec.get("num_samples", 1)), len(self._points))
        self._grid = list(grid_variants(self._space))
        return True

    @property
    def total_samples(self) -> int:
        return self._num_samples * len(self._grid)

    def is_finished(self) -> bool:
        return self._sample >= self._num_samples

    def next_config(self, trial_id: str) -> dict[str, Any] | None:
        if self.is_finished():
            return None
        if self._max_concurrent and len(self._live) >= self._max_concurrent:
            return None
        variant = self._grid[self._grid_index]
        if self._sample < len(self._points):
            variant = merge_dicts(variant, self._points[self._sample])
        if self._constant_grid:
            if self._grid_index == 0:
                self._constants = self._sample_domains(self._space)
            for path, value in (self._constants or {}).items():
                set_path(variant, path, value)
        config = resolve(variant, self._rng)
        self._grid_index += 1
        if self._grid_index >= len(self._grid):
            self._grid_index = 0
            self._sample += 1
        self._live.add(trial_id)
        return config

    def _sample_domains(self, space: dict[str, Any]) -> dict[Path, Any]:
        _, domains = find(space)
        return {path: dom.sample(random_state=self._rng) for path, dom in domains
                if isinstance(dom, Domain)}

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                          error: bool = False) -> None:
        self._live.discard(trial_id)


class SearchGenerator(SearchAlgorithm):
    """Drives a `Searcher`: asks it for up to `num_samples` configs (merged over the param space's
    constant keys), forwards results, and is finished when that many were handed out or the
    searcher says FINISHED."""

    def __init__(self, searcher: Searcher) -> None:
        if not isinstance(searcher, Searcher):
            raise TypeError(f"search_alg must be a Searcher or a SearchAlgorithm, got {type(searcher).__name__}")
        self.searcher = searcher
        self._space: dict[str, Any] = {}
        self._num_samples = 1
        self._count = 0
        self._finished = False

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any],
                              **spec: Any) -> bool:
        grids, _ = find(config or {})
        if grids:
            raise ValueError(f"grid_search is only supported by the default search algorithm, not by "
                             f"{type(self.searcher).__name__} (found at {'/'.join(map(str, grids[0][0]))})")
        self._space = copy.deepcopy(config or {})
        self._num_samples = int(spec.get("num_samples", 1))
        self.searcher.set_search_properties(metric, mode, self._space, **spec)
        return True

    @property
    def total_samples(self) -> int:
        return self._num_samples

    def is_finished(self) -> bool:
        return self._finished or self._count >= self._num_samples

    def next_config(self, trial_id: str) -> dict[str, Any] | None:
        if self.is_finished():
            return None
        suggestion = self.searcher.suggest(trial_id)
        if suggestion == Searcher.FINISHED:
            self._finished = True
            return None
        if suggestion is None:
            return None
        if isinstance(suggestion, str):
            raise TypeError(f"{type(self.searcher).__name__}.suggest returned {suggestion!r}: "
                            "a searcher returns a config dict, None or Searcher.FINISHED")
        self._count += 1
        # The searcher's values win; anything it left as a domain is sampled at random.
        return resolve(merge_dicts(self._space, suggestion), np.random.default_rng())

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        self.searcher.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                          error: bool = False) -> None:
        self.searcher.on_trial_complete(trial_id, result=result, error=error)
