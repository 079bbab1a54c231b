"""Which deployments' replicas run on the worker's core loop instead of the actor's own loop.

An async actor's methods normally run on its own event loop thread (`ember-actor-loop`), so a
user's `async def` that blocks (a `time.sleep`, a `ray.get`, a long computation) stalls only its
actor, never the worker's core loop (gRPC, replies, other calls). The price is a thread hop each
way per call: core loop → actor loop → core loop, a GIL hand-over and a thread wake-up each.

Ember's own deployments that never block on their request path (LLMServer over the torch engine:
parse, tokenize, hand the request to the engine, push its deltas) skip those hops: their class
is registered here with `never_blocks`, and Serve's replica of exactly that class (not a
subclass, which may override a method with code that blocks) names every replica method in
`__ember_core_loop_methods__`, which the executor reads (executor.core_loop_methods) to run
them as coroutines on the core loop. The whole replica moves, never part of it: its state
(streams, tasks to cancel, the stream channel's server) lives on one loop.

User code cannot get this by accident: the registry is private to Serve, keyed by the class
object itself, and an instance check (`when`) may refuse (LLMServer refuses with an engine class
given by the user, or vLLM's engine).
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, TypeVar

T = TypeVar("T", bound=type)

_NEVER_BLOCKS: dict[type, Callable[[Any], bool]] = {}


def never_blocks(when: Callable[[Any], bool] | None = None) -> Callable[[T], T]:
    """Class decorator, for Ember's own deployment classes only: its methods never block the
    event loop they run on, so its replicas may run on the worker's core loop; `when(instance)`
    (after __init__) may still say no for one instance."""
    def mark(cls: T) -> T:
        _NEVER_BLOCKS[cls] = when if when is not None else (lambda _instance: True)
        return cls
    return mark


def runs_on_core_loop(target: Any, instance: Any) -> bool:
    """Whether a replica of target (the deployment's class; `instance` built from it) runs on
    the core loop: only a class registered itself, whose `when` accepts the instance."""
    if not inspect.isclass(target):
        return False
    when = _NEVER_BLOCKS.get(target)
    if when is None:
        return False
    try:
        return bool(when(instance))
    except Exception:  # noqa: BLE001 - a check that fails is a no
        return False


def replica_methods(replica_cls: type) -> frozenset[str]:
    """The public methods of the replica class (every call the controller, proxy and handles
    make): all of them move together."""
    return frozenset(name for name, value in vars(replica_cls).items()
                     if not name.startswith("_") and callable(value))
