"""Model multiplexing inside a replica: the LRU cache behind `@serve.multiplexed`, the request's
model id (`serve.get_multiplexed_model_id()`), and the report of which models a replica holds.

    ModelCache(load, max_models)       one per decorated function (per instance for a method)
      get(model_id) → model            loaded once even when asked concurrently; a new id past
                                       max_models first evicts the least recently used model
                                       (and drops it: its `__del__` runs; an async one is awaited)

A model id is a request's: the proxy takes it from the `serve_multiplexed_model_id` header, a
handle from `options(multiplexed_model_id=...)`; the replica sets it in a context variable
around the user's code. Whenever the set of ids a replica holds or is loading changes, the
replica's reporter (set by ServeReplica) is told, and pushes it to the controller, whose routing
snapshot carries it to every router (router_core.RouterCore prefers the replicas that hold the
requested model).
"""
from __future__ import annotations

import asyncio
import collections
import contextvars
import inspect
import logging
import weakref
from typing import Any, Awaitable, Callable, Iterable

log = logging.getLogger(__name__)

# Ray's header name (ray.serve._private.constants.SERVE_MULTIPLEXED_MODEL_ID).
HEADER = "serve_multiplexed_model_id"
_HEADER_B = HEADER.encode()

_model_id: contextvars.ContextVar[str] = contextvars.ContextVar("ember_serve_multiplexed_model_id", default="")


def current_model_id() -> str:
    """The model id of the request being served ("" when it names none)."""
    return _model_id.get()


def set_model_id(model_id: str) -> contextvars.Token[str]:
    return _model_id.set(model_id or "")


def reset_model_id(token: contextvars.Token[str]) -> None:
    _model_id.reset(token)


def model_id_from_headers(headers: Iterable[Any]) -> str:
    """The `serve_multiplexed_model_id` header of an ASGI scope's (name, value) byte pairs, or ""."""
    for k, v in headers:
        if len(k) == len(_HEADER_B) and bytes(k).lower() == _HEADER_B:
            return bytes(v).decode("latin-1").strip()
    return ""


class ModelCache:
    """An LRU cache of loaded models, at most max_models of them (-1: no bound).

    get(id): a cached model moves to the most recently used end; an id not cached is loaded by
    load(id) once (concurrent gets of that id wait for the same load); before a new load, the
    least recently used models are evicted until the new one fits (loads in flight count). A
    load that raises leaves nothing behind and raises to every waiter. on_change() is called
    whenever ids() (loaded and loading) changes."""

    def __init__(self, load: Callable[[str], Awaitable[Any]], max_models: int,
                 on_change: Callable[[], None] | None = None) -> None:
        self._load = load
        self.max_models = max_models
        self.models: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self._loading: dict[str, asyncio.Future[Any]] = {}
        self._on_change = on_change
        self.loads = 0
        self.evictions = 0

    def ids(self) -> set[str]:
        """The ids loaded or being loaded."""
        return set(self.models) | set(self._loading)

    def _changed(self) -> None:
        if self._on_change is not None:
            try:
                self._on_change()
            except Exception as e:  # a report is best effort: routing falls back without it
                log.debug("multiplexed model report: %s", e)

    async def get(self, model_id: str) -> Any:
        if type(model_id) is not str:
            raise TypeError(f"the multiplexed model id must be a str, got {type(model_id).__name__}")
        if not model_id:
            raise ValueError("the multiplexed model id must not be empty")
        if model_id in self.models:
            self.models.move_to_end(model_id)
            return self.models[model_id]
        task = self._loading.get(model_id)
        if task is None:
            # A task of its own: a caller that goes away (cancelled) never cancels a load others
            # wait for.
            task = self._loading[model_id] = asyncio.ensure_future(self._fill(model_id))
            task.add_done_callback(_retrieve)
            self._changed()
        return await asyncio.shield(task)

    async def _fill(self, model_id: str) -> Any:
        try:
            while self.max_models > 0 and self.models and len(self.models) + len(self._loading) > self.max_models:
                await self._evict_lru()
            self.loads += 1
            model = await self._load(model_id)
            self.models[model_id] = model
        except BaseException:
            del self._loading[model_id]
            self._changed()
            raise
        del self._loading[model_id]
        while self.max_models > 0 and len(self.models) > self.max_models:  # loads that overlapped
            await self._evict_lru()
        self._changed()
        return model

    async def _evict_lru(self) -> None:
        model_id, model = self.models.popitem(last=False)
        self.evictions += 1
        self._changed()
        log.info("unloading multiplexed model %r", model_id)
        await release(model)
        del model  # (the cache's last reference: a plain __del__ runs now)

    async def clear(self) -> None:
        """Evicts every loaded model (the replica is going away)."""
        while self.models:
            try:
                await self._evict_lru()
            except Exception as e:
                log.warning("unloading a multiplexed model failed: %s", e)


def _retrieve(t: asyncio.Future[Any]) -> None:
    """Marks a failed load's exception as seen (every waiter got it; none may be left)."""
    if not t.cancelled():
        t.exception()


async def release(model: Any) -> None:
    """An evicted model's cleanup: an `async def __del__` is awaited now, as Ray does; a plain
    `__del__` runs when Python drops the object, which is at once unless a request still uses
    the model (then when it is done), and so exactly once."""
    fn = getattr(model, "__del__", None)
    if fn is not None and inspect.iscoroutinefunction(fn):
        await fn()


# ---------------------------------------------------------------- what this replica holds
_caches: weakref.WeakSet[ModelCache] = weakref.WeakSet()
_reporter: Callable[[list[str]], None] | None = None


def register(cache: ModelCache) -> None:
    _caches.add(cache)


def set_reporter(fn: Callable[[list[str]], None] | None) -> None:
    """ServeReplica's push of this process's model ids to the controller (None: none)."""
    global _reporter
    _reporter = fn


def model_ids() -> list[str]:
    """Every model id loaded or loading in this process's caches, sorted."""
    out: set[str] = set()
    for c in list(_caches):
        out |= c.ids()
    return sorted(out)


async def clear_all() -> None:
    """Evicts every model of this process's caches (the replica is stopping), as Ray does."""
    for c in list(_caches):
        await c.clear()


def report() -> None:
    """A cache changed: hand the process's ids to the reporter, if this is a replica."""
    if _reporter is not None:
        _reporter(model_ids())
