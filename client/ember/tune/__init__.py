"""ember.tune: hyperparameter tuning with Ray Tune's API.

    from ember import tune
    from ember.tune.schedulers import ASHAScheduler

    tuner = tune.Tuner(train_func, param_space={"lr": tune.loguniform(1e-5, 1e-3)},
                       tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=50,
                                                   scheduler=ASHAScheduler()))
    best = tuner.fit().get_best_result()

Inside a function trainable: `tune.report(metrics, checkpoint=)` (or `ember.train.report`),
`tune.get_checkpoint()`, `tune.get_context()`.

The older entry point `tune.run(...)` returns an `ExperimentAnalysis`; `tune.Callback`s (and the
logger callbacks of `ember.tune.logger`) hear every trial event; `tune.CLIReporter` prints the
status as Ray's does; `tune.register_trainable` names a trainable for `tune.run("name")`.
"""
from __future__ import annotations

from typing import Any

from ember.air.session import TrainContext
from ember.train import Checkpoint
from ember.train import get_checkpoint as _train_get_checkpoint
from ember.train import get_context as _train_get_context
from ember.train import report as _train_report

from . import logger, schedulers, search, stopper
from .analysis import ExperimentAnalysis
from .callback import Callback
from .error import TuneError
from .experiment.trial import Trial
from .progress_reporter import CLIReporter, ProgressReporter
from .registry import register_trainable
from .result_grid import ResultGrid
from .search.sample import (
    choice,
    grid_search,
    lograndint,
    loguniform,
    qlograndint,
    qloguniform,
    qrandint,
    qrandn,
    quniform,
    randint,
    randn,
    sample_from,
    uniform,
)
from .stopper import Stopper
from .trainable import PlacementGroupFactory, Trainable, with_parameters, with_resources
from .tune import run
from .tune_config import CheckpointConfig, FailureConfig, ResumeConfig, RunConfig, TuneConfig
from .tuner import Tuner

TuneContext = TrainContext

__all__ = [
    "CLIReporter", "Callback", "Checkpoint", "CheckpointConfig", "ExperimentAnalysis", "FailureConfig",
    "PlacementGroupFactory", "ProgressReporter", "ResultGrid", "ResumeConfig", "RunConfig", "Stopper",
    "Trainable", "Trial", "TuneConfig", "TuneContext", "TuneError", "Tuner", "choice", "get_checkpoint",
    "get_context", "grid_search", "logger", "lograndint", "loguniform", "qlograndint", "qloguniform",
    "qrandint", "qrandn", "quniform", "randint", "randn", "register_trainable", "report", "run",
    "sample_from", "schedulers", "search", "stopper", "uniform", "with_parameters", "with_resources",
]


def report(metrics: dict[str, Any], *, checkpoint: Checkpoint | None = None,
           checkpoint_dir_name: str | None = None) -> None:
    """Reports a result (and optionally a checkpoint, persisted to the trial's storage) from a
    function trainable; blocks until the controller asks for the next result."""
    _train_report(metrics, checkpoint=checkpoint, checkpoint_dir_name=checkpoint_dir_name)


def get_checkpoint() -> Checkpoint | None:
    """The checkpoint this trial resumes from (after a failure, a pause, a restore or a PBT
    exploit), else None."""
    return _train_get_checkpoint()


def get_context() -> TrainContext:
    """The trial's id, name, directory and resources."""
    return _train_get_context()
