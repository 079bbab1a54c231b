"""A direct socket from a caller process to a replica for the streams it has open there.

Polling a replica with `stream_poll` actor calls costs, per round trip, a task spec, a pickled
reply and four thread hops (caller loop → core loop → replica's core loop → actor loop and back).
Under 16 token streams that round trip is most of the serving CPU per chunk. So a caller (the
proxy for HTTP bodies; the handle runtime of a driver or deployment for streamed handle calls)
asks each replica once for a stream channel (`ServeReplica.stream_channel()`, an authenticated actor call
that returns host, port and a per-replica secret) and opens one TCP connection to it, served on
the replica's own event loop (the actor loop, where the pumps run). On that connection the
replica pushes what the caller's streams produce, with no request per batch:

    caller → replica   hello: MAGIC, the secret (hex), a space, the group, a newline; then nothing
    replica → caller   entries: flags (1 byte: DONE=1, ERROR=2, ITEMS=4, FETCH=8), len(stream
                       id) (2 bytes), len(data) (4 bytes), the stream id, the data; big-endian.
                       Data: an HTTP body's bytes; with ITEMS a handle stream's items (a
                       pickled list); with ERROR the error "Type: message" in UTF-8; FETCH: a
                       handle stream's user code raised (the caller fetches it with stream_next)

The push needs no task and no wake-up of its own: the group's StreamMux (streams.py) calls the
connection's `schedule()` when one of its streams has something ready, which queues one flush
with `loop.call_soon` (unless one is queued already). So the flush runs right after the step of
the producer that made the chunk — after the user's generator has started its next sleep, never
in front of it — and writes in one send every chunk of every stream of the group that became
ready before it ran: the first chunk is never held back, and chunks coalesce only when they were
produced in the same loop iteration or while the socket was full. Back-pressure: past
`_HIGH_WATER_BYTES` unsent, flushes stop until the socket drains, and each pump holds at most
its buffer. When the caller goes away (EOF, reset) every stream of its group is closed, which
closes the user's generators.

An HTTP body is never pickled: a chunk travels as the bytes the user produced. A handle stream's
items are pickled as a list per entry (pickle; cloudpickle for what pickle refuses); an
ObjectRef among them is pinned for good (it travels outside the reference counting of actor
calls). The channel is not offered with mutual TLS on (`EMBER_USE_TLS=1`): callers then poll
with actor calls, which ride the TLS gRPC channels. A connection whose hello does not carry the
secret is closed unread.
"""
from __future__ import annotations

import asyncio
import hmac
import logging
import os
import pickle
import struct
from typing import Any, Callable

import cloudpickle

from .streams import FETCH_ERROR

log = logging.getLogger(__name__)

MAGIC = b"EMBERSTREAM1 "
DONE, ERROR, ITEMS, FETCH = 1, 2, 4, 8
_CONNECT_TIMEOUT_S = 3.0  # a replica whose channel is not reachable from here is polled instead
_HEAD = struct.Struct("!BHI")  # flags, len(stream id), len(data)
_HELLO_TIMEOUT_S = 10.0
_HELLO_MAX_BYTES = 1024
_HIGH_WATER_BYTES = 1 << 20

Entry = tuple[str, Any, bool, "str | None"]


def encode(batch: list[tuple[str, Any, bool, str | None]]) -> bytes:
    """One send's bytes for (stream id, body bytes or a list of items, done, error) entries
    (StreamMux.poll's)."""
    parts: list[bytes] = []
    pack = _HEAD.pack
    for sid, data, done, error in batch:
        sb = sid.encode()
        if error == FETCH_ERROR:
            payload, flags = b"", FETCH
        elif error is not None:
            payload, flags = error.encode("utf-8", "replace"), DONE | ERROR
        elif isinstance(data, list):
            payload, flags = _dumps(data), ITEMS | (DONE if done else 0)
        else:
            payload, flags = data, DONE if done else 0
        parts.append(pack(flags, len(sb), len(payload)))
        parts.append(sb)
        parts.append(payload)
    return b"".join(parts)


def _dumps(items: list[Any]) -> bytes:
    """A handle stream's items pickled: the plain pickler (a tenth of cloudpickle's cost for
    the strings and dicts a stream carries), cloudpickle for what it cannot pickle (lambdas,
    classes defined in __main__)."""
    try:
        return pickle.dumps(items, protocol=5)
    except Exception:
        out: bytes = cloudpickle.dumps(items, protocol=5)  # cloudpickle is untyped
        return out


class Decoder:
    """Turns the bytes received, in whatever pieces they come, into entries."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[Entry]:
        """The entries completed by data (a partial entry waits for the rest). Whole entries
        are cut straight from data when nothing was pending (one copy per field)."""
        if self._buf:
            self._buf += data
            buf: bytes | bytearray = self._buf
        else:
            buf = data
        out: list[Entry] = []
        pos, n, size = 0, len(buf), _HEAD.size
        unpack = _HEAD.unpack_from
        view = memoryview(buf)
        try:
            while n - pos >= size:
                flags, ls, ld = unpack(buf, pos)
                start = pos + size
                end = start + ls + ld
                if end > n:
                    break
                sid = str(view[start:start + ls], "utf-8")
                payload = bytes(view[start + ls:end])
                if flags & FETCH:
                    out.append((sid, [], False, FETCH_ERROR))
                elif flags & ERROR:
                    out.append((sid, b"", True, payload.decode("utf-8", "replace")))
                elif flags & ITEMS:
                    out.append((sid, pickle.loads(payload), bool(flags & DONE), None))
                else:
                    out.append((sid, payload, bool(flags & DONE), None))
                pos = end
        finally:
            view.release()
        if buf is self._buf:
            if pos:
                del self._buf[:pos]
        elif pos < n:
            self._buf += data[pos:]
        return out


def hello(secret: str, group: str) -> bytes:
    """What a caller sends first on a new connection."""
    if "\n" in group or " " in group:
        raise ValueError(f"a stream group name has no spaces or newlines: {group!r}")
    return MAGIC + secret.encode() + b" " + group.encode() + b"\n"


class ChannelServer:
    """The replica's side: a TCP server on the replica's event loop; one _Pusher per connection.

    take_ready(group) returns what the group's streams produced since the previous call, without
    waiting (the replica's bookkeeping of finished streams included); watch(group, notify) has
    notify() called (on the loop) whenever one of the group's streams has something ready, and
    watch(group, None) stops it; close_group(group) ends every stream of a group whose caller
    went away."""

    def __init__(self, take_ready: Callable[[str], list[Entry]],
                 watch: Callable[[str, Callable[[], None] | None], None],
                 close_group: Callable[[str], None], host: str) -> None:
        self._take_ready = take_ready
        self._watch = watch
        self._close_group = close_group
        self._host = host
        self._secret = os.urandom(16).hex()
        self._server: asyncio.base_events.Server | None = None
        self._port = 0
        self.connections = 0  # open now (for stream_stats)
        self.pushes = 0  # sends made (for stream_stats)
        self._pushers: set[asyncio.Task[Any]] = set()
        self._groups: set[str] = set()  # connected now

    async def address(self) -> tuple[str, int, str]:
        """(host, port, secret); the server starts at the first call."""
        if self._server is None:
            self._server = await asyncio.start_server(self._serve, self._host, 0)
            self._port = self._server.sockets[0].getsockname()[1]
        return self._host, self._port, self._secret

    async def aclose(self) -> None:
        """Stops listening and ends every connection (their groups' streams close)."""
        if self._server is not None:
            self._server.close()
            for t in list(self._pushers):
                t.cancel()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        try:
            line = await asyncio.wait_for(reader.readuntil(b"\n"), _HELLO_TIMEOUT_S)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            writer.close()
            return
        group = self._check_hello(line)
        if group is None or group in self._groups:  # a second pusher on one group would split it
            log.warning("stream channel: closed a connection from %s (%s)", peer,
                        "no valid hello" if group is None else f"group {group} is already connected")
            writer.close()
            return
        self._groups.add(group)
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._pushers.add(task)
        pusher = _Pusher(self, group, writer)
        try:
            self._watch(group, pusher.schedule)
            pusher.schedule()  # what the group's streams produced before the connection
            await reader.read(1)  # the caller sends nothing more: EOF (or an error) = gone
        except (asyncio.CancelledError, ConnectionError, OSError):
            pass  # the caller went away (or the replica is stopping)
        finally:
            pusher.closed = True
            self._watch(group, None)
            self.connections -= 1
            self._groups.discard(group)
            self._pushers.discard(task)
            writer.close()
            self._close_group(group)

    def _check_hello(self, line: bytes) -> str | None:
        if len(line) > _HELLO_MAX_BYTES or not line.startswith(MAGIC):
            return None
        secret, _, group = line[len(MAGIC):].rstrip(b"\n").partition(b" ")
        if not group or not hmac.compare_digest(secret, self._secret.encode()):
            return None
        return group.decode("utf-8", "replace")


class _Pusher:
    """Writes one group's ready chunks on its connection: one flush queued at a time (loop
    thread only; see the module docstring)."""

    __slots__ = ("server", "group", "writer", "transport", "loop", "queued", "paused", "closed", "drainer")

    def __init__(self, server: ChannelServer, group: str, writer: asyncio.StreamWriter) -> None:
        self.server, self.group, self.writer = server, group, writer
        self.transport = writer.transport
        self.loop = asyncio.get_running_loop()
        self.queued = self.paused = self.closed = False
        self.drainer: asyncio.Future[None] | None = None

    def schedule(self) -> None:
        """Something of the group is ready: flush once the current step is over."""
        if not (self.queued or self.paused or self.closed):
            self.queued = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self.queued = False
        if self.paused or self.closed:
            return
        try:
            batch = self.server._take_ready(self.group)
            if not batch:
                return
            data = encode(batch)
        except Exception:  # e.g. a handle stream's item nothing can pickle: the caller's streams end
            log.exception("stream channel of group %s: a batch could not be sent; closing it", self.group)
            self.closed = True
            self.transport.close()  # _serve sees the end and closes the group's streams
            return
        self.transport.write(data)
        self.server.pushes += 1
        if self.transport.get_write_buffer_size() > _HIGH_WATER_BYTES:
            self.paused = True  # the streams' items wait in their pumps (bounded) meanwhile
            self.drainer = asyncio.ensure_future(self._drain())

    async def _drain(self) -> None:
        try:
            await self.writer.drain()
        except (ConnectionError, OSError):
            return  # the connection is gone: _serve closes the group
        self.paused = False
        self.schedule()


class ChannelClient(asyncio.Protocol):
    """The caller's side of one connection: hands each entry to `deliver(entries)` and calls
    `lost(error)` once when the connection ends."""

    def __init__(self, deliver: Callable[[list[Entry]], None], lost: Callable[[BaseException | None], None]) -> None:
        self._deliver = deliver
        self._lost = lost
        self._decoder = Decoder()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        entries = self._decoder.feed(data)
        if entries:
            self._deliver(entries)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost(exc)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def connect(host: str, port: int, secret: str, group: str,
                  deliver: Callable[[list[Entry]], None],
                  lost: Callable[[BaseException | None], None]) -> ChannelClient:
    """Opens a channel to a replica's ChannelServer and says hello."""
    loop = asyncio.get_running_loop()
    _, proto = await asyncio.wait_for(loop.create_connection(lambda: ChannelClient(deliver, lost), host, port),
                                      _CONNECT_TIMEOUT_S)
    assert proto.transport is not None
    proto.transport.write(hello(secret, group))
    return proto
