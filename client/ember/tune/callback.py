"""`tune.Callback`: hooks the Tune controller calls in the driver, as Ray Tune calls them.

Pass instances in `RunConfig(callbacks=[...])` (or `tune.run(callbacks=[...])`). Every hook takes
keyword arguments and `**info` for forward compatibility:

    setup(stop, num_samples, total_num_samples)       once, before the first trial
    on_step_begin / on_step_end(iteration, trials)    around each turn of the controller's loop
    on_trial_start(iteration, trials, trial)          a trial's actor was asked to start
    on_trial_restore(iteration, trials, trial)        a trial (re)started from a checkpoint
    on_trial_save(iteration, trials, trial)           the controller received a trial's checkpoint
    on_checkpoint(iteration, trials, trial, checkpoint)
    on_trial_result(iteration, trials, trial, result) after the searcher and scheduler saw it
    on_trial_recover(iteration, trials, trial)        a failed trial will be retried
    on_trial_complete(iteration, trials, trial)       a trial ended (TERMINATED)
    on_trial_error(iteration, trials, trial)          a trial failed for good (ERROR)
    on_experiment_end(trials)                         once, after every trial concluded

`get_state()` / `set_state(state)`: what a callback returns is saved with the experiment state and
handed back when `Tuner.restore` continues the experiment.
"""
from __future__ import annotations

from typing import Any

__all__ = ["Callback", "CallbackList"]


class Callback:
    """Base class of Tune callbacks: override the hooks you need (each does nothing here)."""

    def setup(self, stop: Any = None, num_samples: int | None = None,
              total_num_samples: int | None = None, **info: Any) -> None:
        """Called once at the very beginning of the experiment."""

    def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
        """Called at the start of each turn of the controller's loop."""

    def on_step_end(self, iteration: int, trials: list[Any], **info: Any) -> None:
        """Called at the end of each turn (the iteration counter already counts it)."""

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """Called after a trial was started."""

    def on_trial_restore(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """Called after a trial was restarted from a checkpoint."""

    def on_trial_save(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """Called after a checkpoint of a trial was received."""

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any,
                        result: dict[str, Any], **info: Any) -> None:
        """Called after a result of a trial (the searcher and scheduler saw it first)."""

    def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """Called when a failed trial is going to be retried."""

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """Called after a trial completed."""

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """Called after a trial failed and will not be retried."""

    def on_checkpoint(self, iteration: int, trials: list[Any], trial: Any, checkpoint: Any,
                      **info: Any) -> None:
        """Called after a trial saved a checkpoint (with the checkpoint)."""

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        """Called once after every trial concluded."""

    def get_state(self) -> dict[str, Any] | None:
        """State to save with the experiment (None: nothing)."""
        return None

    def set_state(self, state: dict[str, Any]) -> None:
        """Receives what get_state returned when the experiment is restored."""


_HOOKS = ("on_step_begin", "on_step_end", "on_trial_start", "on_trial_restore", "on_trial_save",
          "on_trial_result", "on_trial_recover", "on_trial_complete", "on_trial_error",
          "on_checkpoint", "on_experiment_end")


class CallbackList:
    """Calls each hook on every callback, in order (what the controller holds)."""

    def __init__(self, callbacks: list[Callback] | None) -> None:
        callbacks = list(callbacks or [])
        for c in callbacks:
            if not isinstance(c, Callback):
                raise TypeError(f"callbacks must be tune.Callback instances, got {type(c).__name__}")
        self.callbacks = callbacks

    def __bool__(self) -> bool:
        return bool(self.callbacks)

    def setup(self, **info: Any) -> None:
        """Calls every callback's setup."""
        for c in self.callbacks:
            c.setup(**info)

    def call(self, hook: str, **info: Any) -> None:
        """Calls `hook` (one of the on_* hooks) on every callback."""
        if hook not in _HOOKS:
            raise ValueError(f"unknown callback hook {hook!r}")
        for c in self.callbacks:
            getattr(c, hook)(**info)

    def get_state(self) -> list[dict[str, Any] | None]:
        """Each callback's state, in order."""
        return [c.get_state() for c in self.callbacks]

    def set_state(self, states: list[dict[str, Any] | None]) -> None:
        """Hands each callback its saved state (matched by position and class order)."""
        for c, s in zip(self.callbacks, states, strict=False):
            if s is not None:
                c.set_state(s)
