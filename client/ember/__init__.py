"""Ember: a distributed runtime for Python with Ray's API.

    import ember as ray

    @ray.remote
    def f(x):
        return x * 2

    print(ray.get([f.remote(i) for i in range(4)]))
"""
from __future__ import annotations

from typing import Any, Callable

from ember import actor, exceptions, util  # util after actor: ember.util imports ember.actor
from ember._private.api.logging_config import LoggingConfig
from ember._private.api.remote_function import RemoteFunction
from ember._private.api.runtime_context import get_runtime_context
from ember._private.objects.object_ref import ObjectRef
from ember._private.owner.generator import ObjectRefGenerator
from ember._private.worker import (
    available_resources,
    cancel,
    cluster_resources,
    get,
    get_gpu_ids,
    init,
    is_initialized,
    nodes,
    put,
    shutdown,
    wait,
)
from ember.actor import ActorClass, get_actor, kill, method

__version__ = "0.1.0"

__all__ = [
    "LoggingConfig", "ObjectRef", "ObjectRefGenerator", "actor", "available_resources", "cancel", "cluster_resources", "exceptions",
    "get", "get_actor", "get_gpu_ids", "get_runtime_context", "init", "is_initialized", "kill",
    "method", "nodes", "put", "remote", "shutdown", "util", "wait", "__version__",
]


# Libraries load on first use (`ember.data`, `ray.train.report`, ...), so a worker or a service
# never pays for libraries it does not use.
_LAZY_SUBMODULES = ("dag", "data", "experimental", "runtime_env", "serve", "train", "tune")


def __getattr__(name: str) -> Any:
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f"ember.{name}")
    raise AttributeError(f"module 'ember' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_SUBMODULES))


def remote(*args: Any, **options: Any) -> Any:
    """Turns a function into a task: `@ember.remote` or `@ember.remote(num_cpus=2, ...)`."""
    if len(args) == 1 and not options and callable(args[0]):
        return _make_remote(args[0], {})
    if args:
        raise TypeError("The @ember.remote decorator must be applied either with no arguments and "
                        "no parentheses, or with keyword arguments only, e.g. @ember.remote(num_cpus=1)")

    def decorator(fn: Callable[..., Any]) -> Any:
        return _make_remote(fn, options)

    return decorator


def _make_remote(obj: Any, options: dict[str, Any]) -> Any:
    import inspect

    if inspect.isclass(obj):
        return ActorClass(obj, options)
    if not callable(obj):
        raise TypeError(f"@ember.remote expects a function or a class, got {type(obj).__name__}")
    return RemoteFunction(obj, options)
