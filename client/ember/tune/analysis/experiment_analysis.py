"""`ExperimentAnalysis`: what `tune.run` returns, and a reader of any experiment directory.

    analysis = tune.run(train_fn, config={...}, metric="loss", mode="min")
    analysis.best_config, analysis.best_result, analysis.best_trial, analysis.best_checkpoint
    analysis.dataframe(); analysis.results_df; analysis.trial_dataframes[trial_id]
    ExperimentAnalysis("~/ember_results/my_exp").get_best_config("loss", "min")

Built from the trials of a finished run, or from `storage_path/name` (its experiment_state.pkl).
The `best_*` properties use the default metric and mode (tune.run's); the `get_best_*` methods
take their own.
"""
from __future__ import annotations

import math
from typing import Any

from ember.air import storage

from .._internal import experiment_state as es
from ..experiment.trial import Trial
from ..result_grid import results_frame
from ..search.variant_generator import flatten_dict

__all__ = ["ExperimentAnalysis"]

_SCOPES = ("all", "last", "avg", "last-5-avg", "last-10-avg")


class ExperimentAnalysis:
    """The trials of one experiment, their results, configs and checkpoints."""

    def __init__(self, experiment_checkpoint_path: str, *, storage_filesystem: Any = None,
                 trials: list[Trial] | None = None, default_metric: str | None = None,
                 default_mode: str | None = None) -> None:
        if default_mode not in (None, "min", "max"):
            raise ValueError(f"default_mode must be 'min' or 'max', got {default_mode!r}")
        fs, path = storage.resolve(str(experiment_checkpoint_path), storage_filesystem)
        if trials is None:
            if not storage.exists(fs, storage.join(path, es.STATE_FILE)):
                raise ValueError(f"no experiment at {experiment_checkpoint_path}: "
                                 f"{es.STATE_FILE} is missing")
            trials = es.load_experiment_state(fs, path)["trials"]
        self.trials: list[Trial] = list(trials)
        self.default_metric, self.default_mode = default_metric, default_mode
        self._fs, self._path = fs, path

    # ---- where ----------------------------------------------------------------------------
    @property
    def experiment_path(self) -> str:
        """storage_path/name of the experiment."""
        return self._path

    @property
    def filesystem(self) -> Any:
        """The pyarrow filesystem the experiment lives on."""
        return self._fs

    # ---- best, by explicit metric and mode --------------------------------------------------
    def _metric_mode(self, metric: str | None, mode: str | None, what: str) -> tuple[str, str]:
        metric, mode = metric or self.default_metric, mode or self.default_mode
        if not metric or not mode:
            raise ValueError(f"{what} needs a metric and a mode: pass them here, or metric= and mode= "
                             "to tune.run (or default_metric/default_mode to ExperimentAnalysis)")
        if mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")
        return metric, mode

    def get_best_trial(self, metric: str | None = None, mode: str | None = None, scope: str = "last",
                       filter_nan_and_inf: bool = True) -> Trial | None:
        """The best trial by `metric` under `scope` ("last", "avg", "all", "last-5-avg",
        "last-10-avg"); None when no trial reported the metric."""
        metric, mode = self._metric_mode(metric, mode, "get_best_trial")
        if scope not in _SCOPES:
            raise ValueError(f"scope must be one of {', '.join(_SCOPES)}, got {scope!r}")
        best: tuple[float, Trial] | None = None
        for t in self.trials:
            v = t.best_value(metric, mode, scope)
            if v is None or (filter_nan_and_inf and not math.isfinite(v)):
                continue
            key = v if mode == "max" else -v
            if best is None or key > best[0]:
                best = (key, t)
        return None if best is None else best[1]

    def get_best_config(self, metric: str | None = None, mode: str | None = None,
                        scope: str = "last") -> dict[str, Any] | None:
        """The config of the best trial."""
        t = self.get_best_trial(metric, mode, scope)
        return None if t is None else t.config

    def get_best_checkpoint(self, trial: Trial, metric: str | None = None, mode: str | None = None) -> Any:
        """The trial's kept checkpoint with the best `metric` (None when none was kept)."""
        metric, mode = self._metric_mode(metric, mode, "get_best_checkpoint")
        scored = [(m[metric], c) for c, m in trial.checkpoints if isinstance(m.get(metric), (int, float))]
        if not scored:
            return None
        return (max if mode == "max" else min)(scored, key=lambda x: x[0])[1]

    def get_all_configs(self, prefix: bool = False) -> dict[str, dict[str, Any]]:
        """Every trial's config by trial path (`config/` keys with prefix=True)."""
        return {t.path: ({f"config/{k}": v for k, v in t.config.items()} if prefix else t.config)
                for t in self.trials}

    # ---- best, by the default metric and mode --------------------------------------------------
    def _best(self, what: str) -> Trial:
        if not self.default_metric or not self.default_mode:
            raise ValueError(f"{what} needs a default metric and mode: pass metric= and mode= to "
                             "tune.run, or use get_best_trial(metric, mode)")
        t = self.get_best_trial(self.default_metric, self.default_mode)
        if t is None:
            raise ValueError(f"no trial reported the metric {self.default_metric!r}")
        return t

    @property
    def best_trial(self) -> Trial:
        """The best trial by the default metric and mode (last results)."""
        return self._best("best_trial")

    @property
    def best_config(self) -> dict[str, Any]:
        """The best trial's config."""
        return self._best("best_config").config

    @property
    def best_result(self) -> dict[str, Any]:
        """The best trial's last result."""
        return dict(self._best("best_result").last_result)

    @property
    def best_checkpoint(self) -> Any:
        """The best trial's latest checkpoint."""
        return self._best("best_checkpoint").checkpoint

    @property
    def best_dataframe(self) -> Any:
        """Every result of the best trial (a pandas DataFrame)."""
        return self.trial_dataframes[self._best("best_dataframe").trial_id]

    @property
    def best_result_df(self) -> Any:
        """The best trial's last result as a one-row DataFrame."""
        import pandas as pd

        return pd.DataFrame([self._row(self._best("best_result_df"), None, None)]).set_index("trial_id")

    # ---- tables -------------------------------------------------------------------------------
    @property
    def results(self) -> dict[str, dict[str, Any]]:
        """Each trial's last result, by trial id."""
        return {t.trial_id: dict(t.last_result) for t in self.trials}

    @staticmethod
    def _row(t: Trial, metric: str | None, mode: str | None) -> dict[str, Any]:
        row = dict(t.last_result)
        if metric:
            hist = [r for r in t.metric_history if isinstance(r.get(metric), (int, float))]
            if hist:
                row = dict((min if mode == "min" else max)(hist, key=lambda r: r[metric]))
        row = {k: v for k, v in flatten_dict(row).items() if not k.startswith("__") and k != "config"}
        row.update({f"config/{k}": v for k, v in flatten_dict(t.config).items()})
        row["trial_id"], row["logdir"] = t.trial_id, t.path
        return row

    @property
    def results_df(self) -> Any:
        """One row per trial (its last result and config), indexed by trial id."""
        import pandas as pd

        return pd.DataFrame([self._row(t, None, None) for t in self.trials]).set_index("trial_id")

    def dataframe(self, metric: str | None = None, mode: str | None = None) -> Any:
        """One row per trial: its last result, or with metric and mode its best result by it."""
        import pandas as pd

        if (metric is None) != (mode is None) or mode not in (None, "min", "max"):
            raise ValueError("dataframe() takes a metric and a mode ('min' or 'max') together, or neither")
        return pd.DataFrame([self._row(t, metric, mode) for t in self.trials])

    @property
    def trial_dataframes(self) -> dict[str, Any]:
        """Every result of every trial, one DataFrame per trial id."""
        return {t.trial_id: results_frame(t.metric_history) for t in self.trials}

    def __repr__(self) -> str:
        return f"ExperimentAnalysis<{len(self.trials)} trials at {self._path}>"
