"""Actor-pool autoscaling for callable-class UDFs (pure: events in, decisions out).

The pool starts `initial_size` (default `min_size`) actors. It grows by one actor at a time
(a new one only when none is still starting) while inputs wait, every live actor's slots are
taken, the pool is below `max_size` and the cluster has room for another actor. Once its input
is finished and drained it shrinks to nothing; before that, an actor idle for `idle_timeout_s`
is stopped while the pool is above `min_size`.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class PoolView:
    """The pool as the executor sees it now."""

    running: int            # actors ready to take work
    pending: int            # actors still starting (__init__ running)
    busy_slots: int         # tasks in flight on running actors
    queued_inputs: int      # input blocks waiting for an actor
    inputs_done: bool       # upstream finished and nothing queued will come again
    can_afford_actor: bool  # the cluster has the resources of one more actor
    idle_actors: int = 0    # running actors with no task
    longest_idle_s: float = 0.0


@dataclasses.dataclass(frozen=True)
class Decision:
    """+n: start n actors; -n: stop n idle actors; 0: nothing."""

    delta: int
    reason: str = ""


class AutoscalingPolicy:
    """Sizes one operator's actor pool."""

    def __init__(self, min_size: int, max_size: int | None, max_tasks_per_actor: int,
                 initial_size: int | None = None, idle_timeout_s: float = 10.0) -> None:
        if min_size < 1:
            raise ValueError(f"min_size must be >= 1, got {min_size}")
        if max_size is not None and max_size < min_size:
            raise ValueError(f"max_size ({max_size}) must be >= min_size ({min_size})")
        self.min_size = min_size
        self.max_size = max_size
        self.slots_per_actor = max(1, max_tasks_per_actor)
        self.initial_size = min_size if initial_size is None else max(min_size, initial_size)
        if max_size is not None:
            self.initial_size = min(self.initial_size, max_size)
        self.idle_timeout_s = idle_timeout_s

    def decide(self, v: PoolView) -> Decision:
        total = v.running + v.pending
        if v.inputs_done and v.queued_inputs == 0:
            if v.idle_actors:
                return Decision(-v.idle_actors, "input finished")
            return Decision(0)
        if total < self.initial_size:
            return Decision(self.initial_size - total, "initial size")
        at_max = self.max_size is not None and total >= self.max_size
        free = v.running * self.slots_per_actor - v.busy_slots
        if v.queued_inputs > max(free, 0) and not at_max and v.pending == 0 and v.can_afford_actor:
            return Decision(1, "all actors busy")
        if (v.idle_actors and v.queued_inputs == 0 and total > self.min_size
                and v.longest_idle_s >= self.idle_timeout_s):
            return Decision(-1, "idle")
        return Decision(0)
