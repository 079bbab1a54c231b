"""Trainables: the `Trainable` class API, function trainables, Train trainers as trainables, and
the `with_resources` / `with_parameters` wrappers."""
from __future__ import annotations

import inspect
from typing import Any

from .function_trainable import FunctionTrainable, wrap_function
from .trainable import Trainable
from .trainer import is_trainer, wrap_trainer
from .util import PlacementGroupFactory, resources_of, with_parameters, with_resources

__all__ = ["FunctionTrainable", "PlacementGroupFactory", "Trainable", "as_trainable_class",
           "resources_of", "with_parameters", "with_resources"]


def as_trainable_class(trainable: Any) -> type[Trainable]:
    """The Trainable class that runs `trainable` (a function, a Trainable subclass or a trainer)."""
    if inspect.isclass(trainable):
        if not issubclass(trainable, Trainable):
            raise TypeError(f"a trainable class must subclass tune.Trainable, got {trainable.__name__}")
        return trainable
    if is_trainer(trainable):
        return wrap_trainer(trainable)
    if callable(trainable):
        cls = wrap_function(trainable)
        for attr in ("__tune_resources__", "__tune_parameters__", "__tune_default_resources__"):
            if hasattr(trainable, attr):
                setattr(cls, attr, getattr(trainable, attr))
        return cls
    raise TypeError(f"trainable must be a function, a tune.Trainable subclass or a Train trainer, "
                    f"got {type(trainable).__name__}")
