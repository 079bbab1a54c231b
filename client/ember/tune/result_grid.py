"""`ResultGrid`: the results of a `Tuner.fit()`, one `Result` per trial (Ray Tune's interface).

    results = tuner.fit()
    best = results.get_best_result(metric="loss", mode="min")
    best.config, best.metrics, best.checkpoint, best.metrics_dataframe
    results.get_dataframe(); results.errors; len(results); results[0]
"""
from __future__ import annotations

import math
from typing import Any, Iterator

from ember.train import Result

from .experiment.trial import Trial
from .search.variant_generator import flatten_dict

__all__ = ["ResultGrid"]


def results_frame(rows: list[dict[str, Any]]) -> Any:
    """Rows of results as a pandas DataFrame (nested keys flattened); None without pandas."""
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - depends on the install
        return None
    return pd.DataFrame([flatten_dict({k: v for k, v in r.items() if not k.startswith("__")}) for r in rows])


class TrialResult(Result):
    """A trial's Result whose `metrics_dataframe` is built on first access (pandas is imported
    only by runs that read it)."""

    def __init__(self, trial: Trial, filesystem: Any) -> None:
        self._history = list(trial.metric_history)
        self._frame: Any = None
        super().__init__(metrics=dict(trial.last_result), checkpoint=trial.checkpoint, error=trial.error,
                         path=trial.path, metrics_dataframe=None, best_checkpoints=list(trial.checkpoints),
                         filesystem=filesystem, _config=dict(trial.config))

    @property
    def metrics_dataframe(self) -> Any:
        """Every reported result of the trial, one row each (a pandas DataFrame)."""
        if self._frame is None and self._history:
            self._frame = results_frame(self._history)
        return self._frame

    @metrics_dataframe.setter
    def metrics_dataframe(self, value: Any) -> None:
        self._frame = value


def trial_to_result(trial: Trial, filesystem: Any) -> Result:
    """The Result of one trial."""
    return TrialResult(trial, filesystem)


class ResultGrid:
    """The trials' results, in trial creation order."""

    def __init__(self, trials: list[Trial], *, metric: str | None, mode: str | None, experiment_path: str,
                 filesystem: Any) -> None:
        self._trials = list(trials)
        self._metric, self._mode = metric, mode
        self._results = [trial_to_result(t, filesystem) for t in self._trials]
        self._experiment_path = experiment_path
        self._filesystem = filesystem

    @property
    def experiment_path(self) -> str:
        """storage_path/name of the experiment."""
        return self._experiment_path

    @property
    def filesystem(self) -> Any:
        """The pyarrow filesystem the experiment lives on."""
        return self._filesystem

    def get_best_result(self, metric: str | None = None, mode: str | None = None, scope: str = "last",
                        filter_nan_and_inf: bool = True) -> Result:
        """The result of the best trial by `metric` (TuneConfig's by default). `scope`: "last"
        (each trial's last result), "avg", "all" (best over every report), "last-5-avg", "last-10-avg".
        A grid of one trial returns that trial's result whatever the metric, as Ray's does."""
        if len(self._trials) == 1:
            return self._results[0]
        metric = metric or self._metric
        mode = mode or self._mode
        if not metric or not mode:
            raise ValueError("get_best_result needs a metric and a mode: pass them here or to "
                             "TuneConfig(metric=..., mode=...)")
        if mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")
        if scope not in ("all", "last", "avg", "last-5-avg", "last-10-avg"):
            raise ValueError(f"scope must be one of 'all', 'last', 'avg', 'last-5-avg', 'last-10-avg', got {scope!r}")
        best: tuple[float, int] | None = None
        for i, t in enumerate(self._trials):
            v = t.best_value(metric, mode, scope)
            if v is None or (filter_nan_and_inf and not math.isfinite(v)):
                continue
            key = v if mode == "max" else -v
            if best is None or key > best[0]:
                best = (key, i)
        if best is None:
            reported = sorted({k for t in self._trials for k in t.last_result})
            raise RuntimeError(f"No best trial found for metric {metric!r}: no trial reported it "
                               f"(reported metrics: {reported})")
        return self._results[best[1]]

    def get_dataframe(self, filter_metric: str | None = None, filter_mode: str | None = None) -> Any:
        """One row per trial: its last result (or, with filter_metric/filter_mode, its best
        result by that metric), with `config/...` columns and the trial's `path`."""
        import pandas as pd

        rows = []
        for t in self._trials:
            row = dict(t.last_result)
            if filter_metric:
                if filter_mode not in ("min", "max"):
                    raise ValueError("get_dataframe(filter_metric=...) needs filter_mode 'min' or 'max'")
                hist = [r for r in t.metric_history if isinstance(r.get(filter_metric), (int, float))]
                if hist:
                    row = dict((min if filter_mode == "min" else max)(hist, key=lambda r: r[filter_metric]))
            row.pop("config", None)
            row = {k: v for k, v in row.items() if not k.startswith("__")}
            row.update({f"config/{k}": v for k, v in flatten_dict(t.config).items()})
            row["trial_id"] = t.trial_id
            row["status"] = t.status
            row["path"] = t.path
            rows.append(row)
        return pd.DataFrame(rows)

    @property
    def errors(self) -> list[BaseException]:
        """The errors of the trials that ended in ERROR."""
        return [t.error for t in self._trials if t.status == Trial.ERROR and t.error is not None]

    @property
    def num_errors(self) -> int:
        """How many trials ended in ERROR."""
        return sum(1 for t in self._trials if t.status == Trial.ERROR)

    @property
    def num_terminated(self) -> int:
        """How many trials ended normally."""
        return sum(1 for t in self._trials if t.status == Trial.TERMINATED)

    def __len__(self) -> int:
        return len(self._results)

    def __getitem__(self, i: int) -> Result:
        return self._results[i]

    def __iter__(self) -> Iterator[Result]:
        return iter(self._results)

    def trials(self) -> list[Trial]:
        """The experiment's trials, in creation order (what tune.run's ExperimentAnalysis reads)."""
        return list(self._trials)

    def __repr__(self) -> str:
        return f"ResultGrid<{len(self)} results, {self.num_terminated} terminated, {self.num_errors} errors>"
