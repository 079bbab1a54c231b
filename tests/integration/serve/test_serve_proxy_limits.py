"""The Serve proxy's HTTP limits, on a real proxy process (`python -m ember_serve_proxy` with small
limits) through raw loopback sockets: an oversized body (declared or chunked) gets 413 and the
proxy's memory stays bounded, an oversized head gets 431, a slow head is disconnected, a
connection past the cap is closed while an open one is still served, and ordinary requests
(streamed replies included) still work."""
from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import tempfile
import time

import httpx
import psutil
import pytest
from starlette.responses import StreamingResponse

import ember
from ember import serve
from ember.testing import wait_for as _wait_for

MAX_BODY = 1 << 20
MAX_HEAD = 8 * 1024
MAX_FIELDS = 20
HEAD_TIMEOUT_S = 2.0
MAX_CONNECTIONS = 6
KEEP_ALIVE_S = 3.0  # not uvicorn's default (5 s): the test sees the option, not the default


def wait_for(cond, timeout=30.0, what="condition"):
    return _wait_for(cond, timeout_s=timeout, interval_s=0.05, what=what)


@serve.deployment
class Sink:
    async def __call__(self, request):
        if request.query_params.get("kind") == "stream":
            async def parts():
                for i in range(3):
                    yield f"part{i} "
            return StreamingResponse(parts(), media_type="text/plain")
        return {"received": len(await request.body())}


def _read(path):
    with open(path) as f:
        return f.read().strip()


@pytest.fixture(scope="module")
def proxy(serve_url):
    """(port, psutil.Process) of a standalone proxy with small limits, routing /sink."""
    serve.run(Sink.bind(), name="sink", route_prefix="/sink")
    gcs = ember.get_runtime_context().gcs_address
    with tempfile.TemporaryDirectory() as d:
        pf = os.path.join(d, "port")
        p = subprocess.Popen([sys.executable, "-m", "ember_serve_proxy", "--gcs-address", gcs,
                              "--host", "127.0.0.1", "--port", "0", "--port-file", pf,
                              "--max-body-bytes", str(MAX_BODY), "--max-header-bytes", str(MAX_HEAD),
                              "--max-header-fields", str(MAX_FIELDS), "--header-timeout-s", str(HEAD_TIMEOUT_S),
                              "--keep-alive-timeout-s", str(KEEP_ALIVE_S), "--max-connections", str(MAX_CONNECTIONS)])
        try:
            wait_for(lambda: os.path.exists(pf) and _read(pf), 60, "the proxy's port file")
            port = int(_read(pf))
            wait_for(lambda: _get(port, "/sink")[0] == 200, 60, "the proxy to route /sink")
            yield port, psutil.Process(p.pid)
        finally:
            p.terminate()
            assert p.wait(30) == 0
    serve.delete("sink")


def _connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.settimeout(10)
    return s


def _response(s):
    """(status, whole reply) read until the server closes or a complete reply has arrived."""
    data = b""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            break
        if not chunk:
            break
        data += chunk
        head, sep, body = data.partition(b"\r\n\r\n")
        if sep:
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                if k.strip().lower() == b"content-length" and len(body) >= int(v):
                    return int(data.split()[1]), data
    return (int(data.split()[1]) if data else 0), data


def _get(port, path, extra=b""):
    try:
        with _connect(port) as s:
            s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nhost: x\r\n" + extra + b"\r\n")
            return _response(s)
    except OSError:
        return 0, b""


def _poll(s):
    """What the server sent so far without waiting: b"" when it closed, None when nothing came."""
    if not select.select([s], [], [], 0)[0]:
        return None
    try:
        return s.recv(65536)
    except ConnectionResetError:
        return b""


def _rss(proc):
    return proc.memory_info().rss


def test_declared_oversized_body_gets_413_unread(proxy):
    port, proc = proxy
    before = _rss(proc)
    with _connect(port) as s:
        s.sendall(b"POST /sink HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n" % (2 << 30))
        status, data = _response(s)  # answered before a byte of the body was sent
        assert status == 413, data
        assert b"max_body_bytes" in data
    assert _rss(proc) - before < 64 << 20
    assert _get(port, "/sink")[0] == 200


def test_chunked_body_refused_once_past_the_limit(proxy):
    port, proc = proxy
    before = _rss(proc)
    chunk = b"x" * 65536
    sent = 0
    with _connect(port) as s:
        s.sendall(b"POST /sink HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n")
        s.settimeout(0.5)
        got = b""
        for _ in range(4096):  # at most 256 MiB: a proxy that reads it all fails the assertions below
            try:
                s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
            except (BrokenPipeError, ConnectionResetError, socket.timeout):
                break
            got = _poll(s)
            if got is not None:
                break
        s.settimeout(10)
        if not got:
            status, data = _response(s)
        else:
            status, data = int(got.split()[1]), got
        assert status == 413, data
    assert sent < 64 * MAX_BODY  # refused soon after the limit, not after the whole stream
    assert _rss(proc) - before < 64 << 20
    ok = httpx.post(f"http://127.0.0.1:{port}/sink", content=b"y" * (MAX_BODY - 1), timeout=30)
    assert ok.status_code == 200 and ok.json() == {"received": MAX_BODY - 1}


def test_oversized_head_gets_431(proxy):
    port, proc = proxy
    status, data = _get(port, "/sink", b"x-big: " + b"a" * (2 * MAX_HEAD) + b"\r\n")
    assert status == 431, data
    many = b"".join(b"x-h%d: v\r\n" % i for i in range(MAX_FIELDS + 5))
    assert _get(port, "/sink", many)[0] == 431
    # one endless header line, never finished: refused once past the limit, not buffered
    with _connect(port) as s:
        s.sendall(b"GET /sink HTTP/1.1\r\nhost: x\r\nx-endless: ")
        refused = False
        for _ in range(1024):  # at most 64 MiB
            try:
                s.sendall(b"a" * 65536)
            except (BrokenPipeError, ConnectionResetError):
                refused = True
                break
            if _poll(s) is not None:
                refused = True
                break
        assert refused
    fits = b"".join(b"x-h%d: %s\r\n" % (i, b"v" * 100) for i in range(MAX_FIELDS - 2))
    assert _get(port, "/sink", fits)[0] == 200


def test_slow_head_is_disconnected(proxy):
    port, _ = proxy
    with _connect(port) as s:
        s.sendall(b"GET /sink HTTP/1.1\r\nhost: x\r\n")  # and never the blank line
        t0 = time.monotonic()
        closed = False
        for _ in range(40):  # at most ~10 s
            try:
                s.sendall(b"x-drip: 1\r\n")
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            try:
                s.settimeout(0.25)
                if s.recv(1024) == b"":
                    closed = True
                    break
            except socket.timeout:
                continue
            except ConnectionResetError:
                closed = True
                break
        assert closed
        assert HEAD_TIMEOUT_S * 0.8 <= time.monotonic() - t0 < HEAD_TIMEOUT_S + 5
    # an idle connection that never sends a byte goes too
    with _connect(port) as s:
        s.settimeout(HEAD_TIMEOUT_S + 5)
        assert s.recv(1024) == b""


def test_connections_past_the_cap_are_closed(proxy):
    port, _ = proxy
    held = []
    try:
        for _ in range(MAX_CONNECTIONS):
            held.append(_connect(port))
        time.sleep(0.2)  # every held connection is accepted (and counted) by now
        extra = _connect(port)
        extra.settimeout(5)
        try:
            refused = extra.recv(1024) == b""
        except ConnectionResetError:
            refused = True
        extra.close()
        assert refused
        # an open one is still served
        held[0].sendall(b"GET /sink HTTP/1.1\r\nhost: x\r\n\r\n")
        status, data = _response(held[0])
        assert status == 200, data
    finally:
        for s in held:
            s.close()
    wait_for(lambda: _get(port, "/sink")[0] == 200, 10, "a new connection once the others closed")


def test_ordinary_requests_and_streams_still_work(proxy):
    port, _ = proxy
    with httpx.Client(timeout=30) as c:
        for _ in range(3):  # over one keep-alive connection
            assert c.post(f"http://127.0.0.1:{port}/sink", content=b"z" * 1000).json() == {"received": 1000}
        with c.stream("GET", f"http://127.0.0.1:{port}/sink", params={"kind": "stream"}) as r:
            assert r.status_code == 200
            assert "".join(r.iter_text()) == "part0 part1 part2 "


def _one_reply(s):
    """One chunked reply (the proxy streams replies), read up to its last chunk and no further:
    the connection stays open."""
    data = b""
    while not data.endswith(b"\r\n0\r\n\r\n"):
        chunk = s.recv(65536)
        assert chunk, data
        data += chunk
    return data


def test_idle_keep_alive_connection_is_closed_after_the_timeout(proxy):
    """keep_alive_timeout_s: a connection idle between requests stays usable before it and is
    closed by the proxy once it passes (the head timeout does not run between requests)."""
    port, _ = proxy
    with _connect(port) as s:
        s.sendall(b"GET /sink HTTP/1.1\r\nhost: x\r\n\r\n")
        assert _one_reply(s).startswith(b"HTTP/1.1 200 ")
        time.sleep(KEEP_ALIVE_S / 2)  # idle, but not for long enough: still served
        assert _poll(s) is None
        s.sendall(b"GET /sink HTTP/1.1\r\nhost: x\r\n\r\n")
        assert _one_reply(s).startswith(b"HTTP/1.1 200 ")
        t0 = time.monotonic()  # the idle time counts from the last response
        s.settimeout(KEEP_ALIVE_S + 10)
        try:
            closed = s.recv(1024)
        except ConnectionResetError:
            closed = b""
        idle = time.monotonic() - t0
        assert closed == b""
        assert KEEP_ALIVE_S * 0.8 <= idle < KEEP_ALIVE_S + 1.5, idle


def test_http_options_reach_the_embedded_proxy(proxy):
    """serve.start(http_options=HTTPOptions(...)) starts the embedded proxy with those limits
    (runs last: it restarts Serve, and deploys /sink again for the module's teardown)."""
    from ember.serve import api as serve_api

    serve.shutdown()
    serve.start(http_options=serve.HTTPOptions(host="127.0.0.1", port=0, max_header_fields=12,
                                               max_body_bytes=1000))
    serve.run(Sink.bind(), name="sink", route_prefix="/sink")
    host, port = serve_api.proxy_address()
    wait_for(lambda: _get(port, "/sink")[0] == 200, 60, "the embedded proxy to route /sink")
    assert _get(port, "/sink", b"".join(b"x-%d: v\r\n" % i for i in range(12)))[0] == 431
    r = httpx.post(f"http://{host}:{port}/sink", content=b"b" * 1001, timeout=30)
    assert r.status_code == 413
    with pytest.raises(ValueError, match="request_timeout_s"):
        serve.start(http_options={"host": "127.0.0.1", "port": 0, "request_timeout_s": 30})
