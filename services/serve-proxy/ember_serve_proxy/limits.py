"""The proxy's connection-level HTTP limits: uvicorn's httptools protocol, bounded.

uvicorn's httptools protocol limits neither the size of a request's head nor how long a client
may take to send it, and accepts every connection. `limited_protocol(...)` returns a subclass
that adds, per connection:

- a head limit: the request line and headers together past `max_header_bytes`, or more than
  `max_header_fields` fields, get `431 Request Header Fields Too Large` and the connection is
  closed. A head still incomplete is counted as its bytes arrive, so a client streaming one
  endless header line is refused once it passes the limit (never buffered past it);
- a header-read timeout: a request whose head is not complete `header_timeout_s` after its
  first byte (or after the connection opened) is disconnected (slowloris);
- a connection cap: a connection accepted while `max_connections` are open is closed at once;
  the open ones are served as before.

The keep-alive idle timeout is uvicorn's own (`timeout_keep_alive`); the body limit is the
app's (ProxyApp answers 413 through `declared_length` and `read_body`, which counts a body as it
arrives).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger(__name__)


TOO_LARGE = object()


async def read_body(receive: Any, limit: int | None) -> bytes | object | None:
    """The request's body; None when the client left, TOO_LARGE once more than `limit` bytes
    arrived (counted as they arrive: the rest is never read; uvicorn pauses reading while
    a chunk waits, so at most about one chunk past the limit is held)."""
    chunks, size = [], 0
    while True:
        m = await receive()
        if m["type"] == "http.disconnect":
            return None
        chunk = m.get("body", b"")
        size += len(chunk)
        if limit is not None and size > limit:
            return TOO_LARGE
        chunks.append(chunk)
        if not m.get("more_body", False):
            return b"".join(chunks) if len(chunks) != 1 else chunks[0]


def declared_length(headers: Any) -> int | None:
    """The request's Content-Length (None: none, or not a number)."""
    for k, v in headers:
        if k == b"content-length":
            try:
                return int(v)
            except ValueError:
                return None
    return None


class _Warner:
    """Logs refused connections at most once per `every_s` (a flood must not flood the log)."""

    def __init__(self, every_s: float = 10.0) -> None:
        self.every_s, self.last, self.count = every_s, float("-inf"), 0

    def refused(self, loop: asyncio.AbstractEventLoop, open_now: int) -> None:
        self.count += 1
        now = loop.time()
        if now - self.last >= self.every_s:
            log.warning("refused %d connection(s) since the last report: %d open (max_connections)",
                        self.count, open_now)
            self.last, self.count = now, 0


LINGER_S = 2.0


class _LingeringTransport:
    """The transport a request's cycle writes to: its close() (uvicorn's, after a response
    with `connection: close`, such as a 413) lingers instead (see _linger)."""

    def __init__(self, transport: asyncio.Transport, linger: Any) -> None:
        self._transport, self._linger, self._closing = transport, linger, False

    def close(self) -> None:
        self._closing = True
        self._linger()

    def is_closing(self) -> bool:
        return self._closing or self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _reply(status: int, reason: str, msg: str) -> bytes:
    body = msg.encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain; charset=utf-8\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode() + body


def limited_protocol(*, max_header_bytes: int, max_header_fields: int, header_timeout_s: float,
                     max_connections: int) -> type[HttpToolsProtocol]:
    """uvicorn's HttpToolsProtocol with the limits above (pass it as `uvicorn.Config(http=...)`)."""
    warner = _Warner()

    class LimitedHttpToolsProtocol(HttpToolsProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._in_head = True  # waiting for (or reading) a request's head
            self._head_raw = 0  # bytes received while the head is incomplete
            self._head_size = 0  # request line + header names and values parsed so far
            self._head_fields = 0
            self._refusal: str | None = None
            self._head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                warner.refused(self.loop, len(self.connections) - 1)
                self._refusal = "closed"
                transport.close()
                return
            self._arm_head_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_head_timer()
            super().connection_lost(exc)

        def _arm_head_timer(self) -> None:
            if self._head_timer is None and header_timeout_s > 0:
                self._head_timer = self.loop.call_later(header_timeout_s, self._head_timed_out)

        def _disarm_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if not self.transport.is_closing():
                log.debug("closed a connection from %s: no complete request head within %s s",
                         self.client, header_timeout_s)
                self._refusal = "closed"
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            if self._refusal is not None:
                return
            super().data_received(data)
            if self._refusal not in (None, "closed"):  # a callback found the head too large
                self._refuse(self._refusal)
            elif self._in_head and self._refusal is None and not self.transport.is_closing():
                self._head_raw += len(data)
                if self._head_raw > max_header_bytes:
                    self._refuse(f"request head over {max_header_bytes} bytes")

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._in_head, self._head_raw, self._head_size, self._head_fields = True, 0, 0, 0
            self._arm_head_timer()

        # Once a head is found too large, the parser's remaining callbacks for this read are
        # ignored (no request starts) and data_received answers 431 after the parser returns.
        def on_url(self, url: bytes) -> None:
            if self._count(len(url), 0):
                super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            if self._count(len(name) + len(value), 1):
                super().on_header(name, value)

        def _count(self, size: int, fields: int) -> bool:
            """Adds a head part; False once the head is past a limit (or refused already)."""
            if self._refusal is not None:
                return False
            self._head_size += size
            self._head_fields += fields
            if self._head_size > max_header_bytes:
                self._refusal = f"request head over {max_header_bytes} bytes"
            elif self._head_fields > max_header_fields:
                self._refusal = f"more than {max_header_fields} header fields"
            return self._refusal is None

        def on_headers_complete(self) -> None:
            if self._refusal is not None:
                return
            self._in_head = False
            self._disarm_head_timer()
            super().on_headers_complete()
            if self.cycle is not None and not isinstance(self.cycle.transport, _LingeringTransport):
                self.cycle.transport = _LingeringTransport(self.transport, self._linger)  # type: ignore[assignment]

        def _linger(self) -> None:
            """Closes as nginx's lingering close does: the reply is sent and the write side shut,
            what the client still sends (the rest of a refused body) is read and dropped for up
            to LINGER_S, then the connection closes. Closing at once with unread data would make
            the kernel reset the connection, and the client could lose the 413/431."""
            t = self.transport
            if t.is_closing():
                return
            self._refusal = "closed"  # data_received drops what comes now
            self._disarm_head_timer()
            if t.can_write_eof():
                t.write_eof()
            self.flow.resume_reading()
            self.loop.call_later(LINGER_S, t.close)

        def on_body(self, body: bytes) -> None:
            if self._refusal is None:
                super().on_body(body)

        def on_message_complete(self) -> None:
            if self._refusal is None:
                super().on_message_complete()

        def _refuse(self, why: str) -> None:
            self._refusal = "closed"
            self._disarm_head_timer()
            log.debug("431 to %s: %s", self.client, why)
            self.transport.write(_reply(431, "Request Header Fields Too Large", why))
            self._linger()

    return LimitedHttpToolsProtocol
