"""Compute strategies: tasks or an (autoscaling) actor pool, picked as Ray Data 2.60 picks them."""
from __future__ import annotations

import dataclasses
import inspect
from typing import Any


@dataclasses.dataclass(frozen=True)
class TaskPoolStrategy:
    """Run the UDF as tasks; `size` caps how many run at once (None: as the resources allow)."""

    size: int | None = None


@dataclasses.dataclass(frozen=True)
class ActorPoolStrategy:
    """Run a callable class on a pool of actors of `size`, or between min_size and max_size."""

    size: int | None = None
    min_size: int | None = None
    max_size: int | None = None
    initial_size: int | None = None
    max_tasks_in_flight_per_actor: int | None = None

    def __post_init__(self) -> None:
        if self.size is not None:
            if self.size < 1:
                raise ValueError(f"ActorPoolStrategy size must be >= 1, got {self.size}")
            object.__setattr__(self, "min_size", self.size)
            object.__setattr__(self, "max_size", self.size)
        mn = 1 if self.min_size is None else self.min_size
        if mn < 1:
            raise ValueError(f"min_size must be >= 1, got {mn}")
        object.__setattr__(self, "min_size", mn)
        if self.max_size is not None and self.max_size < mn:
            raise ValueError(f"max_size ({self.max_size}) must be >= min_size ({mn})")


def is_callable_class(fn: Any) -> bool:
    """True when fn is a class whose instances are called per batch/row."""
    return inspect.isclass(fn)


def get_compute(fn: Any, compute: Any, concurrency: Any,
                fn_constructor_args: Any = None) -> TaskPoolStrategy | ActorPoolStrategy:
    """The strategy for a UDF from its kind, `compute` and `concurrency` (Ray's rules)."""
    cls = is_callable_class(fn)
    if not cls and fn_constructor_args is not None:
        raise ValueError("fn_constructor_args can only be given with a callable class as fn, "
                         f"got {fn!r}")
    if compute is not None:
        if compute == "tasks":
            compute = TaskPoolStrategy()
        elif compute == "actors":
            compute = ActorPoolStrategy()
        if cls and isinstance(compute, TaskPoolStrategy):
            raise ValueError(f"the callable class {fn.__name__} cannot run with the task pool "
                             "strategy: pass an ActorPoolStrategy or concurrency=n")
        if not cls and isinstance(compute, ActorPoolStrategy):
            raise ValueError(f"the function {fn!r} cannot run on an actor pool: pass a callable "
                             "class, or use tasks")
        if not isinstance(compute, (TaskPoolStrategy, ActorPoolStrategy)):
            raise ValueError(f"compute must be a TaskPoolStrategy or an ActorPoolStrategy, got {compute!r}")
        return compute
    if concurrency is not None:
        if isinstance(concurrency, tuple):
            if len(concurrency) not in (2, 3) or not all(isinstance(c, int) for c in concurrency):
                raise ValueError(f"concurrency must be an int or a tuple of 2 or 3 ints, got {concurrency!r}")
            if not cls:
                raise ValueError(f"concurrency is a tuple but fn is not a callable class: {fn!r}; "
                                 "use concurrency=n to cap the tasks of a function")
            init = concurrency[2] if len(concurrency) == 3 else None
            return ActorPoolStrategy(min_size=concurrency[0], max_size=concurrency[1], initial_size=init)
        if isinstance(concurrency, int) and not isinstance(concurrency, bool):
            if concurrency < 1:
                raise ValueError(f"concurrency must be >= 1, got {concurrency}")
            return ActorPoolStrategy(size=concurrency) if cls else TaskPoolStrategy(size=concurrency)
        raise ValueError(f"concurrency must be an int or a tuple of ints, got {concurrency!r}")
    return ActorPoolStrategy(min_size=1, max_size=None) if cls else TaskPoolStrategy()
