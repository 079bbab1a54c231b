"""`tune.run`: Ray Tune's older entry point, which many scripts still use.

    analysis = tune.run(train_fn, config={"lr": tune.loguniform(1e-4, 1e-1)}, num_samples=8,
                        metric="loss", mode="min", stop={"training_iteration": 10},
                        resources_per_trial={"cpu": 1}, storage_path="~/ray_results", name="exp")
    analysis.best_config

It builds a `Tuner` from its arguments and runs it, so trials, schedulers, searchers, callbacks
and storage behave as with `Tuner.fit()`, and returns an `ExperimentAnalysis`. As in Ray it
raises `TuneError` when a trial failed (unless `raise_on_failed_trial=False`). `resume` picks up
the experiment at `storage_path/name`: "AUTO" when it exists, True (or "LOCAL"/"REMOTE") always,
"ERRORED_ONLY"/"RESTART_ERRORED_ONLY"/"AUTO+ERRORED"/"AUTO+RESTART_ERRORED" as Ray reads them.
A parameter of Ray's that Ember does not implement raises naming it.
"""
from __future__ import annotations

import datetime
from typing import Any, Literal, TypedDict

from ember.air import storage

from .analysis import ExperimentAnalysis
from .error import TuneError
from .experiment.trial import Trial
from .trainable import with_resources
from .tune_config import CheckpointConfig, FailureConfig, ResumeConfig, RunConfig, TuneConfig
from .tuner import Tuner

__all__ = ["run"]

# Ray parameters tune.run refuses (with their defaults): an Ember run cannot honour them.
_UNSUPPORTED = {"sync_config": None, "export_formats": None, "restore": None, "local_dir": None,
                "chdir_to_trial_dir": None, "_remote": None, "_remote_string_queue": None,
                "_entrypoint": None, "log_to_file": False}


class _ResumeFlags(TypedDict, total=False):
    """Tuner.restore's flags for one `resume` value."""
    resume_unfinished: bool
    resume_errored: bool
    restart_errored: bool


_RESUME: dict[str | bool, tuple[str, _ResumeFlags]] = {
    "AUTO": ("auto", {}), True: ("must", {}), "LOCAL": ("must", {}), "REMOTE": ("must", {}),
    "ERRORED_ONLY": ("must", {"resume_unfinished": False, "resume_errored": True}),
    "RESTART_ERRORED_ONLY": ("must", {"resume_unfinished": False, "restart_errored": True}),
    "AUTO+ERRORED": ("auto", {"resume_errored": True}),
    "AUTO+RESTART_ERRORED": ("auto", {"restart_errored": True})}


def run(run_or_experiment: Any, *, name: str | None = None, metric: str | None = None,
        mode: str | None = None, stop: Any = None, time_budget_s: float | datetime.timedelta | None = None,
        config: dict[str, Any] | None = None, resources_per_trial: Any = None, num_samples: int = 1,
        storage_path: str | None = None, storage_filesystem: Any = None, search_alg: Any = None,
        scheduler: Any = None, checkpoint_config: CheckpointConfig | None = None, verbose: int | None = None,
        progress_reporter: Any = None, trial_name_creator: Any = None, trial_dirname_creator: Any = None,
        max_failures: int = 0, fail_fast: bool | str = False, resume: bool | str | None = None,
        resume_config: ResumeConfig | None = None, reuse_actors: bool | None = None,
        raise_on_failed_trial: bool = True, callbacks: list[Any] | None = None,
        max_concurrent_trials: int | None = None, keep_checkpoints_num: int | None = None,
        checkpoint_score_attr: str | None = None, checkpoint_freq: int = 0, checkpoint_at_end: bool = False,
        **unsupported: Any) -> ExperimentAnalysis:
    """Runs one experiment of `run_or_experiment` (a function, a `tune.Trainable` subclass, a Train
    trainer or the name of a registered trainable) and returns its ExperimentAnalysis."""
    for key, value in unsupported.items():
        if key not in _UNSUPPORTED:
            raise TypeError(f"tune.run() got an unexpected keyword argument {key!r}")
        if value != _UNSUPPORTED[key]:
            raise NotImplementedError(f"tune.run({key}=...) is not supported by Ember")
    if fail_fast not in (True, False, "raise"):
        raise ValueError(f"fail_fast must be True, False or 'raise', got {fail_fast!r}")
    trainable, named = run_or_experiment, None
    if resources_per_trial is not None:
        if isinstance(trainable, str):
            from .registry import get_trainable_cls

            named, trainable = trainable, get_trainable_cls(trainable)
        trainable = with_resources(trainable, resources_per_trial)
    if checkpoint_config is None:
        checkpoint_config = CheckpointConfig(
            num_to_keep=keep_checkpoints_num, checkpoint_score_attribute=_score_attr(checkpoint_score_attr)[0],
            checkpoint_score_order=_score_attr(checkpoint_score_attr)[1], checkpoint_frequency=checkpoint_freq,
            checkpoint_at_end=checkpoint_at_end)
    elif keep_checkpoints_num is not None or checkpoint_score_attr or checkpoint_freq or checkpoint_at_end:
        raise ValueError("pass either checkpoint_config or keep_checkpoints_num/checkpoint_score_attr/"
                         "checkpoint_freq/checkpoint_at_end, not both")
    if name is None and resume is not None and resume is not False:
        raise ValueError("tune.run(resume=...) needs the experiment's name= to find it")
    rc = RunConfig(name=name, storage_path=storage_path, storage_filesystem=storage_filesystem, stop=stop,
                   verbose=verbose, callbacks=callbacks, checkpoint_config=checkpoint_config,
                   failure_config=FailureConfig(max_failures=max_failures, fail_fast=fail_fast),
                   progress_reporter=progress_reporter)
    tc = TuneConfig(metric=metric, mode=mode, search_alg=search_alg, scheduler=scheduler, num_samples=num_samples,
                    max_concurrent_trials=max_concurrent_trials, time_budget_s=time_budget_s,
                    reuse_actors=reuse_actors, trial_name_creator=trial_name_creator,
                    trial_dirname_creator=trial_dirname_creator)
    tuner = _resumed(trainable, rc, resume, resume_config) or Tuner(
        trainable, param_space=config, tune_config=tc, run_config=rc,
        _tuner_kwargs={"trainable_name": named} if named else None)
    grid = tuner.fit()
    trials = grid.trials()
    analysis = ExperimentAnalysis(grid.experiment_path, storage_filesystem=grid.filesystem, trials=trials,
                                  default_metric=metric, default_mode=mode)
    failed = [t for t in trials if t.status == Trial.ERROR]
    if failed and raise_on_failed_trial:
        raise TuneError(f"Trials did not complete: {[str(t) for t in failed]}")
    return analysis


def _score_attr(attr: str | None) -> tuple[str | None, Literal["max", "min"]]:
    """Ray's "min-loss" spelling: ("loss", "min"); a bare name is maximised."""
    if attr and attr.startswith("min-"):
        return attr[4:], "min"
    return attr, "max"


def _resumed(trainable: Any, rc: RunConfig, resume: Any, resume_config: ResumeConfig | None) -> Tuner | None:
    """A Tuner restored per `resume`, or None to start a new experiment."""
    if resume is None or resume is False:
        if resume_config is not None:
            raise ValueError("resume_config= needs resume= (e.g. resume='AUTO')")
        return None
    if resume not in _RESUME:
        raise ValueError(f"resume must be one of {sorted(map(str, _RESUME))} or False, got {resume!r}")
    when, flags = _RESUME[resume]
    fs, root = storage.resolve(rc.storage_path or storage.DEFAULT_STORAGE_PATH, rc.storage_filesystem)
    path = storage.join(root, rc.name or "")
    if not Tuner.can_restore(path, storage_filesystem=fs):
        if when == "must":
            raise ValueError(f"tune.run(resume={resume!r}): no experiment to resume at {path}")
        return None
    if resume_config is not None:
        return Tuner.restore(path, trainable, storage_filesystem=fs, _resume_config=resume_config)
    return Tuner.restore(path, trainable, storage_filesystem=fs, **flags)
