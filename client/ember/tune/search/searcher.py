"""`Searcher`: the interface of suggestion-based search algorithms (Ray Tune's), and two wrappers:
`ConcurrencyLimiter` (at most N suggestions live at once) and `Repeater` (each suggestion run N
times, the searcher told the mean). Pure policies: trial ids and result dicts in, configs out.
"""
from __future__ import annotations

import copy
import pickle
from typing import Any

import numpy as np

__all__ = ["ConcurrencyLimiter", "Repeater", "Searcher"]


class Searcher:
    """Suggests configs (`suggest(trial_id)`), learns from results. `suggest` returns a config
    dict, None ("nothing right now, ask again later") or `Searcher.FINISHED`."""

    FINISHED = "FINISHED"

    def __init__(self, metric: str | None = None, mode: str | None = None) -> None:
        if mode is not None and mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")
        self._metric = metric
        self._mode = mode

    @property
    def metric(self) -> str | None:
        """The metric the searcher optimizes."""
        return self._metric

    @property
    def mode(self) -> str | None:
        """'min' or 'max'."""
        return self._mode

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any],
                              **spec: Any) -> bool:
        """Gives the searcher the Tuner's metric/mode/param_space when it has none of its own.
        Returns False when the searcher already has them (Ray's contract)."""
        if self._metric or self._mode:
            return False
        if metric:
            self._metric = metric
        if mode:
            self._mode = mode
        return True

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        """A config for trial `trial_id`, None (ask again later) or Searcher.FINISHED."""
        raise NotImplementedError

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        """An intermediate result of a trial this searcher suggested."""

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                          error: bool = False) -> None:
        """The trial ended (its last result, or error=True)."""

    def add_evaluated_point(self, parameters: dict[str, Any], value: float, error: bool = False,
                            pruned: bool = False, intermediate_values: list[float] | None = None) -> None:
        """Tells the searcher about a point evaluated outside Tune."""
        raise NotImplementedError(f"{type(self).__name__} does not take evaluated points")

    def get_state(self) -> dict[str, Any]:
        """The searcher's state (for save)."""
        return dict(self.__dict__)

    def set_state(self, state: dict[str, Any]) -> None:
        """Restores get_state()'s output."""
        self.__dict__.update(state)

    def save(self, checkpoint_path: str) -> None:
        """Writes the searcher's state to a file."""
        with open(checkpoint_path, "wb") as f:
            pickle.dump(self.get_state(), f)

    def restore(self, checkpoint_path: str) -> None:
        """Loads state written by save()."""
        with open(checkpoint_path, "rb") as f:
            self.set_state(pickle.load(f))


class ConcurrencyLimiter(Searcher):
    """Lets at most `max_concurrent` suggested trials run at once; with `batch=True` waits for the
    whole batch to finish before suggesting again."""

    def __init__(self, searcher: Searcher, max_concurrent: int, batch: bool = False) -> None:
        if not isinstance(max_concurrent, int) or max_concurrent < 1:
            raise ValueError(f"ConcurrencyLimiter: max_concurrent must be an int >= 1, got {max_concurrent!r}")
        self.searcher = searcher
        self.max_concurrent = max_concurrent
        self.batch = batch
        self.live_trials: set[str] = set()
        self.num_unfinished_live_trials = 0
        self._batch_results: dict[str, tuple[dict[str, Any] | None, bool]] = {}
        super().__init__(metric=searcher.metric, mode=searcher.mode)

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any],
                              **spec: Any) -> bool:
        ok = self.searcher.set_search_properties(metric, mode, config, **spec)
        self._metric, self._mode = self.searcher.metric, self.searcher.mode
        return ok

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        # In batch mode finished trials stay in live_trials until the whole batch is done.
        """A config for trial `trial_id`, None (ask again later) or Searcher.FINISHED."""
        if len(self.live_trials) >= self.max_concurrent:
            return None
        suggestion = self.searcher.suggest(trial_id)
        if isinstance(suggestion, dict):
            self.live_trials.add(trial_id)
            self.num_unfinished_live_trials += 1
        return suggestion

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        if trial_id in self.live_trials:
            self.searcher.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                          error: bool = False) -> None:
        if trial_id not in self.live_trials:
            return
        self.num_unfinished_live_trials -= 1
        if not self.batch:
            self.live_trials.discard(trial_id)
            self.searcher.on_trial_complete(trial_id, result=result, error=error)
            return
        self._batch_results[trial_id] = (result, error)
        if self.num_unfinished_live_trials == 0:
            for tid, (res, err) in self._batch_results.items():
                self.searcher.on_trial_complete(tid, result=res, error=err)
            self._batch_results = {}
            self.live_trials.clear()

    def add_evaluated_point(self, *args: Any, **kwargs: Any) -> None:
        """Tells the searcher about a point evaluated outside Tune."""
        self.searcher.add_evaluated_point(*args, **kwargs)


class Repeater(Searcher):
    """Runs every suggestion `repeat` times (adding `__trial_index__` to the config when
    `set_index`), and tells the wrapped searcher the mean of the metric over the repeats."""

    def __init__(self, searcher: Searcher, repeat: int = 1, set_index: bool = True) -> None:
        if not isinstance(repeat, int) or repeat < 1:
            raise ValueError(f"Repeater: repeat must be an int >= 1, got {repeat!r}")
        self.searcher = searcher
        self.repeat = repeat
        self._set_index = set_index
        self._current: dict[str, Any] | None = None  # group being handed out
        self._groups: dict[str, dict[str, Any]] = {}  # group id -> {"config", "members", "results"}
        self._trial_group: dict[str, str] = {}
        super().__init__(metric=searcher.metric, mode=searcher.mode)

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any],
                              **spec: Any) -> bool:
        ok = self.searcher.set_search_properties(metric, mode, config, **spec)
        self._metric, self._mode = self.searcher.metric, self.searcher.mode
        return ok

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        """A config for trial `trial_id`, None (ask again later) or Searcher.FINISHED."""
        if self._current is None or len(self._current["members"]) >= self.repeat:
            config = self.searcher.suggest(trial_id)
            if not isinstance(config, dict):
                return config
            self._current = {"id": trial_id, "config": config, "members": [], "results": {}}
            self._groups[trial_id] = self._current
        group = self._current
        index = len(group["members"])
        group["members"].append(trial_id)
        self._trial_group[trial_id] = group["id"]
        trial_config: dict[str, Any] = copy.deepcopy(group["config"])
        if self._set_index:
            trial_config["__trial_index__"] = index
        return trial_config

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        """Intermediate results are not forwarded (the searcher learns from the mean only)."""

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                          error: bool = False) -> None:
        gid = self._trial_group.get(trial_id)
        if gid is None:
            return
        group = self._groups[gid]
        metric = self.metric
        group["results"][trial_id] = None if error or result is None or metric is None else result.get(metric)
        if len(group["results"]) < self.repeat:
            return
        scores = [v for v in group["results"].values() if v is not None]
        del self._groups[gid]
        if not scores or metric is None:  # no metric: no scores either
            self.searcher.on_trial_complete(gid, result=None, error=True)
            return
        self.searcher.on_trial_complete(gid, result={metric: float(np.mean(scores))})
