"""The worker's side of the direct task transport (wire.py has the frames, the caller's side
and the why): a listener on the core loop with a random secret, and per caller connection a
protocol that checks the secret, runs each batch's tasks as TaskStream would, sends replies
and streamed generator items back, and closes on a malformed frame. Loop thread only."""
from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
from typing import TYPE_CHECKING, Any, Protocol, cast

from google.protobuf.message import DecodeError

from ember_common.proto import core_worker_pb2
from ember_common.validate_rules import task_spec_problem

from .task_stream import Reply, _StreamReply, refused_reply
from .wire import (
    BATCH,
    HELLO,
    HELLO_TIMEOUT_S,
    ITEM,
    ITEM_ACK,
    ITEM_ACK_TIMEOUT_S,
    PING,
    PONG,
    REFUSED,
    REPLIES,
    CallerConnectionLost,
    FrameDecoder,
    FrameError,
    _Coalescer,
    _nodelay,
    encode,
)

if TYPE_CHECKING:
    from ember_common.config import Config

    from ..execution.executor import TaskExecutor

log = logging.getLogger(__name__)


class ServerCore(Protocol):
    """What the listener needs of the core worker (CoreWorker, in core_worker.py)."""

    loop: asyncio.AbstractEventLoop
    config: Config
    executor: TaskExecutor | None


class DirectServer:
    """The worker's listener: a random secret and a TCP server on the core loop."""

    def __init__(self, core: ServerCore) -> None:
        self.core = core
        self.secret = secrets.token_bytes(32)
        self.port = 0
        self._server: asyncio.AbstractServer | None = None
        # Streaming tasks that came over a direct connection: their items go back on it.
        self.routes: dict[bytes, _ServerConn] = {}

    async def start(self, host: str) -> int:
        """Listens on an ephemeral port of host; returns it."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _ServerConn(self), host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    def close(self) -> None:
        """Stops listening (connections already open end with the process)."""
        if self._server is not None:
            self._server.close()


class _ServerConn(asyncio.Protocol, _Coalescer):
    """Worker side of one caller's connection: runs each task as TaskStream would."""

    def __init__(self, server: DirectServer) -> None:
        self.server = server
        self.loop = server.core.loop
        self.transport: asyncio.Transport | None = None
        # Before the secret, a frame may be no longer than the secret (wire.py's Auth).
        self.decoder = FrameDecoder(server.core.config.max_message_bytes, len(server.secret))
        self.authed = False
        self.out: list[core_worker_pb2.TaskStreamReply] = []
        self.peer: Any = None
        self._hello_timer: asyncio.TimerHandle | None = None
        self.streaming: set[bytes] = set()  # this connection's entries in server.routes
        self.acks: dict[tuple[bytes, int], tuple[asyncio.Future[None], asyncio.TimerHandle]] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        self.peer = transport.get_extra_info("peername")
        _nodelay(self.transport)
        self._hello_timer = self.loop.call_later(HELLO_TIMEOUT_S, self._drop, "no secret presented in time")

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None  # replies of tasks still running are dropped, as a broken stream's
        if self._hello_timer is not None:
            self._hello_timer.cancel()
        for task_id in self.streaming:
            self.server.routes.pop(task_id, None)
        self.streaming.clear()
        acks, self.acks = self.acks, {}
        for fut, timer in acks.values():
            timer.cancel()
            if not fut.done():
                fut.set_exception(CallerConnectionLost(f"the caller's connection from {self.peer} ended"))

    def _drop(self, why: str) -> None:
        log.warning("direct task connection from %s closed: %s", self.peer, why)
        if self.transport is not None:
            self.transport.close()
            self.transport = None

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.decoder.feed(data)
        except FrameError as e:
            if self.decoder.capping_first and self.transport is not None:  # e.g. longer than the secret
                self.transport.write(encode(REFUSED, b"wrong or missing secret"))
            return self._drop(f"malformed frame: {e}")
        for kind, payload in frames:
            if self.transport is None:
                return
            if not self.authed:
                if kind != HELLO or not hmac.compare_digest(payload, self.server.secret):
                    assert self.transport is not None
                    self.transport.write(encode(REFUSED, b"wrong or missing secret"))
                    return self._drop("wrong or missing secret")
                self.authed = True
                if self._hello_timer is not None:
                    self._hello_timer.cancel()
                continue
            if kind == PING:
                self.transport.write(encode(PONG, b""))
                continue
            if kind == ITEM_ACK:
                self._acked(payload)
                continue
            if kind != BATCH:
                return self._drop(f"malformed frame: type {kind} where a task batch was expected")
            try:
                batch = core_worker_pb2.TaskBatch.FromString(payload)
            except DecodeError as e:
                return self._drop(f"malformed frame: not a TaskBatch ({e})")
            self._run(batch)

    def _run(self, batch: core_worker_pb2.TaskBatch) -> None:
        executor = self.server.core.executor
        for spec in batch.specs:
            problem = task_spec_problem(spec) if executor is not None else "this process executes no tasks"
            if problem is None:
                if spec.streaming:
                    self.server.routes[spec.task_id] = self
                    self.streaming.add(spec.task_id)
                executor.submit(spec, _StreamReply(spec.task_id, self.emit))  # type: ignore[union-attr]
            else:
                self.emit(spec.task_id, refused_reply(spec, f"direct task transport: {problem}"))
        if batch.give_back and executor is not None:
            executor.give_back()

    def emit(self, task_id: bytes, reply: Reply) -> None:
        if self.streaming and task_id in self.streaming:
            self.streaming.discard(task_id)
            self.server.routes.pop(task_id, None)
        if self.transport is None:
            return
        self.out.append(core_worker_pb2.TaskStreamReply(task_id=task_id, reply=reply))
        self._kick()

    def _flush(self) -> None:
        if self.out and self.transport is not None:
            msg = core_worker_pb2.TaskReplyBatch(replies=self.out)
            self.out = []
            self.transport.write(encode(REPLIES, msg.SerializeToString()))

    def _has_more(self) -> bool:
        return bool(self.out)

    def report(self, request: core_worker_pb2.ReportGeneratorItemRequest,
               wait: bool = True) -> asyncio.Future[None] | None:
        """Sends a streamed item to the caller at once (before its task's reply); with wait, a
        future that is done when the caller took it (CallerConnectionLost if it cannot)."""
        fut: asyncio.Future[None] | None = self.loop.create_future() if wait else None
        if self.transport is None:
            if fut is not None:
                fut.set_exception(CallerConnectionLost(f"the caller's connection from {self.peer} ended"))
            return fut
        if fut is not None:
            key = (request.task_id, request.index)
            self.acks[key] = (fut, self.loop.call_later(ITEM_ACK_TIMEOUT_S, self._ack_late, key))
        self.transport.write(encode(ITEM, request.SerializeToString()))
        return fut

    def _acked(self, payload: bytes) -> None:
        try:
            msg = core_worker_pb2.ReportGeneratorItemRequest.FromString(payload)
        except DecodeError as e:
            return self._drop(f"malformed frame: not an item acknowledgement ({e})")
        entry = self.acks.pop((msg.task_id, msg.index), None)
        if entry is not None:
            entry[1].cancel()
            if not entry[0].done():
                entry[0].set_result(None)

    def _ack_late(self, key: tuple[bytes, int]) -> None:
        entry = self.acks.pop(key, None)
        if entry is not None and not entry[0].done():
            entry[0].set_exception(CallerConnectionLost(
                f"the caller at {self.peer} did not take item {key[1]} within {ITEM_ACK_TIMEOUT_S:.0f}s"))
