"""A Train trainer (`TorchTrainer(...)`) as a Tune trainable, as Ray's `Tuner(trainer, ...)`.

Each trial runs the trainer's `fit()` inside its trial actor, on a copy of the trainer whose
`train_loop_config` is the trainer's own merged with the trial's sampled
`param_space["train_loop_config"]` (other top-level keys that the trainer has as attributes,
such as `scaling_config`, replace the trainer's), and whose `run_config` writes under the
trial's directory. The trial's placement group is the trainer's: `scaling_config.trainer_resources`
(default none) for the trial actor, plus one bundle per worker with the `placement_strategy`;
the workers the trainer starts run in those bundles of the trial's group (the worker group finds
it with `get_current_placement_group()`), as Ray Train's do under Tune.

How results reach Tune: the trainer runs with the trial's Tune session installed in the trial
process. A Train controller that finds a session in its process (`ember.air.session.
get_session()`) while it runs forwards rank 0's reports through `session.report(...)`, and each
one is a Tune result (schedulers can stop the trial early). If the trainer forwarded nothing,
the trial reports the rows of `Result.metrics_dataframe` (or the final metrics) and the final
checkpoint after `fit()` returns. A failed `fit()` (a Result with `error`) fails the trial.
"""
from __future__ import annotations

import copy
from typing import Any, cast

from .function_trainable import FunctionTrainable, _TuneSession, wrap_function
from .util import PlacementGroupFactory

__all__ = ["is_trainer", "wrap_trainer"]


def is_trainer(obj: Any) -> bool:
    """A Train trainer instance (anything with fit() and a train_loop_per_worker/scaling_config)."""
    return (not isinstance(obj, type) and callable(getattr(obj, "fit", None))
            and (hasattr(obj, "train_loop_per_worker") or hasattr(obj, "scaling_config")))


def _trainer_resources(trainer: Any, config: dict[str, Any]) -> PlacementGroupFactory:
    scaling = config.get("scaling_config") or getattr(trainer, "scaling_config", None)
    if scaling is None:
        return PlacementGroupFactory([{"CPU": 1.0}])
    head = dict(getattr(scaling, "trainer_resources", None) or {"CPU": 0.0})
    workers = [dict(scaling.worker_resources)] * int(scaling.num_workers)
    return PlacementGroupFactory([head] + workers, strategy=getattr(scaling, "placement_strategy", "PACK"))


def wrap_trainer(trainer: Any) -> type[FunctionTrainable]:
    """A function trainable that runs `trainer.fit()` per trial with the trial's config."""

    def train_with_trainer(config: dict[str, Any]) -> None:
        from ember.air.session import get_session
        from ember.train import Result, RunConfig

        from .. import report
        from ..tune_config import TuneRunConfig

        t = copy.copy(trainer)
        loop_cfg = dict(getattr(trainer, "train_loop_config", None) or {})
        loop_cfg.update(config.get("train_loop_config") or {})
        if hasattr(t, "train_loop_config"):
            t.train_loop_config = loop_cfg
        for key, value in config.items():
            if key != "train_loop_config" and hasattr(t, key):
                setattr(t, key, value)
        session = cast(_TuneSession, get_session())  # the trial's: this runs as a function trainable
        ctx = session.get_context()
        base = getattr(trainer, "run_config", None) or RunConfig()
        keep: tuple[str, ...] = ("failure_config", "checkpoint_config")
        if not isinstance(base, TuneRunConfig):  # the trainer's own Train fields apply to each trial's run
            keep += ("worker_runtime_env", "logging_config", "callbacks")
        fields = {k: getattr(base, k) for k in keep}
        rc = (TuneRunConfig if isinstance(base, TuneRunConfig) else RunConfig)(
            name="trainer", storage_path=ctx.trial_dir, **fields)
        rc.storage_filesystem = session._t._info.filesystem
        if hasattr(t, "run_config"):
            t.run_config = rc
        before = session._t._num_reports
        result: Result = t.fit()
        error = getattr(result, "error", None)
        if error is not None:
            raise error
        if session._t._num_reports > before:
            return
        rows = _rows(result)
        for i, row in enumerate(rows):
            last = i == len(rows) - 1
            report(row, checkpoint=result.checkpoint if last else None)

    train_with_trainer.__tune_default_resources__ = (  # type: ignore[attr-defined]
        lambda config: _trainer_resources(trainer, config))
    name = type(trainer).__name__
    cls = wrap_function(train_with_trainer, name=name)
    cls.__tune_default_resources__ = train_with_trainer.__tune_default_resources__  # type: ignore[attr-defined]
    return cls


def _rows(result: Any) -> list[dict[str, Any]]:
    df = getattr(result, "metrics_dataframe", None)
    if df is not None and len(df):
        drop = {"config", "training_iteration", "time_total_s", "time_this_iter_s", "timestamp"}
        return [{k: v for k, v in row.items() if k not in drop} for row in df.to_dict("records")]
    return [dict(result.metrics or {})]
