"""`tune.register_trainable`: a trainable under a name, so `tune.run("name")`, `Tuner("name")`
and `tune.Experiment`-style scripts can refer to it by string, as in Ray.

The registry lives in the driver: the Tune controller runs there and ships the trainable's class
to trial actors itself, so workers never look names up.
"""
from __future__ import annotations

import threading
from typing import Any

__all__ = ["get_trainable_cls", "is_registered", "register_trainable"]

_lock = threading.Lock()
_trainables: dict[str, Any] = {}


def register_trainable(name: str, trainable: Any, warn: bool = True) -> None:
    """Registers a function or `tune.Trainable` subclass under `name` (a later call replaces it)."""
    from .trainable import as_trainable_class

    if not isinstance(name, str) or not name:
        raise ValueError(f"register_trainable needs a non-empty name, got {name!r}")
    as_trainable_class(trainable)  # a bad trainable fails here, naming the problem
    with _lock:
        _trainables[name] = trainable


def is_registered(name: str) -> bool:
    """Whether a trainable is registered under `name`."""
    return name in _trainables


def get_trainable_cls(name: str) -> Any:
    """The trainable registered under `name`."""
    try:
        return _trainables[name]
    except KeyError:
        known = ", ".join(sorted(_trainables)) or "none"
        raise ValueError(f"unknown trainable {name!r}: register it first with "
                         f"tune.register_trainable({name!r}, fn_or_class) (registered: {known})") from None
