"""The proxy's connection-level limits (ember_serve_proxy.limits) on uvicorn's protocol with an
in-memory transport, and serve's HTTPOptions validation: no sockets, no cluster."""
from __future__ import annotations

import asyncio

import pytest
import uvicorn
from uvicorn.server import ServerState

from ember.serve import HTTPOptions
from ember_serve_proxy import limits
from ember_serve_proxy.limits import limited_protocol


@pytest.fixture(autouse=True)
def _short_linger(monkeypatch):
    monkeypatch.setattr(limits, "LINGER_S", 0.05)


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = False
        self.eof = False

    def write(self, data: bytes) -> None:  # type: ignore[override]
        self.written += bytes(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name, default=None):
        return default


async def _app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def _proto(state: ServerState | None = None, **limits):
    kw = dict(max_header_bytes=1024, max_header_fields=10, header_timeout_s=5.0, max_connections=100)
    kw.update(limits)
    cls = limited_protocol(**kw)
    config = uvicorn.Config(_app, http=cls, lifespan="off", log_level="critical")
    p = cls(config=config, server_state=state or ServerState(), app_state={}, _loop=asyncio.get_running_loop())
    t = _Transport()
    p.connection_made(t)
    return p, t


def test_a_head_within_the_limits_is_served():
    async def go():
        p, t = _proto()
        p.data_received(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        await asyncio.sleep(0.05)
        return t
    t = asyncio.run(go())
    assert t.written.startswith(b"HTTP/1.1 200"), t.written


@pytest.mark.parametrize("head", [
    b"GET / HTTP/1.1\r\nx-big: " + b"a" * 2000 + b"\r\n\r\n",  # one big header, in one read
    b"GET /" + b"a" * 2000 + b" HTTP/1.1\r\n\r\n",  # a long request line
    b"GET / HTTP/1.1\r\n" + b"".join(b"x-%d: v\r\n" % i for i in range(11)) + b"\r\n",  # too many fields
])
def test_an_oversized_head_gets_431(head):
    async def go():
        p, t = _proto()
        p.data_received(head)
        assert t.eof and not t.closed  # the reply is out; what still comes is read and dropped
        p.data_received(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        await asyncio.sleep(0.2)  # then the connection closes (lingering close)
        return t
    t = asyncio.run(go())
    assert t.written.startswith(b"HTTP/1.1 431"), t.written
    assert t.written.count(b"HTTP/1.1") == 1
    assert t.closed


def test_an_endless_header_line_is_refused_once_past_the_limit():
    async def go():
        p, t = _proto()
        p.data_received(b"GET / HTTP/1.1\r\nx-endless: ")
        fed = 0
        for _ in range(100):  # bounded: 100 * 100 bytes
            if t.eof:
                break
            p.data_received(b"a" * 100)
            fed += 100
        return t, fed
    t, fed = asyncio.run(go())
    assert t.written.startswith(b"HTTP/1.1 431") and t.eof
    assert fed <= 1100


def test_a_slow_head_is_disconnected():
    async def go():
        p, t = _proto(header_timeout_s=0.05)
        p.data_received(b"GET / HTTP/1.1\r\nhost: x\r\n")
        await asyncio.sleep(0.3)
        idle, t2 = _proto(header_timeout_s=0.05)  # never sends a byte
        await asyncio.sleep(0.3)
        return t, t2
    t, t2 = asyncio.run(go())
    assert t.closed and t.written == b""
    assert t2.closed


def test_connections_past_the_cap_are_closed():
    async def go():
        state = ServerState()
        first, t1 = _proto(state, max_connections=1)
        second, t2 = _proto(state, max_connections=1)
        first.data_received(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        await asyncio.sleep(0.05)
        return t1, t2
    t1, t2 = asyncio.run(go())
    assert t2.closed and t2.written == b""
    assert t1.written.startswith(b"HTTP/1.1 200")


def test_http_options_validation():
    assert HTTPOptions().port == 8000 and HTTPOptions().proxy_limits() == {}
    o = HTTPOptions.from_any({"host": "127.0.0.1", "port": 0, "max_body_bytes": 1024, "keep_alive_timeout_s": 2})
    assert o.proxy_limits() == {"max_body_bytes": 1024, "keep_alive_timeout_s": 2}
    assert HTTPOptions.from_any({"root_path": "", "request_timeout_s": None}).port == 8000  # Ray's unset values
    with pytest.raises(ValueError, match="request_timeout_s"):
        HTTPOptions.from_any({"request_timeout_s": 10})
    with pytest.raises(ValueError, match="max_body_byte"):
        HTTPOptions.from_any({"max_body_byte": 10})
    with pytest.raises(ValueError, match="max_connections"):
        HTTPOptions(max_connections=0)
    with pytest.raises(ValueError, match="max_header_bytes"):
        HTTPOptions(max_header_bytes=1.5)  # type: ignore[arg-type]


def test_a_body_is_refused_as_soon_as_it_passes_the_limit():
    async def go(limit):
        pulled = []

        async def receive():
            pulled.append(1)
            return {"type": "http.request", "body": b"x" * 100, "more_body": len(pulled) < 50}
        return await limits.read_body(receive, limit), len(pulled)
    assert asyncio.run(go(250)) == (limits.TOO_LARGE, 3)  # never reads on past the limit
    body, n = asyncio.run(go(5000))
    assert body == b"x" * 5000 and n == 50
    assert limits.declared_length([(b"content-length", b"12")]) == 12
    assert limits.declared_length([(b"content-length", b"x")]) is None
