"""`@serve.multiplexed` and `serve.get_multiplexed_model_id()` (Ray Serve's model multiplexing).

    @serve.deployment(num_replicas=2)
    class Models:
        @serve.multiplexed(max_num_models_per_replica=3)
        async def get_model(self, model_id: str):
            return await load(model_id)

        async def __call__(self, request):
            model = await self.get_model(serve.get_multiplexed_model_id())
            return model(await request.json())

Requests name their model with the `serve_multiplexed_model_id` HTTP header, or
`handle.options(multiplexed_model_id="m1")`; routers prefer a replica that already holds it.
The cache itself is ember.serve._private.multiplex.ModelCache.
"""
from __future__ import annotations

import asyncio
import functools
import inspect
from typing import Any, Callable

from ._private import multiplex as _mx

_ATTR = "_ember_serve_multiplex_caches"


def get_multiplexed_model_id() -> str:
    """The model id of the request being served: its `serve_multiplexed_model_id` header
    (through the HTTP proxy), or the handle's `options(multiplexed_model_id=...)`; "" when the
    request names none. As in Ray, a handle call made while serving a request does not inherit
    it: pass it on with `options(multiplexed_model_id=serve.get_multiplexed_model_id())`."""
    return _mx.current_model_id()


def multiplexed(func: Callable[..., Any] | None = None, max_num_models_per_replica: int = 3) -> Any:
    """Makes `func(model_id)` (a function, or a method `func(self, model_id)`) the loader of a
    per-replica LRU cache of at most max_num_models_per_replica models (-1: no bound): calling
    it returns the cached model, loading it first when it is not cached (concurrent calls for
    one id load it once) and evicting the least recently used model when the cache is full
    (its `__del__` is called, awaited when it is `async def`). The decorated callable is always
    awaited: `model = await self.get_model(model_id)`. func may be `async def` (as Ray requires)
    or a plain function, which Ember runs in a thread. Used bare (`@serve.multiplexed`) or
    with arguments."""
    if func is not None:
        _check_func(func)
    if isinstance(max_num_models_per_replica, bool) or not isinstance(max_num_models_per_replica, int):
        raise TypeError("max_num_models_per_replica must be an integer, got "
                        f"{type(max_num_models_per_replica).__name__}")
    if max_num_models_per_replica != -1 and max_num_models_per_replica <= 0:
        raise ValueError("max_num_models_per_replica must be positive (or -1 for no bound), got "
                         f"{max_num_models_per_replica}")

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        _check_func(f)
        return _wrap(f, max_num_models_per_replica)

    return decorate(func) if func is not None else decorate


def _check_func(func: Any) -> None:
    if inspect.isclass(func) or not callable(func):
        raise TypeError("@serve.multiplexed decorates a function or method that loads a model, got "
                        f"{func!r}")
    n = len(inspect.signature(func).parameters)
    if n not in (1, 2):
        raise TypeError("@serve.multiplexed decorates a function taking the model id (model_id: str), or a "
                        f"method taking (self, model_id); {getattr(func, '__qualname__', func)} takes {n} "
                        "parameters")


def _wrap(func: Callable[..., Any], max_models: int) -> Callable[..., Any]:
    is_method = len(inspect.signature(func).parameters) == 2
    is_async = inspect.iscoroutinefunction(func)
    name = getattr(func, "__qualname__", repr(func))
    own: list[_mx.ModelCache] = []  # the one cache of a plain function

    def make(owner: Any) -> _mx.ModelCache:
        async def load(model_id: str) -> Any:
            args = (owner, model_id) if is_method else (model_id,)
            if is_async:
                return await func(*args)
            r = await asyncio.to_thread(func, *args)
            return await r if inspect.isawaitable(r) else r

        cache = _mx.ModelCache(load, max_models, on_change=_mx.report)
        _mx.register(cache)
        return cache

    @functools.wraps(func)
    async def wrapper(*args: Any) -> Any:
        want = 2 if is_method else 1
        if len(args) != want:
            raise TypeError(f"{name} (@serve.multiplexed) takes the model id only, got {len(args) - want + 1} "
                            "arguments")
        if is_method:
            owner, model_id = args
            caches = owner.__dict__.setdefault(_ATTR, {})
            cache = caches.get(name)
            if cache is None:
                cache = caches[name] = make(owner)
        else:
            model_id = args[0]
            if not own:
                own.append(make(None))
            cache = own[0]
        return await cache.get(model_id)

    return wrapper
