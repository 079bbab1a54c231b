"""`Tuner`: the entry point of Tune (Ray Tune's interface).

    tuner = tune.Tuner(train_func, param_space={...},
                       tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=50,
                                                   scheduler=ASHAScheduler()),
                       run_config=tune.RunConfig(storage_path="s3://bucket/results"))
    results = tuner.fit()

`fit()` checks the configuration (bad input fails before any trial starts), writes `tuner.pkl`
under `storage_path/name` and runs the controller in this process; `Tuner.restore(path,
trainable)` continues an interrupted experiment from its saved state.
"""
from __future__ import annotations

import datetime
import sys
from typing import Any

from ember.air import storage
from ember.train import RunConfig as TrainRunConfig

from ._internal import experiment_state as es
from ._internal.controller import TuneController
from ._internal.default_callbacks import callbacks_of
from .experiment.trial import Trial
from .result_grid import ResultGrid
from .schedulers.trial_scheduler import FIFOScheduler, TrialScheduler
from .search.basic_variant import BasicVariantGenerator, SearchAlgorithm, SearchGenerator
from .search.searcher import Searcher
from .search.variant_generator import validate_space
from .stopper import as_stopper
from .trainable import as_trainable_class
from .trainable.function_trainable import FunctionTrainable
from .trainable.trainable import Trainable
from .tune_config import ResumeConfig, RunConfig, TuneConfig

__all__ = ["Tuner"]


def _trainable_name(trainable: Any) -> str:
    if isinstance(trainable, type):
        return trainable.__name__
    return getattr(trainable, "__name__", None) or type(trainable).__name__


class Tuner:
    """Runs a hyperparameter search over `param_space` with `trainable`."""

    def __init__(self, trainable: Any = None, *, param_space: dict[str, Any] | None = None,
                 tune_config: TuneConfig | None = None, run_config: TrainRunConfig | None = None,
                 _tuner_kwargs: dict[str, Any] | None = None) -> None:
        if trainable is None:
            raise TypeError("Tuner needs a trainable: a function, a tune.Trainable subclass or a Train trainer")
        extra = dict(_tuner_kwargs or {})
        registered = trainable if isinstance(trainable, str) else extra.pop("trainable_name", None)
        if extra:
            raise TypeError(f"Tuner(_tuner_kwargs=) does not take {sorted(extra)}")
        if isinstance(trainable, str):
            from .registry import get_trainable_cls

            trainable = get_trainable_cls(registered)
        validate_space(param_space)
        tune_config = tune_config if tune_config is not None else TuneConfig()
        run_config = run_config if run_config is not None else RunConfig()
        if not isinstance(tune_config, TuneConfig):
            raise TypeError(f"tune_config must be a tune.TuneConfig, got {type(tune_config).__name__}")
        if not isinstance(run_config, TrainRunConfig):
            raise TypeError(f"run_config must be a tune.RunConfig or train.RunConfig, got {type(run_config).__name__}")
        if tune_config.scheduler is not None and not isinstance(tune_config.scheduler, TrialScheduler):
            raise TypeError(f"TuneConfig.scheduler must be a TrialScheduler, got {type(tune_config.scheduler).__name__}")
        if tune_config.search_alg is not None and not isinstance(tune_config.search_alg, (Searcher, SearchAlgorithm)):
            raise TypeError(f"TuneConfig.search_alg must be a Searcher, got {type(tune_config.search_alg).__name__}")
        as_stopper(run_config.stop)  # fail now on a bad stop criterion
        self._trainable = trainable
        self._name = registered or _trainable_name(trainable)
        self._trainable_cls = as_trainable_class(trainable)
        self._param_space = dict(param_space or {})
        self._tc = tune_config
        self._rc = run_config
        self._restore: dict[str, Any] | None = None
        self._results: ResultGrid | None = None

    # ---- restore ------------------------------------------------------------------------
    @classmethod
    def restore(cls, path: str, trainable: Any, resume_unfinished: bool = True, resume_errored: bool = False,
                restart_errored: bool = False, param_space: dict[str, Any] | None = None,
                storage_filesystem: Any = None, _resume_config: Any = None) -> Tuner:
        """A Tuner that continues the experiment saved at `path` (storage_path/name): finished
        trials are kept, unfinished ones resume from their latest checkpoint, errored ones are
        resumed (`resume_errored`) or started afresh (`restart_errored`)."""
        if _resume_config is not None:
            if not isinstance(_resume_config, ResumeConfig):
                raise TypeError(f"_resume_config must be a tune.ResumeConfig, got {type(_resume_config).__name__}")
            flags = _resume_config.restore_flags()
            resume_unfinished, resume_errored = flags["resume_unfinished"], flags["resume_errored"]
            restart_errored = flags["restart_errored"]
        fs, exp_path = storage.resolve(str(path), storage_filesystem)
        if not es.can_restore(fs, exp_path):
            raise ValueError(f"cannot restore from {path}: no {es.TUNER_FILE} and {es.STATE_FILE} there")
        data = es.load_tuner(fs, exp_path)
        rc = data["run_config"]
        tuner = cls(trainable, param_space=param_space if param_space is not None else data["param_space"],
                    tune_config=data["tune_config"], run_config=rc)
        tuner._restore = {"fs": fs, "exp_path": exp_path, "resume_unfinished": resume_unfinished,
                          "resume_errored": resume_errored, "restart_errored": restart_errored}
        return tuner

    @classmethod
    def can_restore(cls, path: str, storage_filesystem: Any = None) -> bool:
        """Whether `path` holds an experiment Tuner.restore can continue."""
        fs, exp_path = storage.resolve(str(path), storage_filesystem)
        return es.can_restore(fs, exp_path)

    # ---- fit ----------------------------------------------------------------------------
    def _experiment_location(self) -> tuple[Any, str, str]:
        if self._restore is not None:
            exp_path = self._restore["exp_path"]
            return self._restore["fs"], exp_path, exp_path.rstrip("/").rsplit("/", 1)[-1]
        name = self._rc.name or f"{self._name}_" \
                                f"{datetime.datetime.now().strftime('%Y-%m-%d_%H-%M-%S')}"
        fs, root = storage.resolve(self._rc.storage_path or storage.DEFAULT_STORAGE_PATH,
                                   self._rc.storage_filesystem)
        return fs, storage.join(root, name), name

    def _policies(self) -> tuple[Any, TrialScheduler]:
        tc = self._tc
        scheduler = tc.scheduler if tc.scheduler is not None else FIFOScheduler()
        scheduler.set_search_properties(tc.metric, tc.mode)
        if scheduler.requires_metric() and not (scheduler.metric and scheduler.mode):
            raise ValueError(f"{type(scheduler).__name__} needs a metric and a mode: pass "
                             "TuneConfig(metric=..., mode=...) or give them to the scheduler")
        raw = tc.search_alg if tc.search_alg is not None else BasicVariantGenerator()
        search = SearchGenerator(raw) if isinstance(raw, Searcher) else raw
        num_samples = sys.maxsize if tc.num_samples == -1 else tc.num_samples
        search.set_search_properties(tc.metric, tc.mode, self._param_space, num_samples=num_samples)
        if isinstance(raw, Searcher) and not (raw.metric and raw.mode):
            raise ValueError(f"{type(raw).__name__} needs a metric and a mode: pass "
                             "TuneConfig(metric=..., mode=...) or give them to the searcher")
        return search, scheduler

    def _reuse_actors(self) -> bool:
        if self._tc.reuse_actors is not None:
            return bool(self._tc.reuse_actors)
        cls = self._trainable_cls
        return issubclass(cls, FunctionTrainable) or cls.reset_config is not Trainable.reset_config

    def _restored_trials(self, state: dict[str, Any], exp_path: str) -> list[Trial]:
        r = self._restore or {}
        trials: list[Trial] = state["trials"]
        for t in trials:
            t.path = storage.join(exp_path, t.local_dir_name) if t.local_dir_name else t.path
            t.filesystem = self._restore["fs"] if self._restore else t.filesystem
            if t.status == Trial.ERROR:
                if r.get("restart_errored"):
                    t.checkpoint, t.checkpoints, t.metric_history, t.last_result = None, [], [], {}
                    t.iteration, t.time_total_s, t.num_failures, t.error, t.error_msg = 0, 0.0, 0, None, ""
                    t.status = Trial.PENDING
                elif r.get("resume_errored"):
                    t.num_failures, t.error, t.error_msg = 0, None, ""
                    t.status = Trial.PENDING
            elif t.status in (Trial.RUNNING, Trial.PAUSED, Trial.PENDING):
                t.status = Trial.PENDING if r.get("resume_unfinished", True) else Trial.TERMINATED
        return trials

    def fit(self) -> ResultGrid:
        """Runs the experiment and returns every trial's result (trial errors are recorded in the
        grid, not raised)."""
        import ember

        fs, exp_path, name = self._experiment_location()
        stopper = as_stopper(self._rc.stop)
        params = getattr(self._trainable_cls, "__tune_parameters__", None)
        if self._restore is None:
            search, scheduler = self._policies()
            state: dict[str, Any] = {}
        else:
            state = es.load_experiment_state(fs, exp_path)
            search, scheduler = state["search_alg"], state["scheduler"]
        if not ember.is_initialized():
            ember.init()
        if params is not None:
            params.put()
        storage.makedirs(fs, exp_path)
        if self._restore is None:
            es.save_tuner(fs, exp_path, {"param_space": self._param_space, "tune_config": self._tc,
                                         "run_config": self._rc, "trainable_name": self._name})
        trials = self._restored_trials(state, exp_path) if self._restore is not None else []
        callbacks = callbacks_of(self._rc, state.get("callbacks"))
        callbacks.setup(stop=stopper, num_samples=self._tc.num_samples,
                        total_num_samples=search.total_samples)
        controller = TuneController(
            trainable_cls=self._trainable_cls, trainable_name=self._name,
            param_space=self._param_space, tune_config=self._tc, run_config=self._rc, search_alg=search,
            scheduler=scheduler, stopper=stopper, fs=fs, exp_path=exp_path, experiment_name=name,
            reuse_actors=self._reuse_actors(), trials=trials, elapsed_s=float(state.get("elapsed_s", 0.0)),
            trial_index=int(state.get("trial_index", 0)), callbacks=callbacks)
        trials = controller.run()
        self._results = ResultGrid(trials, metric=self._tc.metric, mode=self._tc.mode,
                                   experiment_path=exp_path, filesystem=fs)
        return self._results

    def get_results(self) -> ResultGrid:
        """The results of the last fit(), or of the restored experiment as it was saved."""
        if self._results is not None:
            return self._results
        if self._restore is not None:
            fs, exp_path = self._restore["fs"], self._restore["exp_path"]
            state = es.load_experiment_state(fs, exp_path)
            return ResultGrid(state["trials"], metric=self._tc.metric, mode=self._tc.mode,
                              experiment_path=exp_path, filesystem=fs)
        raise RuntimeError("get_results() before fit(): call fit() first, or Tuner.restore(...)")
