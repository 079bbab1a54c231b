"""HTTP inside a replica: the Starlette request handed to `__call__`, turning return values
into responses, and running an ASGI app (a `@serve.ingress` FastAPI app) on a buffered request.

A reply to the proxy is a tuple: ("full", status, headers, body) or ("stream", status, headers,
first_chunk, done); the rest of a stream reaches the proxy on its stream channel (stream_channel.py).
"""
from __future__ import annotations

import asyncio
import inspect
import json
from typing import Any, AsyncIterator

from starlette.exceptions import HTTPException as HTTPException  # replica.py tells it apart
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

Headers = list[tuple[bytes, bytes]]
_JSON_HEADERS: Headers = [(b"content-type", b"application/json")]
_TEXT_HEADERS: Headers = [(b"content-type", b"text/plain; charset=utf-8")]


class ServeRequest(Request):
    """A Starlette request whose body is already here; `await request.json()` on a body that is
    not JSON raises HTTPException(400) naming the problem (answered as 400, not 500)."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                self._json = json.loads(body)
            except ValueError as e:
                raise HTTPException(400, f"malformed JSON in the request body: {e}") from None
        return self._json


def make_request(scope: dict[str, Any], body: bytes, disconnected: asyncio.Event) -> ServeRequest:
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await disconnected.wait()
        return {"type": "http.disconnect"}

    return ServeRequest(scope, receive)


def to_bytes(x: Any) -> bytes:
    """One item of a streamed body as bytes: bytes as they are, str in UTF-8, anything else as
    JSON."""
    if isinstance(x, bytes):
        return x
    if isinstance(x, str):
        return x.encode()
    return json.dumps(x).encode()


def to_reply(result: Any) -> tuple[tuple[Any, ...], Any]:
    """A user return value → (reply head, rest of a stream or None). The rest is the user's own
    iterable (sync or async; a StreamingResponse's body iterator, which a push source of bytes
    may be), its items not yet bytes: the replica's pump converts them with to_bytes as it reads
    them, so no generator layer sits between it and the user's generator."""
    if isinstance(result, StreamingResponse):
        return ("stream", result.status_code, result.raw_headers, b""), result.body_iterator
    if isinstance(result, Response):
        return ("full", result.status_code, result.raw_headers, bytes(result.body)), None
    if inspect.isgenerator(result) or inspect.isasyncgen(result):
        return ("stream", 200, _TEXT_HEADERS, b""), result
    if isinstance(result, bytes):
        return ("full", 200, [(b"content-type", b"application/octet-stream")], result), None
    if isinstance(result, str):
        return ("full", 200, _TEXT_HEADERS, result.encode()), None
    return ("full", 200, _JSON_HEADERS, json.dumps(result).encode()), None


def error_reply(e: BaseException) -> tuple[Any, ...]:
    if isinstance(e, HTTPException):
        r: Response = PlainTextResponse(str(e.detail), status_code=e.status_code)
    else:
        r = JSONResponse({"error": type(e).__name__, "message": str(e)}, status_code=500)
    return ("full", r.status_code, r.raw_headers, bytes(r.body))


async def run_asgi(app: Any, scope: dict[str, Any], body: bytes,
                   disconnected: asyncio.Event) -> tuple[tuple[Any, ...], AsyncIterator[bytes] | None]:
    """Runs an ASGI app on one buffered request; a body sent in several parts becomes a stream."""
    q: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await disconnected.wait()
        return {"type": "http.disconnect"}

    async def send(msg: dict[str, Any]) -> None:
        await q.put(msg)

    async def runner() -> None:
        try:
            await app(scope, receive, send)
        except Exception as e:  # after a 500 was sent by the app's error middleware, or before
            await q.put({"type": "ember.error", "error": e})
        finally:
            await q.put(None)

    task = asyncio.ensure_future(runner())
    msg = await q.get()
    if msg is None or msg["type"] == "ember.error":
        return error_reply(msg["error"] if msg else RuntimeError("the ASGI app sent no response")), None
    status, headers = msg["status"], [(bytes(k), bytes(v)) for k, v in msg.get("headers", [])]
    first = await q.get()
    if first is None or first["type"] != "http.response.body":
        return ("full", status, headers, b""), None
    if not first.get("more_body", False):
        return ("full", status, headers, first.get("body", b"")), None

    async def rest() -> AsyncIterator[bytes]:
        try:
            while True:
                m = await q.get()
                if m is None or m["type"] != "http.response.body":
                    return
                if m.get("body"):
                    yield m["body"]
                if not m.get("more_body", False):
                    return
        finally:
            if not task.done():
                task.cancel()

    return ("stream", status, headers, first.get("body", b"")), rest()


def bind_ingress(app: Any, cls: type, instance: Any) -> Any:
    """A copy of a FastAPI app whose routes defined as methods of cls call them on instance."""
    from fastapi import FastAPI
    from fastapi.routing import APIRoute

    new = FastAPI(title=getattr(app, "title", "FastAPI"))
    prefix = cls.__qualname__ + "."
    for route in app.router.routes:
        ep = getattr(route, "endpoint", None)
        if isinstance(route, APIRoute) and ep is not None and getattr(ep, "__qualname__", "").startswith(prefix):
            bound = getattr(instance, ep.__name__)
            new.router.add_api_route(route.path, bound, methods=list(route.methods or ["GET"]),
                                     status_code=route.status_code, response_model=route.response_model,
                                     response_class=route.response_class, name=route.name)
        else:
            new.router.routes.append(route)
    new.exception_handlers.update(getattr(app, "exception_handlers", {}))
    new.user_middleware = list(getattr(app, "user_middleware", []))
    return new
