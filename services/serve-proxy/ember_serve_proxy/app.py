"""The proxy's ASGI app: `/-/healthz`, `/-/routes`, and every other path routed by prefix.

The application routes and `/-/healthz` are public; the `/-/routes` admin view needs the
cluster's token (`Authorization: Bearer <token>` or the `ember-authentication-token` cookie,
ember_common.auth) and answers 401 without it.

Per request: match the longest route prefix (RouteTable, refreshed by a long poll on the
controller, never per request), buffer the body, take a replica from the deployment's Router
(power of two choices; one holding the model a `serve_multiplexed_model_id` header names when
one with room does; queue while every replica is at max_ongoing_requests; 503 past
max_queued_requests), call `handle_http` on it, and answer. A streamed reply is relayed chunk by
chunk; the chunks of every stream open on one replica are pushed by the replica on one socket
(a ChannelPoller, ember.serve._private.stream_poller / stream_channel). If the client
disconnects first, the replica is told to cancel the request. A body over `max_body_bytes`
(declared, or counted as it arrives) gets 413 before any replica is involved; the
connection-level limits are ember_serve_proxy.limits. An incoming `traceparent` header becomes the parent of the proxy's span (when tracing
is on), which is the parent of the replica call.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
from typing import Any

from ember.exceptions import ActorDiedError, RayActorError
from ember.serve.proxy_door import (
    BackPressureError,
    ChannelPoller,
    Inbox,
    RouteTable,
    StreamPoller,
    model_id_from_headers,
)
from ember_common import auth, tracing

from .limits import TOO_LARGE, declared_length, read_body

log = logging.getLogger(__name__)
_ATTEMPTS = 3
_TEXT = [(b"content-type", b"text/plain; charset=utf-8")]
_ids = itertools.count()
_id_prefix = f"{os.getpid():x}-{os.urandom(3).hex()}-"


async def _simple(send: Any, status: int, text: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = text.encode()
    await send({"type": "http.response.start", "status": status,
                "headers": (headers or _TEXT) + [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def _too_large(send: Any, limit: int) -> None:
    """413, and the connection closes (the rest of the body is never read)."""
    await _simple(send, 413, f"request body over the proxy's limit of {limit} bytes (max_body_bytes)",
                  [*_TEXT, (b"connection", b"close")])


class ProxyApp:
    """ASGI application; one per proxy process."""

    def __init__(self, max_inline_bytes: int | None = None, max_body_bytes: int | None = None) -> None:
        """max_inline_bytes: the core worker's largest inline argument, given when the app runs
        on the core worker's own loop (as `python -m ember_serve_proxy` runs it): a call whose
        body and headers might not fit inline is then submitted from a thread, since putting a
        big argument into the object store must wait for the core loop. max_body_bytes: a
        bigger request body (declared, or counted as it arrives) gets 413 (None: no limit)."""
        self._big = max_inline_bytes // 2 if max_inline_bytes is not None else None
        self._max_body = max_body_bytes
        self.table: RouteTable | None = None
        self._latency: Any = None
        self._pollers: dict[str, StreamPoller] = {}  # by replica (router key)

    def register_metrics(self) -> None:
        """Prometheus series (only called when metrics are on): in-flight and queued requests per
        deployment, and request latency by application and status."""
        from ember_common import metrics

        def per_router(attr: str) -> Any:
            def read() -> dict[tuple[str, ...], float]:
                routers = dict(self.table.routers) if self.table is not None else {}
                return {(dep,): float(r.core.queued if attr == "queued" else r.core.total_inflight())
                        for dep, r in routers.items()}
            return read

        metrics.gauge("ember_serve_proxy_inflight_requests", "requests sent to replicas and not answered yet",
                      per_router("inflight"), ("deployment",))
        metrics.gauge("ember_serve_proxy_queued_requests", "requests waiting for a replica with room",
                      per_router("queued"), ("deployment",))
        self._latency = metrics.histogram("ember_serve_proxy_request_seconds", "HTTP request latency",
                                          ("application", "status"))

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "http":
            if tracing.enabled():
                hdrs = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
                with tracing.span(f"proxy {scope['method']} {scope['path']}", context=tracing.extract(hdrs),
                                  kind="SERVER", **{"http.method": scope["method"], "http.target": scope["path"]}):
                    await self._http(scope, receive, send)
            else:
                await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)
        elif kind == "websocket":
            await send({"type": "websocket.close", "code": 1003})

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            m = await receive()
            if m["type"] == "lifespan.startup":
                self.table = RouteTable()
                self.table.start()
                await send({"type": "lifespan.startup.complete"})
            elif m["type"] == "lifespan.shutdown":
                if self.table is not None:
                    self.table.stop()
                for p in list(self._pollers.values()):
                    if isinstance(p, ChannelPoller):
                        p.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path: str = scope["path"]
        table = self.table
        assert table is not None, "the proxy app needs the ASGI lifespan protocol"
        if path.startswith("/-/"):
            if path == "/-/healthz":
                return await _simple(send, 200, "success")
            if path == "/-/routes":
                if not auth.http_authorized(scope.get("headers", ())):
                    log.warning("rejected /-/routes from %s: no or wrong token", scope.get("client"))
                    return await _simple(send, 401, "/-/routes needs the cluster's auth token "
                                         "(Authorization: Bearer <token>; `ember get-auth-token`)",
                                         [(b"www-authenticate", b"Bearer"), *_TEXT])
                routes = {p: a for p, a in table.prefixes}
                return await _simple(send, 200, json.dumps(routes), [(b"content-type", b"application/json")])
        if not table.ready.is_set():
            try:
                await asyncio.wait_for(table.ready.wait(), 10)
            except asyncio.TimeoutError:
                return await _simple(send, 503, "Serve is not ready (no controller answered)")
        m = table.match(path)
        if m is None:
            return await _simple(send, 404, f"Path '{path}' not found. Ping http://.../-/routes for routing table.")
        prefix, app = m
        router = table.router(table.apps[app]["ingress"])
        if self._max_body is not None and (declared_length(scope["headers"]) or 0) > self._max_body:
            return await _too_large(send, self._max_body)
        body = await read_body(receive, self._max_body)
        if body is None:
            return
        if body is TOO_LARGE:
            return await _too_large(send, self._max_body or 0)
        assert isinstance(body, bytes)
        child = {"type": "http", "http_version": scope.get("http_version", "1.1"), "method": scope["method"],
                 "scheme": scope.get("scheme", "http"), "path": path, "raw_path": scope.get("raw_path"),
                 "root_path": "" if prefix == "/" else prefix, "query_string": scope.get("query_string", b""),
                 "headers": scope["headers"], "client": scope.get("client"), "server": scope.get("server")}
        request_id = _id_prefix + str(next(_ids))
        disconnect = asyncio.ensure_future(receive())
        if self._latency is not None:
            send = _StatusRecorder(send, self._latency, app)
        try:
            await self._forward(router, request_id, child, body, send, disconnect)
        finally:
            if not disconnect.done():
                disconnect.cancel()
            if self._latency is not None:
                send.observe()

    async def _forward(self, router: Any, request_id: str, child: dict[str, Any], body: bytes, send: Any,
                       disconnect: asyncio.Future[Any]) -> None:
        model_id = model_id_from_headers(child["headers"])
        for attempt in range(_ATTEMPTS):
            try:
                key, h = await router.acquire(timeout_s=60.0, model_id=model_id)
            except BackPressureError as e:
                return await _simple(send, 503, str(e))
            except asyncio.TimeoutError:
                return await _simple(send, 503, f"no replica of {router.dep_id} became available within 60 s")
            streaming = False
            poller = ChannelPoller.of(self._pollers, key, h, _id_prefix)
            inbox = poller.expect(request_id)  # before the call: a push may bring chunks first
            try:
                reply = await _unless_left(await self._call(h, request_id, child, body, poller.group), disconnect)
                if reply is _LEFT:
                    h.cancel.remote(request_id)
                    return
                if reply[0] == "full":
                    _, status, headers, data = reply
                    await send({"type": "http.response.start", "status": status, "headers": headers})
                    await send({"type": "http.response.body", "body": data})
                    return
                if reply[0] == "stream":
                    streaming = True
                    await self._relay(router, key, h, request_id, reply, send, disconnect, inbox)
                return
            except (ActorDiedError, RayActorError) as e:
                router.drop(key)
                if attempt == _ATTEMPTS - 1:
                    return await _simple(send, 503, f"replica of {router.dep_id} died: {e}")
            except Exception as e:
                log.exception("request %s failed", request_id)
                return await _simple(send, 500, f"{type(e).__name__}: {e}")
            finally:
                if not streaming:
                    poller.close(request_id)
                    router.release(key)

    async def _call(self, h: Any, request_id: str, child: dict[str, Any], body: bytes, group: str) -> Any:
        """h.handle_http.remote(...): the reply's ObjectRef, whose `await` on the core loop
        resumes this request straight from the reply (no future in between, no thread hop)."""
        if self._big is not None and len(body) + sum(len(k) + len(v) for k, v in child["headers"]) > self._big:
            return await asyncio.to_thread(h.handle_http.remote, request_id, child, body, group)
        return h.handle_http.remote(request_id, child, body, group)

    async def _relay(self, router: Any, key: str, h: Any, request_id: str, reply: tuple[Any, ...], send: Any,
                     disconnect: asyncio.Future[Any], inbox: Inbox) -> None:
        """Streams the rest of the body as the replica produces it. Every stream open on one
        replica is fed by that replica's ChannelPoller (the replica pushes on one socket what all
        of them produce), so chunks are coalesced only when they would otherwise queue behind a
        send, and each send's cost is shared; what arrived together goes out in one write."""
        finished = False
        disconnect.add_done_callback(inbox.wake)  # a client that leaves ends the wait below
        try:
            _, status, headers, first, done = reply
            headers = [(k, v) for k, v in headers if k.lower() != b"content-length"]
            await send({"type": "http.response.start", "status": status, "headers": headers})
            if not done:
                inbox.poller.start(request_id)
            while not done:
                if first:
                    await send({"type": "http.response.body", "body": first, "more_body": True})
                while not inbox.items:
                    await inbox.wait()
                    if disconnect.done():
                        return
                first, done, error = inbox.take()
                if error is not None:  # the user's generator raised, or the replica died: the
                    log.warning("stream %s ended early: %s", request_id, error)  # head is sent, so
                    return  # the connection is closed without the body's end (the client sees it)
            finished = True
            await send({"type": "http.response.body", "body": first, "more_body": False})
        finally:
            disconnect.remove_done_callback(inbox.wake)
            inbox.poller.close(request_id)
            if not finished:  # the client left, or the stream failed: stop the user's generator
                h.cancel.remote(request_id)
            router.release(key)


class _StatusRecorder:
    """Wraps send() to remember the status, for the latency histogram."""

    def __init__(self, send: Any, hist: Any, app: str) -> None:
        self.send, self.hist, self.app = send, hist, app
        self.status = 0
        self.t0 = asyncio.get_running_loop().time()

    async def __call__(self, msg: dict[str, Any]) -> None:
        if msg["type"] == "http.response.start":
            self.status = msg["status"]
        await self.send(msg)

    def observe(self) -> None:
        elapsed = asyncio.get_running_loop().time() - self.t0
        self.hist.labels(self.app, str(self.status or 499)).observe(elapsed)


_LEFT = object()


async def _unless_left(reply: Any, disconnect: asyncio.Future[Any]) -> Any:
    """Awaits the call's reply (an ObjectRef: on the core loop, straight from the core's store),
    or _LEFT once the client disconnected first. No task or future is made per request: a
    disconnect cancels this wait (only this wait) from the future's done-callback."""
    me = asyncio.current_task()
    waiting, ours = True, False

    def left(_: object) -> None:
        nonlocal ours
        if waiting and me is not None:
            ours = True
            me.cancel()

    disconnect.add_done_callback(left)
    try:
        return await reply
    except asyncio.CancelledError:
        if ours and me is not None and me.cancelling() == 1:  # ours alone (not the server's too)
            me.uncancel()
            return _LEFT
        raise
    finally:
        waiting = False
        disconnect.remove_done_callback(left)
