"""ServeReplica: the actor that hosts one replica of a deployment (an async actor).

It builds the user's class (or wraps the user's function), answers HTTP requests relayed by the
proxy (`handle_http`; the rest of the proxy's streamed bodies, all together, pushed on its
stream channel or fetched with `stream_poll`, see streams.py and stream_channel.py),
Python calls from DeploymentHandles (`handle_request`; `handle_request_streaming` then the
caller's channel or `stream_poll` of its group, or `stream_next` per stream), health checks (which also
report the ongoing-request count the autoscaler reads), `reconfigure(user_config)` and
`cancel(request_id)` when the HTTP client went away. `stream_channel()` opens (once) the socket on
which the proxy gets its streamed bodies pushed instead of polling (stream_channel.py).
Each request's multiplexed model id (its header, or the handle's option) is set around the
user's code (multiplex.py); the models the replica holds are pushed to the controller.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import cloudpickle

from ember_common import envvars, tls

from . import http_util, multiplex
from .core_loop import replica_methods, runs_on_core_loop
from .stream_channel import ChannelServer
from .streams import StreamMux, StreamPump, aiter_any

log = logging.getLogger(__name__)
_FIRST_CHUNK_WAIT_S = 0.1  # how long handle_http waits to send a stream's first chunk with its head
_POLL_WAIT_S = 10.0  # how long a stream_poll waits for something before answering empty
_UNLOAD_WAIT_S = 4.0  # how long drain() gives the multiplexed models' __del__ (the controller waits 5 s more)


@dataclass
class ReplicaContext:
    """What serve.get_replica_context() returns inside a replica."""

    app_name: str
    deployment: str
    replica_id: str
    servable_object: Any = None


_context: ReplicaContext | None = None


def get_replica_context() -> ReplicaContext:
    if _context is None:
        raise RuntimeError("serve.get_replica_context() may only be called from within a replica")
    return _context


def _takes_arguments(user: Any) -> bool:
    """Whether the deployment's callable (a function, or an instance's __call__) takes any
    parameter; one whose signature cannot be read is given the request."""
    try:
        params = inspect.signature(user).parameters
    except (TypeError, ValueError):
        return True
    return len(params) > 0


class ServeReplica:
    """One replica. Created by the controller with the deployment's pickled class and args.
    A replica of a class Ember registered as never blocking (core_loop.py) runs all its methods
    on the worker's core loop; any other on the actor's own loop."""

    # Read by the executor (executor.core_loop_methods); set per instance in __init__.
    __ember_core_loop_methods__: frozenset[str] = frozenset()

    def __init__(self, app_name: str, deployment: str, replica_id: str, serialized_def: bytes,
                 init_args: tuple[Any, ...], init_kwargs: dict[str, Any], user_config: Any,
                 import_paths: tuple[str, ...] = ()) -> None:
        global _context
        for p in import_paths:  # the deploying driver's modules (see DeploymentSpec.import_paths)
            if p not in sys.path:
                sys.path.append(p)
        target = cloudpickle.loads(serialized_def)
        self._is_function = not inspect.isclass(target)
        _context = ReplicaContext(app_name, deployment, replica_id)
        # An `async def __init__` (Ray accepts one) is awaited in ready(), before any request.
        self._pending_init: tuple[tuple[Any, ...], dict[str, Any]] | None = None
        if not self._is_function and inspect.iscoroutinefunction(getattr(target, "__init__", None)):
            self.user: Any = target.__new__(target)
            self._pending_init = (init_args, init_kwargs)
        else:
            self.user = target if self._is_function else target(*init_args, **init_kwargs)
        self._http_passes_request = _takes_arguments(self.user)
        _context.servable_object = self.user
        if runs_on_core_loop(target, self.user):
            self.__ember_core_loop_methods__ = replica_methods(ServeReplica)
        self._asgi: Any = None
        ingress = getattr(target, "__serve_ingress__", None)
        if ingress is not None and not self._is_function:
            self._asgi = http_util.bind_ingress(ingress, target, self.user)
        self._pending_user_config = user_config
        self.ongoing = 0
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._disconnects: dict[str, asyncio.Event] = {}
        self._streams: dict[str, StreamPump] = {}
        self._muxes: dict[str, StreamMux] = {}  # by caller (group): its open HTTP streams
        self._watchers: dict[str, Callable[[], None]] = {}  # by group: its stream channel's push
        self._group_of: dict[str, str] = {}  # stream id -> its group
        self._idle_since = time.monotonic()
        self._calls = {"stream_poll": 0, "stream_next": 0}
        self._channel: ChannelServer | None = None
        self._dep_id = f"{app_name}#{deployment}"
        self._replica_id = replica_id
        self._model_ids: list[str] = []  # the latest report of multiplex.model_ids()
        self._models_push: asyncio.Task[None] | None = None
        self._controller: Any = None
        multiplex.set_reporter(self._report_models)

    def _report_models(self, ids: list[str]) -> None:
        """The multiplexed models loaded or loading here changed: push them to the controller
        (one push in flight; the latest set is sent once it returns), whose routing snapshot
        tells every router."""
        self._model_ids = ids
        if self._models_push is None or self._models_push.done():
            self._models_push = asyncio.ensure_future(self._push_models())

    async def _push_models(self) -> None:
        import ember

        if not ember.is_initialized():  # a replica built outside a cluster: no controller, and
            return  # a background push must never start one
        sent: list[str] | None = None
        while sent != self._model_ids:
            ids = list(self._model_ids)
            try:
                if self._controller is None:
                    self._controller = await asyncio.to_thread(ember.get_actor, "SERVE_CONTROLLER",
                                                               namespace="serve")
                await self._controller.record_model_ids.remote(self._dep_id, self._replica_id, ids)
                sent = ids
            except Exception as e:  # the controller restarting: routing falls back meanwhile
                log.debug("reporting multiplexed models: %s", e)
                self._controller = None
                await asyncio.sleep(0.5)

    def multiplexed_model_ids(self) -> list[str]:
        """The multiplexed model ids loaded or loading on this replica (for tests and debugging)."""
        return multiplex.model_ids()

    async def ready(self) -> dict[str, Any]:
        """Awaits an async constructor, then runs reconfigure(user_config) once; the replica is
        RUNNING after this returns."""
        if self._pending_init is not None:
            args, kwargs = self._pending_init
            self._pending_init = None
            await self.user.__init__(*args, **kwargs)
        if self._pending_user_config is not None:
            await self.reconfigure(self._pending_user_config)
            self._pending_user_config = None
        return {"pid": os.getpid()}

    async def reconfigure(self, user_config: Any) -> None:
        fn = getattr(self.user, "reconfigure", None)
        if fn is None:
            raise ValueError("user_config was given but the deployment has no reconfigure() method")
        r = fn(user_config)
        if inspect.isawaitable(r):
            await r

    async def check_health(self) -> int:
        """Raises if the user's check_health() does; returns the ongoing-request count."""
        fn = getattr(self.user, "check_health", None)
        if fn is not None:
            r = fn()
            if inspect.isawaitable(r):
                await r
        return self.ongoing

    async def drain(self, timeout_s: float) -> int:
        """Waits (at most timeout_s) until no request is ongoing, then unloads the multiplexed
        models (each evicted as by the LRU, within _UNLOAD_WAIT_S); returns what is left."""
        deadline = time.monotonic() + timeout_s
        while self.ongoing and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        try:
            await asyncio.wait_for(multiplex.clear_all(), _UNLOAD_WAIT_S)
        except Exception as e:
            log.warning("unloading the multiplexed models: %s", e)
        return self.ongoing

    def cancel(self, request_id: str) -> bool:
        """The HTTP client (or the handle's caller) went away: cancel its user code, or stop its
        stream and close the user's iterator."""
        ev = self._disconnects.get(request_id)
        if ev is not None:
            ev.set()
        pump = self._streams.get(request_id)
        if pump is not None:
            pump.close()
            self._end_stream(request_id)
            return True
        t = self._tasks.get(request_id)
        if t is not None and not t.done():
            t.cancel()
            return True
        return False

    def stream_stats(self) -> dict[str, int | str]:
        """Streams open now, the stream_poll / stream_next calls served, the stream channels
        open and the sends made on them, and the thread the replica's methods run on
        (`ember-core` or `ember-actor-loop`, see core_loop.py) (for tests and debugging)."""
        ch = self._channel
        return {"open": len(self._streams), "groups": len(self._muxes), **self._calls,
                "channels": ch.connections if ch else 0, "channel_pushes": ch.pushes if ch else 0,
                "thread": threading.current_thread().name}

    async def stream_channel(self) -> tuple[str, int, str] | None:
        """(host, port, secret) of the socket a caller opens to get its streamed HTTP bodies
        pushed (stream_channel.py); None with mutual TLS on (callers then poll)."""
        if tls.enabled():
            return None
        if self._channel is None:
            self._channel = ChannelServer(self._take_ready, self._watch, self._close_group,
                                          envvars.value("EMBER_NODE_IP"))
        return await self._channel.address()

    def _close_group(self, group: str) -> None:
        """The caller of group went away: every stream of it stops (the user's generators close)."""
        mux = self._muxes.pop(group, None)
        if mux is None:
            return
        for sid in mux.ids():
            pump = self._streams.get(sid)
            if pump is not None:
                pump.close()
            self._end_stream(sid)

    def _start_stream(self, stream_id: str, it: Any, convert: Callable[[Any], Any] | None = None) -> StreamPump:
        pump = self._streams[stream_id] = StreamPump(aiter_any(it), convert=convert)
        return pump

    def _end_stream(self, stream_id: str) -> None:
        if self._streams.pop(stream_id, None) is not None:
            self._disconnects.pop(stream_id, None)
            self.ongoing -= 1
        group = self._group_of.pop(stream_id, None)
        if group is not None:
            mux = self._muxes.get(group)
            if mux is not None:
                mux.remove(stream_id)

    async def stream_poll(self, group: str, timeout_s: float = _POLL_WAIT_S) -> list[tuple[str, Any, bool, str | None]]:
        """What the caller's open streams (those started by handle_http or
        handle_request_streaming with this group) produced since its previous poll: (stream
        id, bytes or a list of items, done, error or None) per stream with something ready;
        waits while none has (at most timeout_s, then []). See StreamMux.poll."""
        self._calls["stream_poll"] += 1
        return await self._poll(group, timeout_s)

    async def _poll(self, group: str, timeout_s: float) -> list[tuple[str, Any, bool, str | None]]:
        mux = self._mux(group)
        return self._taken(group, mux, await mux.poll(timeout_s))

    def _take_ready(self, group: str) -> list[tuple[str, Any, bool, str | None]]:
        """What the group's streams produced since the previous take, without waiting (the
        stream channel's push)."""
        mux = self._muxes.get(group)
        return self._taken(group, mux, mux.take_ready()) if mux is not None else []

    def _watch(self, group: str, notify: Callable[[], None] | None) -> None:
        """notify() is called whenever a stream of group has something ready (None: no more)."""
        if notify is None:
            self._watchers.pop(group, None)
        else:
            self._watchers[group] = notify
        mux = self._muxes.get(group)
        if mux is not None:
            mux.notify = notify

    def _mux(self, group: str) -> StreamMux:
        mux = self._muxes.get(group)
        if mux is None:
            mux = self._muxes[group] = StreamMux(self._watchers.get(group))
        return mux

    def _taken(self, group: str, mux: StreamMux, out: list[tuple[str, Any, bool, str | None]]
               ) -> list[tuple[str, Any, bool, str | None]]:
        for sid, _, done, err in out:
            if done:
                if err is not None:
                    log.warning("stream %s failed: %s", sid, err)
                self._end_stream(sid)
            elif err is not None:  # a handle stream failed: its caller fetches the error (stream_next)
                self._group_of.pop(sid, None)
        if not len(mux) and self._muxes.get(group) is mux:
            del self._muxes[group]
        return out

    async def stream_next(self, stream_id: str) -> tuple[list[Any], bool]:
        """The next batch of a streamed reply: every item produced since the previous call (at
        least one, unless the stream is over), and whether the stream is over."""
        self._calls["stream_next"] += 1
        return await self._next(stream_id)

    async def _next(self, stream_id: str) -> tuple[list[Any], bool]:
        pump = self._streams.get(stream_id)
        if pump is None:
            return [], True
        try:
            items, done = await pump.take()
        except BaseException:
            self._end_stream(stream_id)
            raise
        if done:
            self._end_stream(stream_id)
        return items, done

    # ------------------------------------------------------------------ HTTP
    async def handle_http(self, request_id: str, scope: dict[str, Any], body: bytes,
                          group: str | None = None) -> tuple[Any, ...]:
        """("full", status, headers, body), ("cancelled",) or ("stream", status, headers,
        first_chunk, done): a streamed body's first chunk comes with the head when it is produced
        within _FIRST_CHUNK_WAIT_S (saving a round trip); the rest goes to the group (pushed on
        its caller's channel, or taken by stream_poll(group)) when a group is given, else to
        stream_next(request_id)."""
        self.ongoing += 1
        streaming = False
        disc = asyncio.Event()
        self._disconnects[request_id] = disc
        self._tasks[request_id] = asyncio.current_task()  # type: ignore[assignment]  # never None in a task
        token = multiplex.set_model_id(multiplex.model_id_from_headers(scope.get("headers") or ()))
        try:
            if self._asgi is not None:
                head, rest = await http_util.run_asgi(self._asgi, scope, body, disc)
            else:
                try:
                    # As Ray's: a callable that takes no parameters is called without the request.
                    result = (self.user(http_util.make_request(scope, body, disc)) if self._http_passes_request
                              else self.user())
                    if inspect.isawaitable(result):
                        result = await result
                    head, rest = http_util.to_reply(result)
                except asyncio.CancelledError:
                    return ("cancelled",)
                except Exception as e:
                    if not isinstance(e, http_util.HTTPException):
                        log.exception("request %s failed", request_id)
                    return http_util.error_reply(e)
            if rest is None:
                return head
            pump = self._start_stream(request_id, rest, http_util.to_bytes)
            streaming = True
            try:
                items, done = await pump.take(_FIRST_CHUNK_WAIT_S)
            except Exception:
                log.exception("stream %s failed", request_id)
                items, done = [], True
            if done:
                self._end_stream(request_id)
            elif group is not None:
                self._add_to_group(group, request_id, join=True)
            return ("stream", head[1], head[2], head[3] + b"".join(items), done)
        except asyncio.CancelledError:
            if streaming:
                self.cancel(request_id)
            return ("cancelled",)
        finally:
            multiplex.reset_model_id(token)
            self._tasks.pop(request_id, None)
            if not streaming:
                self._disconnects.pop(request_id, None)
                self.ongoing -= 1

    # ------------------------------------------------------------------ handle calls
    async def handle_request(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                             model_id: str = "") -> Any:
        """A handle call; model_id is its options(multiplexed_model_id=...)."""
        self.ongoing += 1
        token = multiplex.set_model_id(model_id)
        try:
            fn = self.user if self._is_function else getattr(self.user, method)
            r = fn(*args, **kwargs)
            if inspect.isawaitable(r):
                r = await r
            return r
        finally:
            multiplex.reset_model_id(token)
            self.ongoing -= 1

    async def handle_request_streaming(self, stream_id: str, method: str, args: tuple[Any, ...],
                                       kwargs: dict[str, Any], group: str | None = None,
                                       model_id: str = "") -> tuple[list[Any], bool]:
        """Starts a streamed handle call; returns its first batch like stream_next(). With a
        group, the rest comes from stream_poll(group) (shared with the caller's other streams
        on this replica), else from stream_next(stream_id). model_id: the handle's
        multiplexed_model_id (the generator keeps it: its pump's task copies the context)."""
        self.ongoing += 1
        started = False
        token = multiplex.set_model_id(model_id)
        try:
            fn = self.user if self._is_function else getattr(self.user, method)
            r = fn(*args, **kwargs)
            if inspect.isawaitable(r) and not inspect.isasyncgen(r):
                r = await r
            if not (hasattr(r, "__aiter__") or hasattr(r, "__iter__")) or isinstance(r, (str, bytes, dict)):
                raise TypeError(f"{method}() was called with stream=True but returned "
                                f"{type(r).__name__}, not a generator")
            self._start_stream(stream_id, r)
            started = True
        finally:
            multiplex.reset_model_id(token)
            if not started:
                self.ongoing -= 1
        items, done = await self._next(stream_id)
        if group is not None and not done:
            self._add_to_group(group, stream_id, join=False)
        return items, done

    def _add_to_group(self, group: str, stream_id: str, *, join: bool) -> None:
        pump = self._streams.get(stream_id)
        if pump is None:  # cancelled meanwhile
            return
        self._group_of[stream_id] = group
        self._mux(group).add(stream_id, pump, join=join)
