"""The status table printed on the driver's console while a Tuner runs (quiet with verbose=0).

`format_status` is a pure function of the trials (state counts, best trial so far, one row per
trial with its searched parameters, iterations, time and latest metrics); `ProgressPrinter`
prints it every `interval_s` and once at the end. verbose=2 also prints every result as a line.
"""
from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from ..experiment.trial import Trial
from ..search.variant_generator import find, get_path

_AUTO = {"training_iteration", "time_this_iter_s", "time_total_s", "timestamp", "done", "trial_id",
         "date", "pid", "hostname", "node_ip", "config", "time_since_restore",
         "iterations_since_restore", "experiment_tag"}
_STATES = (Trial.RUNNING, Trial.PAUSED, Trial.PENDING, Trial.TERMINATED, Trial.ERROR)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.5g}"
    return str(v)


def _param_paths(space: dict[str, Any] | None) -> list[tuple[Any, ...]]:
    if not space:
        return []
    grids, domains = find(space)
    return [p for p, _ in grids] + [p for p, _ in domains]


def format_status(trials: list[Trial], *, metric: str | None, mode: str | None, elapsed_s: float,
                  param_space: dict[str, Any] | None = None, max_rows: int = 20,
                  title: str = "Trial status") -> str:
    """The status table as text."""
    counts = {s: sum(1 for t in trials if t.status == s) for s in _STATES}
    lines = [f"== {title}: " + " | ".join(f"{n} {s}" for s, n in counts.items() if n)
             + f" == elapsed {elapsed_s:.1f}s"]
    if metric and mode:
        scored = [(t.last_result[metric], t) for t in trials
                  if isinstance(t.last_result.get(metric), (int, float))]
        if scored:
            v, best = (min if mode == "min" else max)(scored, key=lambda x: x[0])
            lines.append(f"Current best trial: {best.trial_id} with {metric}={_fmt(v)} and params={best.config}")
    paths = _param_paths(param_space)
    metric_cols: list[str] = [metric] if metric else []
    for t in trials:
        for k, v in t.last_result.items():
            if (k not in _AUTO and not k.startswith("__") and k not in metric_cols
                    and isinstance(v, (int, float)) and len(metric_cols) < 4):
                metric_cols.append(k)
    header = ["Trial name", "status"] + ["/".join(map(str, p)) for p in paths] + \
        ["iter", "total time (s)"] + metric_cols
    rows = []
    order = sorted(trials, key=lambda t: (_STATES.index(t.status) if t.status in _STATES else 9))
    for t in order[:max_rows]:
        params = []
        for p in paths:
            try:
                params.append(_fmt(get_path(t.config, p)))
            except (KeyError, IndexError, TypeError):
                params.append("")
        r = t.last_result
        rows.append([str(t), t.status] + params + [str(t.iteration), f"{t.time_total_s:.2f}"]
                    + [_fmt(r.get(m, "")) for m in metric_cols])
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(header)]
    sep = "+-" + "-+-".join("-" * w for w in widths) + "-+"
    lines += [sep, "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=False)) + " |", sep]
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + " |" for row in rows]
    lines.append(sep)
    if len(trials) > max_rows:
        lines.append(f"... {len(trials) - max_rows} more trials not shown")
    errored = [t for t in trials if t.status == Trial.ERROR]
    for t in errored[:5]:
        lines.append(f"Trial {t} errored: {t.error_msg.splitlines()[-1] if t.error_msg else ''}")
    return "\n".join(lines)


class ProgressPrinter:
    """Prints the status table every `interval_s` (and at the end) when verbose >= 1."""

    def __init__(self, verbose: int, metric: str | None, mode: str | None,
                 param_space: dict[str, Any] | None, interval_s: float = 10.0,
                 out: TextIO | None = None, reporter: Any = None) -> None:
        from ..progress_reporter import ProgressReporter

        if reporter is not None and not isinstance(reporter, ProgressReporter):
            raise TypeError(f"progress_reporter must be a tune.ProgressReporter (e.g. tune.CLIReporter()), "
                            f"got {type(reporter).__name__}")
        self.reporter = reporter
        self.verbose = verbose
        self.metric, self.mode, self.param_space = metric, mode, param_space
        self.interval_s = interval_s
        self.out = out
        self._start = time.monotonic()
        self._last = self._start

    def _print(self, text: str) -> None:
        stream = self.out or sys.stdout
        print(text, file=stream, flush=True)

    def maybe_print(self, trials: list[Trial], force: bool = False) -> None:
        """Prints the table if `interval_s` passed since the last one (or `force`)."""
        if self.verbose < 1:
            return
        if self.reporter is not None:
            if self.reporter.should_report(trials, done=False):
                self.reporter.report(trials, False)
            return
        now = time.monotonic()
        if force or now - self._last >= self.interval_s:
            self._last = now
            self._print(format_status(trials, metric=self.metric, mode=self.mode,
                                      elapsed_s=now - self._start, param_space=self.param_space))

    def on_result(self, trial: Trial, result: dict[str, Any]) -> None:
        """verbose=2: one line per result."""
        if self.verbose >= 2:
            shown = {k: _fmt(v) for k, v in result.items() if k not in _AUTO and not k.startswith("__")}
            self._print(f"Trial {trial} iter {result.get('training_iteration')}: {shown}")

    def on_trial_end(self, trial: Trial) -> None:
        """A line when a trial ends (verbose=2) or errors (verbose>=1)."""
        if self.verbose >= 2 or (self.verbose >= 1 and trial.status == Trial.ERROR):
            self._print(f"Trial {trial} {trial.status}" + (f": {trial.error_msg.strip().splitlines()[-1]}"
                                                          if trial.error_msg else ""))

    def final(self, trials: list[Trial]) -> None:
        """The table once more when the run ends."""
        if self.verbose >= 1 and self.reporter is not None:
            self.reporter.should_report(trials, done=True)
            self.reporter.report(trials, True)
        elif self.verbose >= 1:
            self._print(format_status(trials, metric=self.metric, mode=self.mode,
                                      elapsed_s=time.monotonic() - self._start,
                                      param_space=self.param_space, title="Final trial status"))
