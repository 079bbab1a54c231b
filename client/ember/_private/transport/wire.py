"""The direct task transport: TaskStream's messages framed on a plain TCP socket.

gRPC aio hands every message through three threads (event engine -> aio poller -> the core
loop) on each side before Ember code runs: about half of a sync call's context switches. Here
each core worker also listens on a TCP socket (same interfaces as its gRPC server) served by an
`asyncio.Protocol` on the core loop: a frame is read in `data_received` and its tasks go to the
executor (worker) or its replies to the waiting futures / callbacks (caller) at once, and a
frame is written with `transport.write` straight from the loop.

Frame: a 4-byte big-endian length of what follows, a type byte, a serialized protobuf
(HELLO: the secret; BATCH: a TaskBatch; REPLIES: a TaskReplyBatch; ITEM: a streamed
generator item, a ReportGeneratorItemRequest, worker to caller; ITEM_ACK: its task_id and
index, caller to worker, once the caller took it: ReportGeneratorItem's reply, so the
generator's pace and order are the unary call's; REFUSED: the worker's last frame on a
connection whose secret was wrong, so that the caller knows none of its tasks ran; PING /
PONG: the caller's keepalive, as gRPC's: with tasks in flight and nothing heard for
EMBER_GRPC_KEEPALIVE_S it pings, and drops the connection, failing them, when no answer comes
within as long again: a SIGSTOPped or vanished worker sends no reset).

Auth: the caller learns the port and the worker's random secret with the unary
`DirectEndpoint` call (authenticated, and TLS'd when TLS is on, like every call) and sends the
secret as its first frame; a connection that presents anything else is closed, and a first
frame longer than the secret is refused from its header, before its payload is read. With TLS on the
worker offers no port (replies port 0) and callers use the gRPC TaskStream, as they do when the
call or the connection fails (task_stream.py's `_Conn`). A malformed frame closes that
connection with a log line; the worker keeps serving the others.

Writes: the first message of a loop iteration goes out at once; later ones of the same
iteration are coalesced into one frame written on the next iteration. Semantics are
TaskStream's: when the connection ends, a task written to it fails with a delivered
`_StreamEnded` (it may have run), a task still queued here with an undelivered one.
The worker's side (the listener and its connections) is in wire_server.py. Loop thread only.
"""
from __future__ import annotations

import abc
import asyncio
import logging
import socket
import struct
from typing import cast

from google.protobuf.message import DecodeError

from ember_common.proto import common_pb2, core_worker_pb2
from ember_common.validate import first_problem
from ember_common.validate_rules import RULES

from .task_stream import TaskStreams, _Outcome, _StreamEnded

log = logging.getLogger(__name__)

HELLO, BATCH, REPLIES, ITEM, ITEM_ACK, REFUSED, PING, PONG = 1, 2, 3, 4, 5, 6, 7, 8
_KINDS = (HELLO, BATCH, REPLIES, ITEM, ITEM_ACK, REFUSED, PING, PONG)
_HEADER = struct.Struct(">IB")  # length of (type byte + payload), type
CONNECT_TIMEOUT_S = 5.0
HELLO_TIMEOUT_S = 10.0
ITEM_ACK_TIMEOUT_S = 60.0  # as the unary ReportGeneratorItem's deadline


class CallerConnectionLost(ConnectionError):
    """A streamed item could not reach its caller over the connection its task came on."""


class FrameError(ValueError):
    """A byte stream that is not a sequence of well-formed frames."""


def encode(kind: int, payload: bytes) -> bytes:
    """One frame: length, type byte, payload."""
    return _HEADER.pack(len(payload) + 1, kind) + payload


class FrameDecoder:
    """Splits a byte stream into (type, payload) frames, whatever the chunks it arrives in.
    `first_max_bytes` caps the first frame's payload (the worker's side: the secret's size, so
    an unauthenticated peer can make it buffer no more than that), `max_payload_bytes` the rest;
    a header over its cap is refused before its payload arrives."""

    __slots__ = ("_buf", "_max", "_first")

    def __init__(self, max_payload_bytes: int, first_max_bytes: int | None = None) -> None:
        self._buf = bytearray()
        self._max = max_payload_bytes
        self._first = first_max_bytes

    @property
    def capping_first(self) -> bool:
        """Whether the first frame has not come out yet and has a cap of its own."""
        return self._first is not None

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """The frames completed by data; raises FrameError on a bad length or type."""
        if self._buf:
            self._buf += data
            buf: bytes | bytearray = self._buf
        else:
            buf = data  # the common case: a chunk that starts at a frame boundary, no copy
        frames: list[tuple[int, bytes]] = []
        pos, n = 0, len(buf)
        while n - pos >= 5:
            length, kind = _HEADER.unpack_from(buf, pos)
            cap = self._max if self._first is None else self._first
            if length < 1 or length - 1 > cap:
                raise FrameError(f"frame length {length} out of range (1..{cap + 1})")
            if kind not in _KINDS:
                raise FrameError(f"unknown frame type {kind}")
            end = pos + 4 + length
            if end > n:
                break
            frames.append((kind, bytes(buf[pos + 5:end])))
            self._first = None
            pos = end
        if buf is self._buf:
            del self._buf[:pos]
        elif pos < n:
            self._buf += buf[pos:]
        return frames


class _Coalescer(abc.ABC):
    """Writes the first message of a loop iteration at once, the rest on the next iteration.
    Each side's connection (DirectConn here, wire_server._ServerConn) says what it writes."""

    loop: asyncio.AbstractEventLoop
    _batching = False

    def _kick(self) -> None:
        if not self._batching:
            self._flush()
            self._batching = True
            self.loop.call_soon(self._end_batch)

    def _end_batch(self) -> None:
        self._batching = False
        if self._has_more():
            self._kick()

    @abc.abstractmethod
    def _flush(self) -> None:
        """Writes everything queued as one frame."""

    @abc.abstractmethod
    def _has_more(self) -> bool:
        """Whether anything was queued since the last flush."""


class DirectConn(asyncio.Protocol, _Coalescer):
    """Caller side: TaskStream's `_Conn` contract over a direct connection. Until connected,
    tasks wait in the outbox; if the endpoint call or the connection fails they (and every
    later push to this worker) go to a gRPC `_Conn` instead."""

    keepalive_s: float | None = None  # None: EMBER_GRPC_KEEPALIVE_S (config.py)

    def __init__(self, streams: TaskStreams, address: str) -> None:
        self.streams = streams
        self.address = address
        self.loop = asyncio.get_running_loop()
        self.pending: dict[bytes, _Outcome] = {}
        self.outbox: list[common_pb2.TaskSpec] = []
        self.broken: BaseException | None = None
        self.give_back = False
        self.transport: asyncio.Transport | None = None
        self.decoder = FrameDecoder(streams.core.config.max_message_bytes)
        self.refused = False  # the worker refused the secret: nothing sent here ran
        ka = self.keepalive_s
        self._ka = streams.core.config.grpc_keepalive_s if ka is None else ka
        self._reads = 0  # data_received calls so far (the keepalive's sign of life)
        self._ka_seen = 0
        self._ping_at: float | None = None
        self._quiet_since = 0.0
        self._ka_timer: asyncio.TimerHandle | None = None
        self._connecting = asyncio.ensure_future(self._connect())

    def push(self, spec: common_pb2.TaskSpec, fut: _Outcome) -> None:
        if self.broken is not None:  # failed on the next iteration, never inside the caller
            self.loop.call_soon(fut.set_exception, _StreamEnded(self.address, delivered=False))
            return
        self.pending[spec.task_id] = fut
        self.outbox.append(spec)
        if self.transport is not None:
            self._kick()

    def request_give_back(self) -> None:
        self.give_back = True
        if self.transport is not None:
            self._kick()

    async def _connect(self) -> None:
        endpoint = await _endpoint(self.streams, self.address)
        if endpoint is not None:
            host, port, secret = endpoint
            try:
                await asyncio.wait_for(self.loop.create_connection(lambda: self, host, port),
                                       CONNECT_TIMEOUT_S)
            except (OSError, asyncio.TimeoutError) as e:
                log.info("direct task transport to %s:%d failed (%s): using the gRPC stream", host, port, e)
                self.streams.endpoints.pop(self.address, None)
            else:
                if self.broken is None and self.transport is not None:
                    self.transport.write(encode(HELLO, secret))
                    self._kick()
                return
        if self.broken is None:
            self._fall_back()

    def _fall_back(self) -> None:
        """Hands everything to a gRPC stream, which takes this worker's pushes from now on."""
        self.broken = _StreamEnded(self.address, delivered=False)
        conn = self.streams.grpc_conn(self.address)
        pending, self.pending = self.pending, {}
        for spec in self.outbox:
            fut = pending.get(spec.task_id)
            if fut is not None:
                conn.push(spec, fut)
        self.outbox = []
        if self.give_back:
            conn.request_give_back()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        _nodelay(self.transport)
        if self._ka > 0:
            self._quiet_since = self.loop.time()
            self._ka_timer = self.loop.call_later(self._ka / 4, self._keepalive)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self._ka_timer is not None:
            self._ka_timer.cancel()
        self._fail(_StreamEnded(self.address))

    def _keepalive(self) -> None:
        """Every keepalive/4 s: with tasks in flight and nothing read for keepalive s, a PING;
        no answer within keepalive s more drops the connection (connection_lost fails them)."""
        if self.transport is None:
            return
        now = self.loop.time()
        if self._reads != self._ka_seen or not self.pending:
            self._ka_seen, self._ping_at, self._quiet_since = self._reads, None, now
        elif self._ping_at is None:
            if now - self._quiet_since >= self._ka:
                self._ping_at = now
                self.transport.write(encode(PING, b""))
        elif now - self._ping_at >= self._ka:
            log.warning("direct task connection to %s closed: no answer to a ping within %.0fs",
                        self.address, self._ka)
            self.transport.abort()
            return
        self._ka_timer = self.loop.call_later(self._ka / 4, self._keepalive)

    def data_received(self, data: bytes) -> None:
        self._reads += 1
        try:
            for kind, payload in self.decoder.feed(data):
                if kind == PONG:
                    continue
                if kind == ITEM:
                    self._take_item(payload)
                    continue
                if kind == REFUSED:  # a stale endpoint (another process on that port?)
                    log.warning("direct task connection to %s refused: %s", self.address,
                                payload.decode(errors="replace"))
                    self.refused = True
                    continue
                if kind != REPLIES:
                    raise FrameError(f"type {kind} where a reply batch was expected")
                for msg in core_worker_pb2.TaskReplyBatch.FromString(payload).replies:
                    fut = self.pending.pop(msg.task_id, None)
                    if fut is not None and not fut.done():
                        fut.set_result(msg.reply)
        except (FrameError, DecodeError) as e:
            log.warning("direct task connection to %s closed: malformed frame: %s", self.address, e)
            if self.transport is not None:
                self.transport.close()  # connection_lost fails what is unanswered

    def _take_item(self, payload: bytes) -> None:
        """A streamed item: taken at once (before the task's reply, which may follow in the
        same read), checked with ReportGeneratorItem's rules, then acknowledged."""
        req = core_worker_pb2.ReportGeneratorItemRequest.FromString(payload)
        problem = first_problem(req, RULES)
        if problem is not None:
            raise FrameError(f"a bad generator item: {problem}")
        freeing = self.streams.core.take_generator_item_nowait(req.task_id, req.index, req.item, req.nested)
        if freeing is not None:
            asyncio.ensure_future(freeing)
        if self.transport is not None:
            ack = core_worker_pb2.ReportGeneratorItemRequest(task_id=req.task_id, index=req.index)
            self.transport.write(encode(ITEM_ACK, ack.SerializeToString()))

    def _flush(self) -> None:
        if self.transport is None or self.transport.is_closing() or not (self.outbox or self.give_back):
            return  # a closing transport drops writes: the tasks stay unwritten (undelivered)
        batch = core_worker_pb2.TaskBatch(specs=self.outbox, give_back=self.give_back)
        self.outbox = []
        self.give_back = False
        self.transport.write(encode(BATCH, batch.SerializeToString()))

    def _has_more(self) -> bool:
        return bool(self.outbox or self.give_back)

    def _fail(self, err: _StreamEnded) -> None:
        """Fails every unanswered task: delivered if written (it may have run), undelivered if
        still in the outbox (safe to resend)."""
        if self.broken is None:
            self.broken = err
            if self.streams.conns.get(self.address) is self:
                del self.streams.conns[self.address]
            self.streams.endpoints.pop(self.address, None)  # asked again by the next connection
        unwritten = {spec.task_id for spec in self.outbox}
        if self.refused:
            unwritten.update(self.pending)
        self.outbox = []
        pending, self.pending = self.pending, {}
        for task_id, fut in pending.items():
            if not fut.done():
                fut.set_exception(_StreamEnded(self.address, delivered=task_id not in unwritten))

    def close(self) -> None:
        self._connecting.cancel()
        self._fail(_StreamEnded(self.address))
        if self.transport is not None:
            self.transport.close()


async def _endpoint(streams: TaskStreams, address: str) -> tuple[str, int, bytes] | None:
    """(host, port, secret) of address's direct listener, or None: use the gRPC stream. Asked
    once per worker (the answer is kept while connections to it work)."""
    if address in streams.endpoints:
        return streams.endpoints[address]
    host = address.rsplit(":", 1)[0].strip("[]")
    try:
        reply = await streams.core.worker_stub(address).DirectEndpoint(
            core_worker_pb2.DirectEndpointRequest(), timeout=10)
    except Exception as e:  # an older worker, or unreachable: the gRPC stream says which
        log.debug("DirectEndpoint of %s failed: %s", address, e)
        return None
    found = (host, reply.port, reply.secret) if reply.port else None
    streams.endpoints[address] = found
    return found


def _nodelay(transport: asyncio.Transport) -> None:
    sock = transport.get_extra_info("socket")
    try:
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except (OSError, AttributeError):  # asyncio and uvloop set it on TCP sockets already
        pass
