"""The callbacks an experiment runs: the user's (`RunConfig.callbacks`) and, as in Ray, the
CSV and JSON loggers when the user did not pass their own (`progress.csv` and a `result.json`
that grows as results arrive in every trial directory)."""
from __future__ import annotations

from typing import Any

from ..callback import Callback, CallbackList
from ..logger import CSVLoggerCallback, JsonLoggerCallback


def callbacks_of(run_config: Any, saved_state: list[dict[str, Any] | None] | None) -> CallbackList:
    """The experiment's callbacks, the user's first, with their saved state handed back."""
    user = list(run_config.callbacks or [])
    for c in user:
        if not isinstance(c, Callback):
            raise TypeError(f"RunConfig.callbacks must hold tune.Callback instances, got {type(c).__name__}")
    out = CallbackList(user)
    if saved_state:
        out.set_state(saved_state)
    for cls in (CSVLoggerCallback, JsonLoggerCallback):
        if not any(isinstance(c, cls) for c in user):
            out.callbacks.append(cls())
    return out
