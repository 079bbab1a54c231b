"""DeploymentHandle: call a deployment from Python (the driver, or another deployment).

    handle = serve.get_app_handle("default")
    resp = handle.translate.remote("hello")      # DeploymentResponse
    resp.result()  /  await resp
    for chunk in handle.options(stream=True).generate.remote(prompt): ...

Calls are routed in the process by a background event loop ("the handle runtime") that keeps a
RouteTable (long poll on the controller) and picks replicas by power of two choices. A
DeploymentResponse passed as an argument of another call is resolved before that call is sent,
so pipelines compose without blocking the caller. A streamed call's items reach the caller
through `_Items` and are read with `DeploymentResponseGenerator` (_private/stream_response.py,
re-exported here).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar

from ember.exceptions import ActorDiedError, RayActorError

from ._private.router import RouteTable
from ._private.stream_poller import FETCH_ERROR, ChannelPoller, StreamPoller
from ._private.stream_response import DeploymentResponseGenerator as DeploymentResponseGenerator
from ._private.stream_response import _Items

_MAX_ATTEMPTS = 3
_T = TypeVar("_T")


class _HandleRuntime:
    """A background event loop thread owning this process's RouteTable."""

    def __init__(self) -> None:
        self.session = _session()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="ember-serve-handles", daemon=True)
        self.thread.start()
        self.table: RouteTable = asyncio.run_coroutine_threadsafe(self._make_table(), self.loop).result()
        # Streamed calls: one ChannelPoller per replica (its pushes carry all of this process's
        # streams there; or one stream_poll call in flight for them), groups named after this one.
        self.pollers: dict[str, StreamPoller] = {}
        self.group = f"h-{os.getpid():x}-{uuid.uuid4().hex[:8]}"

    async def _make_table(self) -> RouteTable:
        t = RouteTable()
        t.start()
        return t

    def submit(self, coro: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        """Cancels the loop's tasks, stops it and closes it."""
        async def cancel_all() -> None:
            for p in list(self.pollers.values()):
                if isinstance(p, ChannelPoller):
                    p.shutdown()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(cancel_all(), self.loop).result(10)
        except Exception:
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        if not self.loop.is_running():
            self.loop.close()


_runtime: _HandleRuntime | None = None
_runtime_lock = threading.Lock()


def _session() -> int:
    """Identifies this process's connection to a cluster (a new ember.init() is a new one)."""
    from ember._private.doors import driver

    return driver.session_id()


def _get_runtime() -> _HandleRuntime:
    global _runtime
    with _runtime_lock:
        if _runtime is not None and _runtime.session != _session():
            _runtime.stop()  # routes of a cluster this process is no longer connected to
            _runtime = None
        if _runtime is None:
            _runtime = _HandleRuntime()
        return _runtime


def _reset_runtime() -> None:
    global _runtime
    with _runtime_lock:
        if _runtime is not None:
            _runtime.stop()
        _runtime = None
        _handles.clear()


_handles: dict[tuple[str, str], DeploymentHandle] = {}


def cached_handle(deployment_name: str, app_name: str) -> DeploymentHandle:
    """This process's handle to a deployment: the same object for every call until
    serve.shutdown(), as Ray's client caches its handles (so two lookups compare equal)."""
    with _runtime_lock:
        h = _handles.get((deployment_name, app_name))
        if h is None:
            h = _handles[(deployment_name, app_name)] = DeploymentHandle(deployment_name, app_name)
        return h


async def _resolve(v: Any) -> Any:
    if isinstance(v, DeploymentResponse):
        return await asyncio.wrap_future(v._fut)
    return v


async def _call(table: RouteTable, dep_id: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                model_id: str = "") -> Any:
    if args or kwargs:
        args = tuple([await _resolve(a) for a in args])
        kwargs = {k: await _resolve(v) for k, v in kwargs.items()}
    if not table.ready.is_set():
        await asyncio.wait_for(table.ready.wait(), 60)
    router = table.router(dep_id)
    for attempt in range(_MAX_ATTEMPTS):
        k, h = await router.acquire(model_id=model_id)
        try:
            if model_id:
                return await h.handle_request.remote(method, args, kwargs, model_id)
            return await h.handle_request.remote(method, args, kwargs)
        except (ActorDiedError, RayActorError):
            router.drop(k)  # a replica that died or was stopped: try another one
            if attempt == _MAX_ATTEMPTS - 1:
                raise
        finally:
            router.release(k)


async def _stream(rt: _HandleRuntime, dep_id: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                  out: _Items, model_id: str = "") -> None:
    """Runs one streamed call: starts it on a replica (whose reply brings the first batch, sent
    as soon as the first item is produced), then takes what the runtime's poller of that replica
    brings (pushed on one channel, or one stream_poll call in flight, per replica for all of
    this process's streams there) until the stream is over, handing every batch to out as it
    comes. A user error is fetched with stream_next, which raises it as a plain call would.
    Cancelled (the caller stopped iterating), it tells the replica to stop the stream."""
    h = None
    stream_id = uuid.uuid4().hex
    done = False
    try:
        if args or kwargs:
            args = tuple([await _resolve(a) for a in args])
            kwargs = {k: await _resolve(v) for k, v in kwargs.items()}
        if not rt.table.ready.is_set():
            await asyncio.wait_for(rt.table.ready.wait(), 60)
        router = rt.table.router(dep_id)
        k, h = await router.acquire(model_id=model_id)
        poller = ChannelPoller.of(rt.pollers, k, h, rt.group)
        inbox = poller.expect(stream_id)  # before the call: a push may bring items first
        try:
            items, done = await h.handle_request_streaming.remote(stream_id, method, args, kwargs, poller.group,
                                                                  model_id)
            if not done:
                poller.start(stream_id)
            while True:
                if items:
                    out.put([("item", x) for x in items])
                if done:
                    break
                await inbox.wait()
                items, done, error = inbox.take_items()
                if error is not None:
                    if items:
                        out.put([("item", x) for x in items])
                    items, done = await h.stream_next.remote(stream_id)  # raises the user's error
                    if not done or error != FETCH_ERROR:  # (or the stream was cut: say so)
                        raise RuntimeError(f"stream {stream_id} of {dep_id} failed: {error}")
        finally:
            poller.close(stream_id)
            router.release(k)
        out.put([("end", None)])
    except BaseException as e:
        if h is not None and not done:
            h.cancel.remote(stream_id)
        out.put([("error", e)])
        if isinstance(e, asyncio.CancelledError):
            raise


class DeploymentResponse:
    """The future result of a handle call: `.result(timeout_s=...)` or `await`."""

    def __init__(self, fut: concurrent.futures.Future[Any]) -> None:
        self._fut = fut

    def result(self, timeout_s: float | None = None) -> Any:
        return self._fut.result(timeout_s)

    def __await__(self) -> Any:
        return asyncio.wrap_future(self._fut).__await__()

    def cancel(self) -> None:
        self._fut.cancel()

    def cancelled(self) -> bool:
        return self._fut.cancelled()


class DeploymentHandle:
    """A handle to a deployment of an application; `handle.method.remote(...)`."""

    def __init__(self, deployment_name: str, app_name: str = "default", *, method_name: str = "__call__",
                 stream: bool = False, multiplexed_model_id: str = "") -> None:
        self.deployment_name = deployment_name
        self.app_name = app_name
        self._method = method_name
        self._stream = stream
        self._model_id = multiplexed_model_id

    @property
    def deployment_id(self) -> str:
        return f"{self.app_name}#{self.deployment_name}"

    def options(self, *, method_name: str | None = None, multiplexed_model_id: str | None = None,
                stream: bool | None = None, use_new_handle_api: bool | None = None,
                _prefer_local_routing: bool | None = None, _by_reference: bool | None = None,
                request_serialization: str | None = None,
                response_serialization: str | None = None) -> DeploymentHandle:
        """A handle like this one calling method_name, streamed or not, for the multiplexed
        model multiplexed_model_id (what serve.get_multiplexed_model_id() returns in the
        replica; routed to a replica holding it when one has room) (Ray's parameters).
        use_new_handle_api=True is what every handle is (False raises). Ray's
        _prefer_local_routing, _by_reference and the request/response serializations are not
        implemented: given, they raise ValueError naming them."""
        bad = {"use_new_handle_api": use_new_handle_api is False,
               "_prefer_local_routing": _prefer_local_routing is not None,
               "_by_reference": _by_reference is not None,
               "request_serialization": request_serialization not in (None, "cloudpickle"),
               "response_serialization": response_serialization not in (None, "cloudpickle")}
        named = sorted(k for k, v in bad.items() if v)
        if named:
            raise ValueError(f"DeploymentHandle.options: {', '.join(named)} not implemented by Ember Serve "
                             "(leave them at their defaults)")
        if method_name is not None and not isinstance(method_name, str):
            raise TypeError(f"method_name must be a string, got {type(method_name).__name__}")
        if multiplexed_model_id is not None and not isinstance(multiplexed_model_id, str):
            raise TypeError(f"multiplexed_model_id must be a string, got {type(multiplexed_model_id).__name__}")
        return DeploymentHandle(self.deployment_name, self.app_name,
                                method_name=method_name or self._method,
                                stream=self._stream if stream is None else stream,
                                multiplexed_model_id=self._model_id if multiplexed_model_id is None
                                else multiplexed_model_id)

    def __getattr__(self, name: str) -> DeploymentHandle:
        if name.startswith("_"):
            raise AttributeError(name)
        return self.options(method_name=name)

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        rt = _get_runtime()
        if self._stream:
            items = _Items()
            fut = rt.submit(_stream(rt, self.deployment_id, self._method, args, kwargs, items, self._model_id))
            fut.add_done_callback(items.cancelled)  # (cancelled before it ran: no entry would come)
            return DeploymentResponseGenerator(rt, items, fut)
        return DeploymentResponse(rt.submit(_call(rt.table, self.deployment_id, self._method, args, kwargs,
                                                  self._model_id)))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.deployment_name, self.app_name, self._method, self._stream, self._model_id))

    def __repr__(self) -> str:
        return f"DeploymentHandle(deployment={self.deployment_name!r}, app={self.app_name!r})"


def _rebuild(dep: str, app: str, method: str, stream: bool, model_id: str = "") -> DeploymentHandle:
    return DeploymentHandle(dep, app, method_name=method, stream=stream, multiplexed_model_id=model_id)
