"""The trial actor: one Ember actor hosts one trial at a time (and, when the Tuner reuses actors,
one trial after another), driving a `Trainable` for the controller.

The trainable class arrives once, when the actor is created (pickled bytes, put into the object
store once per run); each trial is started with `start(config, info, restore)` and advanced with
`train()`, one result per call. `stop()` ends the trial and says whether the process can host
another one. Methods run one at a time, in the order the controller sends them.
"""
from __future__ import annotations

from typing import Any

import cloudpickle

from ember.train import Checkpoint

from ..trainable.function_trainable import FunctionTrainable
from ..trainable.trainable import Trainable


class TrialActor:
    """Hosts trials of one trainable class."""

    def __init__(self, trainable_blob: bytes) -> None:
        self._cls: type[Trainable] = cloudpickle.loads(trainable_blob)
        self._trainable: Trainable | None = None
        self._start_error: BaseException | None = None

    def start(self, config: dict[str, Any], info: dict[str, Any], restore: Checkpoint | None) -> bool:
        """Creates the trial's trainable (reusing this process), restored from `restore` if given."""
        self._start_error = None
        try:
            return self._start(config, info, restore)
        except BaseException as e:
            self._start_error = e  # train() re-raises it: the controller sees the real cause
            raise

    def _start(self, config: dict[str, Any], info: dict[str, Any], restore: Checkpoint | None) -> bool:
        old, self._trainable = self._trainable, None
        if old is not None and type(old).reset_config is not Trainable.reset_config:
            if old.reset_config(dict(config)):  # Ray's reuse: the same object, new config
                old.config = dict(config)
                old._reset_for_trial(info)
                t = old
            else:
                old.stop()
                t = self._cls(config, trial_info=info)
        else:
            if old is not None:
                old.stop()
            t = self._cls(config, trial_info=info)
        if restore is not None:
            t.restore(restore)
        self._trainable = t
        return True

    def train(self) -> dict[str, Any]:
        """One result (`{"done": True, "__duplicate__": True}` once a function trainable returned)."""
        if self._start_error is not None:
            raise self._start_error
        if self._trainable is None:
            raise RuntimeError("train() before start()")
        return self._trainable.train()

    def save(self) -> Checkpoint | None:
        """A checkpoint of the trial as it is now (function trainables: the last one reported)."""
        if self._trainable is None:
            return None
        t = self._trainable
        if isinstance(t, FunctionTrainable) or type(t).save_checkpoint is not Trainable.save_checkpoint:
            return t.save()
        return t.latest_checkpoint()

    def stop(self) -> bool:
        """Ends the current trial; True when this process can host another."""
        t, self._trainable = self._trainable, None
        try:
            return True if t is None else bool(t.stop())
        except Exception:  # noqa: BLE001 - a failing cleanup makes the process unfit for reuse
            return False
        finally:
            _flush_spans()

    def ping(self) -> bool:
        """Liveness check."""
        return True


def _flush_spans() -> None:
    """Exports this process's finished spans now: the controller may kill the actor next."""
    from opentelemetry import trace

    flush = getattr(trace.get_tracer_provider(), "force_flush", None)
    if flush is not None:
        flush(5000)
