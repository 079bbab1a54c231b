"""Function trainables: `def train_func(config): ... tune.report({...}, checkpoint=...)`.

The function runs in a thread of the trial actor, with a Tune session installed in the process
(`ember.air.session.set_session`), so `tune.report`, `ember.train.report`,
`tune.get_checkpoint` and `tune.get_context` reach it. As in Ray, `report` hands its result to
the controller and blocks until the controller asks for the next one (`train()`), so a trial the
scheduler stops never runs ahead; a stop makes the pending `report` raise `_StopTrial` (a
BaseException, so user `except Exception` blocks do not swallow it) and the thread ends.
Checkpoints are uploaded to the trial's storage directory inside `report`, before it returns.
"""
from __future__ import annotations

import os
import queue
import shutil
import tempfile
import threading
import traceback
from typing import Any, Callable

from ember.air.session import TrainContext, set_session
from ember.train import Checkpoint

from .trainable import Trainable, persist_checkpoint, read_tune_state

__all__ = ["FunctionTrainable", "wrap_function"]

_STOP_JOIN_TIMEOUT_S = 10.0


class _StopTrial(BaseException):
    """Raised inside the user's function by `report` when the controller stopped the trial."""


class _TuneSession:
    """The Session Tune installs in a trial's process."""

    def __init__(self, trainable: FunctionTrainable) -> None:
        self._t = trainable

    def report(self, metrics: dict[str, Any], checkpoint: Checkpoint | None,
               checkpoint_dir_name: str | None) -> None:
        self._t._report(metrics, checkpoint, checkpoint_dir_name)

    def get_checkpoint(self) -> Checkpoint | None:
        return self._t._restore_checkpoint

    def get_context(self) -> TrainContext:
        info = self._t._info
        return TrainContext(experiment_name=info.experiment_name, trial_name=info.trial_name,
                            trial_id=info.trial_id, trial_dir=info.trial_dir,
                            trial_resources=dict(info.resources), storage_path=info.storage_path)

    def get_dataset_shard(self, name: str) -> Any:
        raise RuntimeError("get_dataset_shard() is only available inside a Train worker, not in a "
                           "Tune function trainable")


class FunctionTrainable(Trainable):
    """Runs a training function as a Trainable (the controller only sees train/save/stop)."""

    _function: Callable[..., Any] | None = None
    _name = "func"

    def setup(self, config: dict[str, Any]) -> None:
        self._results: queue.Queue[tuple[str, Any, Any]] = queue.Queue()
        self._continue = threading.Semaphore(0)
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._restore_checkpoint: Checkpoint | None = None
        self._finished = False
        self._num_reports = 0

    def restore(self, checkpoint: Checkpoint) -> None:
        state = read_tune_state(checkpoint)
        self._iteration = int(state.get("training_iteration", 0))
        self._time_total = float(state.get("time_total_s", 0.0))
        self._restore_checkpoint = checkpoint
        self._last_checkpoint = checkpoint

    def _run(self) -> None:
        self._continue.acquire()
        set_session(_TuneSession(self))
        try:
            if self._stopping:
                raise _StopTrial()
            fn = type(self)._function
            if fn is None:
                raise TypeError(f"{type(self).__name__} has no training function (make it with wrap_function)")
            out = fn(self.config)
            if isinstance(out, dict):  # a returned dict is the final report
                self._report(out, None, None)
            self._results.put(("done", None, None))
        except _StopTrial:
            self._results.put(("stopped", None, None))
        except BaseException as e:  # noqa: BLE001 - handed to the controller as the trial's error
            e.__traceback_str__ = traceback.format_exc()  # type: ignore[attr-defined]
            self._results.put(("error", e, None))
        finally:
            set_session(None)

    def _report(self, metrics: dict[str, Any], checkpoint: Checkpoint | None, dir_name: str | None) -> None:
        if self._stopping:
            raise _StopTrial()
        if not isinstance(metrics, dict):
            raise TypeError(f"report() expects a dict of metrics, got {type(metrics).__name__}")
        self._num_reports += 1
        persisted = None
        if checkpoint is not None:
            if not isinstance(checkpoint, Checkpoint):
                raise TypeError(f"report(checkpoint=) expects a Checkpoint, got {type(checkpoint).__name__}")
            state = {"training_iteration": self._iteration + 1,
                     "time_total_s": self._time_total}
            with checkpoint.as_directory() as d:
                persisted = persist_checkpoint(self._info, d, state, dir_name)
            _drop_temp(checkpoint)
            self._last_checkpoint = persisted
        self._results.put(("result", dict(metrics), persisted))
        self._continue.acquire()
        if self._stopping:
            raise _StopTrial()

    def step(self) -> dict[str, Any]:
        if self._finished:
            return {"done": True, "__duplicate__": True}
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"trial-{self.trial_id}", daemon=True)
            self._thread.start()
        self._continue.release()
        kind, value, ckpt = self._results.get()
        if kind == "result":
            metrics: dict[str, Any] = value
            if ckpt is not None:
                metrics["__checkpoint__"] = ckpt
            return metrics
        self._finished = True
        if kind == "error":
            raise value
        return {"done": True, "__duplicate__": True}

    def train(self) -> dict[str, Any]:
        import time

        t0 = time.time()
        result = self.step()
        if result.get("__duplicate__"):
            return result
        return self._finish_result(result, time.time() - t0)

    def save(self, checkpoint_dir: str | None = None) -> Checkpoint | None:
        """A function trainable's checkpoint is the last one it reported."""
        return self._last_checkpoint

    def stop(self) -> bool:
        """Unblocks a pending report with _StopTrial; True when the thread has ended."""
        self._stopping = True
        t = self._thread
        if t is not None and t.is_alive():
            self._continue.release()
            t.join(_STOP_JOIN_TIMEOUT_S)
            if t.is_alive():
                return False
        self.cleanup()
        return True

    def _implements_save(self) -> bool:
        return False


def _drop_temp(checkpoint: Checkpoint) -> None:
    """Removes a local temporary directory made by Checkpoint.from_dict once it is uploaded."""
    from ember.air import checkpoint as checkpoint_mod

    prefix = os.path.join(tempfile.gettempdir(), checkpoint_mod.TEMP_PREFIX)
    if checkpoint.path.startswith(prefix) and os.path.isdir(checkpoint.path):
        shutil.rmtree(checkpoint.path, ignore_errors=True)


def wrap_function(fn: Callable[..., Any], name: str | None = None) -> type[FunctionTrainable]:
    """A FunctionTrainable subclass that runs `fn(config)`."""
    if not callable(fn):
        raise TypeError(f"trainable must be a function or a Trainable class, got {type(fn).__name__}")
    cls_name = name or str(getattr(fn, "__name__", "func"))
    return type(cls_name, (FunctionTrainable,), {"_function": staticmethod(fn), "_name": cls_name})
