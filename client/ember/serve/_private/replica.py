"""ServeReplica: the actor that hosts one replica of a deployment (an async actor).

It builds the user's class (or wraps the user's function), answers HTTP requests relayed by the
proxy (`handle_http`, then `stream_http` for the rest of a streamed body), Python calls from
DeploymentHandles (`handle_request`, `handle_request_streaming`), health checks (which also
report the ongoing-request count the autoscaler reads), `reconfigure(user_config)` and
`cancel(request_id)` when the HTTP client went away.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator

import cloudpickle

from . import http_util

log = logging.getLogger(__name__)


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


class ServeReplica:
    """One replica. Created by the controller with the deployment's pickled class and args."""

    def __init__(self, app_name: str, deployment: str, replica_id: str, serialized_def: bytes,
                 init_args: tuple, init_kwargs: dict, user_config: Any,
                 import_paths: tuple[str, ...] = ()) -> None:
        global _context
        for p in import_paths:  # the deploying driver's modules (see DeploymentSpec.import_paths)
            if p not in sys.path:
                sys.path.append(p)
        target = cloudpickle.loads(serialized_def)
        self._is_function = not inspect.isclass(target)
        _context = ReplicaContext(app_name, deployment, replica_id)
        self.user: Any = target if self._is_function else target(*init_args, **init_kwargs)
        _context.servable_object = self.user
        self._asgi: Any = None
        ingress = getattr(target, "__serve_ingress__", None)
        if ingress is not None and not self._is_function:
            self._asgi = http_util.bind_ingress(ingress, target, self.user)
        self._pending_user_config = user_config
        self.ongoing = 0
        self._tasks: dict[str, asyncio.Task] = {}
        self._disconnects: dict[str, asyncio.Event] = {}
        self._streams: dict[str, AsyncIterator[bytes]] = {}
        self._idle_since = time.monotonic()

    async def ready(self) -> dict[str, Any]:
        """Runs reconfigure(user_config) once; the replica is RUNNING after this returns."""
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
        """Waits (at most timeout_s) until no request is ongoing; returns what is left."""
        deadline = time.monotonic() + timeout_s
        while self.ongoing and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return self.ongoing

    def cancel(self, request_id: str) -> bool:
        """The HTTP client disconnected: cancel its user code (and its stream)."""
        ev = self._disconnects.get(request_id)
        if ev is not None:
            ev.set()
        rest = self._streams.pop(request_id, None)
        if rest is not None:  # a stream the proxy has not started pulling yet
            self._disconnects.pop(request_id, None)
            self.ongoing -= 1
            aclose = getattr(rest, "aclose", None)
            if aclose is not None:
                asyncio.ensure_future(aclose())
            return True
        t = self._tasks.get(request_id)
        if t is not None and not t.done():
            t.cancel()
            return True
        return False

    # ------------------------------------------------------------------ HTTP
    async def handle_http(self, request_id: str, scope: dict[str, Any], body: bytes) -> tuple[Any, ...]:
        self.ongoing += 1
        streaming = False
        disc = asyncio.Event()
        self._disconnects[request_id] = disc
        self._tasks[request_id] = asyncio.current_task()  # type: ignore[assignment]
        try:
            if self._asgi is not None:
                head, rest = await http_util.run_asgi(self._asgi, scope, body, disc)
            else:
                try:
                    result = self.user(http_util.make_request(scope, body, disc))
                    if inspect.isawaitable(result):
                        result = await result
                    head, rest = http_util.to_reply(result)
                except asyncio.CancelledError:
                    return ("cancelled",)
                except Exception as e:
                    if not isinstance(e, http_util.HTTPException):
                        log.exception("request %s failed", request_id)
                    return http_util.error_reply(e)
            if rest is not None:
                self._streams[request_id] = rest
                streaming = True
            return head
        except asyncio.CancelledError:
            return ("cancelled",)
        finally:
            self._tasks.pop(request_id, None)
            if not streaming:
                self._disconnects.pop(request_id, None)
                self.ongoing -= 1

    async def stream_http(self, request_id: str) -> AsyncIterator[bytes]:
        """The rest of a streamed response, chunk by chunk, as it is produced; ends early when
        cancel(request_id) says the client went away."""
        rest = self._streams.pop(request_id, None)
        if rest is None:
            return
        gone = self._disconnects.get(request_id) or asyncio.Event()
        it = rest.__aiter__()
        try:
            while not gone.is_set():
                nxt = asyncio.ensure_future(it.__anext__())
                stop = asyncio.ensure_future(gone.wait())
                await asyncio.wait((nxt, stop), return_when=asyncio.FIRST_COMPLETED)
                stop.cancel()
                if not nxt.done():
                    nxt.cancel()
                    break
                try:
                    chunk = nxt.result()
                except StopAsyncIteration:
                    break
                yield chunk
        except Exception:
            log.exception("stream %s failed", request_id)
        finally:
            self._disconnects.pop(request_id, None)
            self.ongoing -= 1
            aclose = getattr(rest, "aclose", None)
            if aclose is not None:
                try:
                    await aclose()
                except BaseException:
                    pass

    # ------------------------------------------------------------------ handle calls
    async def handle_request(self, method: str, args: tuple, kwargs: dict) -> Any:
        self.ongoing += 1
        try:
            fn = self.user if self._is_function else getattr(self.user, method)
            r = fn(*args, **kwargs)
            if inspect.isawaitable(r):
                r = await r
            return r
        finally:
            self.ongoing -= 1

    async def handle_request_streaming(self, method: str, args: tuple, kwargs: dict) -> AsyncIterator[Any]:
        self.ongoing += 1
        try:
            fn = self.user if self._is_function else getattr(self.user, method)
            r = fn(*args, **kwargs)
            if inspect.isawaitable(r) and not inspect.isasyncgen(r):
                r = await r
            if inspect.isasyncgen(r) or hasattr(r, "__aiter__"):
                async for x in r:
                    yield x
            else:
                for x in r:
                    yield x
        finally:
            self.ongoing -= 1
