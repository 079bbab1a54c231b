"""`DataParallelTrainer`: runs `train_loop_per_worker` on `ScalingConfig.num_workers` ranks with
a framework backend (TorchTrainer is this with `TorchConfig`), and `restore` / `can_restore`.

`fit()` records the trainer's arguments in `storage_path/<name>/trainer.pkl`, runs the
controller (restarts from the latest checkpoint on failures) and returns a `Result`; when the
run fails for good it raises `WorkerGroupError` (a `TrainingFailedError`, as Ray Train 2.60),
whose `.result.error` is the cause. `restore(path)` reloads the arguments (datasets must be
passed again) and continues from the run's recorded state and latest checkpoint.
"""
from __future__ import annotations

import dataclasses
import datetime
import inspect
import os
from typing import Any, Callable

import pyarrow.fs

from ember.air.checkpoint import Checkpoint
from ember.air.config import DataConfig, RunConfig, ScalingConfig
from ember.air.result import Result

from ._internal import data_shards
from ._internal import logs as train_logs
from ._internal.run_state import RunStorage
from .backend import BackendConfig
from .callback import UserCallback
from .exceptions import ControllerError, TrainingFailedError, WorkerGroupError


def _check_loop(fn: Any) -> None:
    if not callable(fn):
        raise TypeError(f"train_loop_per_worker must be a callable (a function taking no argument or "
                        f"a config dict), got {type(fn).__name__}: {fn!r}")
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.default is inspect.Parameter.empty
                  and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return
    if len(params) > 1:
        raise ValueError(f"train_loop_per_worker must take 0 or 1 argument (the config dict), "
                         f"{getattr(fn, '__name__', fn)} takes {len(params)}")


class DataParallelTrainer:
    """A trainer running one copy of the training function per worker."""

    _default_backend: type[BackendConfig] = BackendConfig

    def __init__(self, train_loop_per_worker: Callable[..., Any], *, train_loop_config: dict[str, Any] | None = None,
                 backend_config: BackendConfig | None = None, scaling_config: ScalingConfig | None = None,
                 run_config: RunConfig | None = None, datasets: dict[str, Any] | None = None,
                 dataset_config: DataConfig | None = None, resume_from_checkpoint: Checkpoint | None = None,
                 metadata: dict[str, Any] | None = None) -> None:
        _check_loop(train_loop_per_worker)
        if train_loop_config is not None and not isinstance(train_loop_config, dict):
            raise TypeError(f"train_loop_config must be a dict, got {type(train_loop_config).__name__}")
        for what, value, cls in (("scaling_config", scaling_config, ScalingConfig),
                                 ("run_config", run_config, RunConfig),
                                 ("dataset_config", dataset_config, DataConfig),
                                 ("backend_config", backend_config, BackendConfig),
                                 ("resume_from_checkpoint", resume_from_checkpoint, Checkpoint)):
            if value is not None and not isinstance(value, cls):
                raise TypeError(f"{what} must be a {cls.__name__}, got {type(value).__name__}")
        for cb in (run_config.callbacks or []) if run_config is not None else []:
            if not isinstance(cb, UserCallback):
                raise NotImplementedError(
                    f"RunConfig(callbacks=...) is not supported by an Ember Trainer for {type(cb).__name__}: "
                    "a trainer's callbacks are ember.train.UserCallback instances (Tune's Tuner and tune.run "
                    "call tune.Callbacks; pass them there)")
        self.train_loop_per_worker = train_loop_per_worker
        self.train_loop_config = train_loop_config
        self.backend_config = backend_config or self._default_backend()
        self.scaling_config = scaling_config or ScalingConfig()
        self.run_config = run_config or RunConfig()
        self.datasets = data_shards.validate(datasets)
        self.dataset_config = dataset_config
        self.resume_from_checkpoint = resume_from_checkpoint
        self.metadata = metadata
        self._restored_path: str | None = None

    # --- restore ---------------------------------------------------------------------------

    @classmethod
    def can_restore(cls, path: str | os.PathLike[str], storage_filesystem: pyarrow.fs.FileSystem | None = None) -> bool:
        """Whether `path` is a run directory written by a trainer's fit()."""
        try:
            return RunStorage.open(os.fspath(path), storage_filesystem).has_trainer()
        except (ValueError, OSError):
            return False

    @classmethod
    def restore(cls, path: str | os.PathLike[str], train_loop_per_worker: Callable[..., Any] | None = None,
                train_loop_config: dict[str, Any] | None = None, *, datasets: dict[str, Any] | None = None,
                scaling_config: ScalingConfig | None = None,
                storage_filesystem: pyarrow.fs.FileSystem | None = None) -> DataParallelTrainer:
        """The trainer of an interrupted or failed run at `path` (a local directory or URI):
        its `fit()` resumes from the latest recorded checkpoint. Arguments given here replace the
        recorded ones; datasets are not recorded and must be given again."""
        import cloudpickle

        run = RunStorage.open(os.fspath(path), storage_filesystem)
        if not run.has_trainer():
            raise ValueError(f"{os.fspath(path)} is not a Train run directory (no trainer.pkl); "
                             "can_restore() tells")
        saved = cloudpickle.loads(run.load_trainer())
        if not issubclass(cls, saved["class"]) and not issubclass(saved["class"], cls):
            raise ValueError(f"{path} was written by {saved['class'].__name__}, not {cls.__name__}")
        kwargs = saved["kwargs"]
        if train_loop_per_worker is not None:
            kwargs["train_loop_per_worker"] = train_loop_per_worker
        if train_loop_config is not None:
            kwargs["train_loop_config"] = train_loop_config
        if scaling_config is not None:
            kwargs["scaling_config"] = scaling_config
        missing = set(saved.get("dataset_names", [])) - set(datasets or {})
        if missing:
            raise ValueError(f"restore() needs the datasets the run was given again: missing {sorted(missing)}")
        rc = kwargs["run_config"]
        kwargs["run_config"] = dataclasses.replace(rc, name=run.name, storage_path=run.path.rsplit("/", 1)[0] or "/",
                                                   storage_filesystem=run.fs)
        trainer = cls(datasets=datasets, **kwargs)
        trainer._restored_path = run.path
        return trainer

    # --- fit -------------------------------------------------------------------------------

    def _kwargs(self) -> dict[str, Any]:
        return {"train_loop_per_worker": self.train_loop_per_worker, "train_loop_config": self.train_loop_config,
                "backend_config": self.backend_config, "scaling_config": self.scaling_config,
                "run_config": dataclasses.replace(self.run_config, storage_filesystem=None),
                "dataset_config": self.dataset_config, "resume_from_checkpoint": self.resume_from_checkpoint,
                "metadata": self.metadata}

    def fit(self) -> Result:
        """Runs training to the end; returns the Result, or raises TrainingFailedError."""
        import cloudpickle

        import ember

        from ._internal.controller import TrainController

        if not ember.is_initialized():
            ember.init()
        rc = self.run_config
        name = rc.name or f"{type(self).__name__}_{datetime.datetime.now():%Y-%m-%d_%H-%M-%S}"
        run = RunStorage.create(rc.storage_path, name, rc.storage_filesystem)
        if self._restored_path is None:
            kwargs = {k: v for k, v in self._kwargs().items() if k in self._init_params()}
            try:
                blob = cloudpickle.dumps({"class": type(self), "kwargs": kwargs,
                                          "dataset_names": sorted(self.datasets)})
            except Exception as e:  # noqa: BLE001 - say which argument cannot travel
                raise TypeError(f"the trainer's arguments must be picklable to run on workers: {e}") from e
            run.save_trainer(blob)
        controller = TrainController(
            fn=self.train_loop_per_worker, config=self.train_loop_config, scaling=self.scaling_config,
            run_config=rc, backend=self.backend_config, datasets=self.datasets,
            dataset_config=self.dataset_config, run=run, trainer_name=type(self).__name__,
            resume_from=self.resume_from_checkpoint)
        level = rc.logging_config.log_level if rc.logging_config is not None else "INFO"
        logs = train_logs.configure("controller", level, {"run_name": name})
        try:
            controller.run_to_end()
        finally:
            logs.close()
        result = self._result(controller, run)
        error = result.error
        if error is not None:
            message = (f"Training failed ({controller.failures.describe()}); the run is at {run.uri()} and can be "
                       f"resumed with {type(self).__name__}.restore(path). Cause: {error}")
            if isinstance(error, WorkerGroupError):  # what Ray 2.60's fit() raises for failed ranks
                raise WorkerGroupError(message, error.worker_failures, result) from error
            if isinstance(error, ControllerError):  # a callback or the group's start failed
                raise ControllerError(error.controller_failure, result, message) from error.controller_failure
            raise TrainingFailedError(message, result) from error
        return result

    def _init_params(self) -> set[str]:
        return set(inspect.signature(type(self).__init__).parameters) - {"self"}

    @staticmethod
    def _result(controller: Any, run: RunStorage) -> Result:
        rows = run.load_rows()
        try:
            import pandas

            frame = pandas.DataFrame(rows)
        except ImportError:
            frame = None
        return Result(metrics=controller.last_metrics, checkpoint=controller.start_checkpoint()
                      if controller.checkpoints.latest is not None else None,
                      error=controller.error, path=run.uri(), metrics_dataframe=frame,
                      best_checkpoints=controller.best_checkpoints(), filesystem=run.fs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(scaling_config={self.scaling_config!r}, run_config={self.run_config!r})"
