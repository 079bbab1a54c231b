"""`ProgressReporter` and `CLIReporter`: the console status of a run, as Ray's reporters print it.

    reporter = tune.CLIReporter(metric_columns=["loss", "acc"], parameter_columns=["lr"])
    tune.run(fn, config=..., progress_reporter=reporter)   # or tune.RunConfig(progress_reporter=)

A report is Ray's "== Status ==" block: the time and how long the run has been going, the
best trial so far (with metric and mode), the result directory, the trial counts, and a table
(psql style) of trial name, status, location, the searched parameters and the metric columns,
then the errored trials. `should_report` limits reports to one per `max_report_frequency`
seconds (and always at the end).
"""
from __future__ import annotations

import datetime
import sys
import time
from typing import Any

from .experiment.trial import Trial
from .search.variant_generator import flatten_dict

__all__ = ["CLIReporter", "ProgressReporter"]

# The metric columns a CLIReporter shows by default, when a result has them (Ray's defaults).
DEFAULT_METRIC_COLUMNS = {"_metric": "_metric", "episode_reward_mean": "reward", "mean_accuracy": "acc",
                          "mean_loss": "loss", "loss": "loss", "training_iteration": "iter",
                          "time_total_s": "total time (s)", "timesteps_total": "ts"}
_AUTO = {"done", "trial_id", "date", "timestamp", "pid", "hostname", "node_ip", "time_this_iter_s",
         "time_since_restore", "iterations_since_restore", "experiment_tag", "config", "should_checkpoint"}


class ProgressReporter:
    """What the controller asks a reporter: whether to report now, and the report itself."""

    def setup(self, start_time: float | None = None, total_samples: int | None = None,
              metric: str | None = None, mode: str | None = None, **kwargs: Any) -> None:
        """Called once before the run, with what the reporter may show."""

    def should_report(self, trials: list[Trial], done: bool = False) -> bool:
        """Whether to report now."""
        raise NotImplementedError

    def report(self, trials: list[Trial], done: bool, *sys_info: str) -> None:
        """Reports the trials' progress."""
        raise NotImplementedError


def _fmt(v: Any, width: int) -> str:
    s = f"{v:.5g}" if isinstance(v, float) else str(v)
    return s if len(s) <= width else s[:width - 3] + "..."


def psql_table(header: list[str], rows: list[list[Any]]) -> str:
    """A table as `tabulate(..., tablefmt="psql")` draws it: numbers right-aligned."""
    cells = [[c if isinstance(c, str) else _fmt(c, 10_000) for c in r] for r in rows]
    numeric = [all(not isinstance(r[i], str) for r in rows if r[i] != "") and any(r[i] != "" for r in rows)
               for i in range(len(header))]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(header)]

    def line(vals: list[str]) -> str:
        out = [(v.rjust(w) if numeric[i] else v.ljust(w)) for i, (v, w) in enumerate(zip(vals, widths, strict=True))]
        return "| " + " | ".join(out) + " |"

    edge = "+-" + "-+-".join("-" * w for w in widths) + "-+"
    mid = "|-" + "-+-".join("-" * w for w in widths) + "-|"
    return "\n".join([edge, line(header), mid] + [line(r) for r in cells] + [edge])


class CLIReporter(ProgressReporter):
    """Prints the status block to stdout (Ray's CLIReporter, with its parameters)."""

    def __init__(self, *, metric_columns: list[str] | dict[str, str] | None = None,
                 parameter_columns: list[str] | dict[str, str] | None = None,
                 total_samples: int | None = None, max_progress_rows: int = 20, max_error_rows: int = 20,
                 max_column_length: int = 20, max_report_frequency: int = 5, infer_limit: int = 3,
                 print_intermediate_tables: bool | None = None, metric: str | None = None,
                 mode: str | None = None, sort_by_metric: bool = False) -> None:
        if mode not in (None, "min", "max"):
            raise ValueError(f"CLIReporter mode must be 'min' or 'max', got {mode!r}")
        self._metric_columns = metric_columns
        self._parameter_columns = parameter_columns
        self._total_samples = total_samples
        self._max_rows, self._max_error_rows = max_progress_rows, max_error_rows
        self._max_len, self._frequency, self._infer_limit = max_column_length, max_report_frequency, infer_limit
        self._intermediate = print_intermediate_tables
        self._metric, self._mode, self._sort = metric, mode, sort_by_metric
        self._start = time.time()
        self._last = 0.0
        self._logdir = ""
        self.out: Any = None

    def setup(self, start_time: float | None = None, total_samples: int | None = None,
              metric: str | None = None, mode: str | None = None, **kwargs: Any) -> None:
        """Takes the run's start, sample count, metric and mode (its own win when given)."""
        self._start = start_time or self._start
        self._total_samples = self._total_samples or total_samples
        self._metric, self._mode = self._metric or metric, self._mode or mode
        self._logdir = kwargs.get("experiment_path", self._logdir)

    def add_metric_column(self, metric: str, representation: str | None = None) -> None:
        """Shows `metric` as a column (under `representation`)."""
        cols = self._metric_columns
        if isinstance(cols, dict):
            cols[metric] = representation or metric
        elif representation not in (None, metric):
            raise ValueError("add_metric_column(representation=) needs metric_columns given as a dict")
        else:
            self._metric_columns = [*(cols or []), metric]

    def add_parameter_column(self, parameter: str, representation: str | None = None) -> None:
        """Shows config key `parameter` as a column (under `representation`)."""
        cols = self._parameter_columns
        if isinstance(cols, dict):
            cols[parameter] = representation or parameter
        else:
            self._parameter_columns = [*(cols or []), parameter]

    def should_report(self, trials: list[Trial], done: bool = False) -> bool:
        """Once per `max_report_frequency` seconds, and at the end."""
        if done or time.time() - self._last >= self._frequency:
            self._last = time.time()
            return True
        return False

    def report(self, trials: list[Trial], done: bool, *sys_info: str) -> None:
        """Prints the status block."""
        print(self._progress_str(trials, done, *sys_info), file=self.out or sys.stdout, flush=True)

    # ---- the block ------------------------------------------------------------------------------
    def _columns(self, trials: list[Trial]) -> dict[str, str]:
        cols = self._metric_columns
        if isinstance(cols, dict):
            out = dict(cols)
        elif cols is not None:
            out = {c: c for c in cols}
        else:
            out = {k: v for k, v in DEFAULT_METRIC_COLUMNS.items()}
            inferred = [k for t in trials for k, v in flatten_dict(t.last_result).items()
                        if k not in out and k not in _AUTO and not k.startswith("__")
                        and isinstance(v, (int, float)) and not isinstance(v, bool)]
            for k in dict.fromkeys(inferred):
                if len([c for c in out if c not in DEFAULT_METRIC_COLUMNS]) >= self._infer_limit:
                    break
                out[k] = k
        if self._metric and self._metric not in out:
            out[self._metric] = self._metric
        present = {k for t in trials for k in flatten_dict(t.last_result)}
        return {k: v for k, v in out.items() if k in present}

    def _params(self, trials: list[Trial]) -> dict[str, str]:
        cols = self._parameter_columns
        if isinstance(cols, dict):
            return dict(cols)
        if cols is not None:
            return {c: c for c in cols}
        keys = {k for t in trials for k in flatten_dict(t.config)}
        varying = [k for k in sorted(keys) if len({repr(flatten_dict(t.config).get(k)) for t in trials}) > 1
                   or len(trials) == 1]
        return {k: k for k in varying}

    def _best(self, trials: list[Trial]) -> str | None:
        metric = self._metric
        if not (metric and self._mode):
            return None
        scored = [t for t in trials if isinstance(t.last_result.get(metric), (int, float))]
        if not scored:
            return None
        best = (max if self._mode == "max" else min)(scored, key=lambda t: t.last_result[metric])
        return (f"Current best trial: {best.trial_id} with {metric}={best.last_result[metric]} "
                f"and parameters={best.config}")

    def _progress_str(self, trials: list[Trial], done: bool, *sys_info: str) -> str:
        elapsed = datetime.timedelta(seconds=time.time() - self._start)
        now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        lines = ["== Status ==", f"Current time: {now} (running for {str(elapsed)[:-4] if '.' in str(elapsed) else elapsed})"]
        lines += [s for s in sys_info if s]
        if (best := self._best(trials)) is not None:
            lines.append(best)
        if self._logdir:
            lines.append(f"Result logdir: {self._logdir}")
        counts: dict[str, int] = {}
        for t in trials:
            counts[t.status] = counts.get(t.status, 0) + 1
        total = self._total_samples if self._total_samples and self._total_samples < sys.maxsize else len(trials)
        state = ", ".join(f"{n} {s}" for s, n in counts.items())
        lines.append(f"Number of trials: {len(trials)}/{total} ({state})")
        lines.append(self._table(trials))
        errored = [t for t in trials if t.status == Trial.ERROR]
        if errored:
            lines.append(f"Number of errored trials: {len(errored)}")
            lines.append(psql_table(["Trial name", "# failures", "error file"],
                                    [[str(t), t.num_failures, f"{t.path}/error.txt"]
                                     for t in errored[:self._max_error_rows]]))
        return "\n".join(lines) + "\n"

    def _table(self, trials: list[Trial]) -> str:
        metrics, params = self._columns(trials), self._params(trials)
        shown = list(trials)
        metric = self._metric
        if self._sort and metric and self._mode:
            shown.sort(key=lambda t: (metric not in t.last_result,
                                      (-1 if self._mode == "max" else 1) * float(t.last_result.get(metric, 0))))
        header = ["Trial name", "status", "loc"] + [_fmt(v, self._max_len) for v in params.values()] + \
            [_fmt(v, self._max_len) for v in metrics.values()]
        rows = []
        for t in shown[:self._max_rows]:
            conf, res = flatten_dict(t.config), flatten_dict(t.last_result)
            rows.append([str(t), t.status, ""] + [conf.get(k, "") for k in params] + [res.get(k, "") for k in metrics])
        table = psql_table(header, rows)
        if len(shown) > self._max_rows:
            table += f"\n... {len(shown) - self._max_rows} more trials not shown"
        return table
