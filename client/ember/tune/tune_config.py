"""`TuneConfig`, and Tune's `RunConfig` / `CheckpointConfig` / `FailureConfig`.

As in Ray 2.60, `ember.tune` has its own RunConfig (with `progress_reporter`); it subclasses
`ember.train.RunConfig`, and `Tuner` accepts either. CheckpointConfig's `checkpoint_frequency` /
`checkpoint_at_end` apply to class trainables (function trainables checkpoint by reporting).
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any, Callable

from ember.air import config as train_config

__all__ = ["CheckpointConfig", "FailureConfig", "ResumeConfig", "RunConfig", "TuneConfig", "TuneRunConfig"]


@dataclass
class CheckpointConfig(train_config.CheckpointConfig):
    """Which checkpoints to keep (`num_to_keep` best by `checkpoint_score_attribute`), and for
    class trainables how often to save (`checkpoint_frequency`, `checkpoint_at_end`)."""


@dataclass
class FailureConfig(train_config.FailureConfig):
    """How many times a failed trial is retried from its latest checkpoint (-1: forever);
    `fail_fast=True` ends the run at the first trial error, `"raise"` raises it."""


@dataclass
class RunConfig(train_config.RunConfig):
    """Where results go (`storage_path/name`), when trials stop (`stop`), failure and checkpoint
    handling, console verbosity (0 quiet, 1 status table, 2 also every result)."""

    progress_reporter: Any = None


TuneRunConfig = RunConfig


@dataclass
class TuneConfig:
    """How the search runs: metric/mode, scheduler, search algorithm, sample count, concurrency."""

    mode: str | None = None
    metric: str | None = None
    search_alg: Any = None
    scheduler: Any = None
    num_samples: int = 1
    max_concurrent_trials: int | None = None
    time_budget_s: float | datetime.timedelta | None = None
    reuse_actors: bool | None = None
    trial_name_creator: Callable[[Any], str] | None = None
    trial_dirname_creator: Callable[[Any], str] | None = None

    def __post_init__(self) -> None:
        if self.mode not in (None, "min", "max"):
            raise ValueError(f"TuneConfig.mode must be 'min' or 'max', got {self.mode!r}")
        if self.metric is not None and not isinstance(self.metric, str):
            raise ValueError(f"TuneConfig.metric must be a string, got {self.metric!r}")
        if isinstance(self.num_samples, bool) or not isinstance(self.num_samples, int) or (
                self.num_samples < 1 and self.num_samples != -1):
            raise ValueError(f"TuneConfig.num_samples must be an int >= 1 (or -1 for no limit), "
                             f"got {self.num_samples!r}")
        if self.max_concurrent_trials is not None and (
                not isinstance(self.max_concurrent_trials, int) or self.max_concurrent_trials < 1):
            raise ValueError(f"TuneConfig.max_concurrent_trials must be None or an int >= 1, "
                             f"got {self.max_concurrent_trials!r}")
        if isinstance(self.time_budget_s, datetime.timedelta):
            self.time_budget_s = self.time_budget_s.total_seconds()
        if self.time_budget_s is not None and (
                not isinstance(self.time_budget_s, (int, float)) or self.time_budget_s <= 0):
            raise ValueError(f"TuneConfig.time_budget_s must be > 0 seconds, got {self.time_budget_s!r}")


@dataclass
class ResumeConfig:
    """What `Tuner.restore` does with each kind of trial, as Ray's: `ResumeConfig.ResumeType.RESUME`
    (continue from its latest checkpoint), `RESTART` (start afresh) or `SKIP` (leave as it ended)."""

    class ResumeType:
        """The three ways to treat a trial on restore."""

        RESUME = "RESUME"
        RESTART = "RESTART"
        SKIP = "SKIP"

    finished: str = "SKIP"
    unfinished: str = "RESUME"
    errored: str = "SKIP"

    def __post_init__(self) -> None:
        allowed = {"finished": ("SKIP",), "unfinished": ("RESUME", "SKIP"),
                   "errored": ("RESUME", "RESTART", "SKIP")}
        for name, ok in allowed.items():
            v = getattr(self, name)
            if v not in ok:
                raise ValueError(f"ResumeConfig.{name}={v!r} is not supported: use one of {', '.join(ok)}")

    def restore_flags(self) -> dict[str, bool]:
        """The Tuner.restore flags this config stands for."""
        return {"resume_unfinished": self.unfinished == "RESUME", "resume_errored": self.errored == "RESUME",
                "restart_errored": self.errored == "RESTART"}
