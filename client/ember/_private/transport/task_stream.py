"""Task pushes over one long-lived bidirectional gRPC stream per (caller, worker) pair.

A unary call per task costs a new HTTP/2 stream, metadata and a few thread hops on both sides;
a message on an open stream costs much less (the stream and its metadata are set up once,
not per task), and under load each message carries every task (or reply) queued since the
previous one, so the per-message cost is shared. `TaskStreams.push(address, spec)` returns the
worker's PushTaskReply, or raises the stream's AioRpcError if the stream broke before the reply
came (the worker died): callers handle that exactly like a failed unary PushTask. `push_cb`
hands the reply (or the error) to a callback straight from the stream's reader instead, one
loop iteration sooner than a future's done-callback (the actor-call path, actor_submitter.py);
on the worker, a reply goes into the outgoing stream as soon as the executor sets it. Loop
thread only.
"""
from __future__ import annotations

import asyncio
import collections
import logging
from typing import TYPE_CHECKING, AsyncIterator, Awaitable, Callable, Iterable, Protocol, Union

import grpc

from ember import exceptions as exc
from ember_common import ids, rpc
from ember_common.proto import common_pb2, core_worker_pb2
from ember_common.validate_rules import task_spec_problem

from ..objects.serialization import serialize_error

if TYPE_CHECKING:
    from ember_common.config import Config
    from ember_common.proto import core_worker_pb2_grpc

    from ..execution.executor import TaskExecutor

log = logging.getLogger(__name__)
Reply = core_worker_pb2.PushTaskReply
PushFuture = asyncio.Future[Reply]  # the caller side of one push (push_nowait)
# Called once with (reply, None) or (None, the stream's error).
ReplyCallback = Callable[[Union[Reply, None], Union[BaseException, None]], None]


class _Outcome(Protocol):
    """What a pushed task waits on: an asyncio future or a _Callback."""

    def done(self) -> bool: ...

    def set_result(self, result: Reply, /) -> None: ...

    def set_exception(self, exception: BaseException, /) -> None: ...


class _Callback:
    """A reply sink that calls its function at once (once); an error it raises is logged, so
    the stream's reader keeps reading."""

    __slots__ = ("fn",)

    def __init__(self, fn: ReplyCallback) -> None:
        self.fn: ReplyCallback | None = fn

    def done(self) -> bool:
        return self.fn is None

    def set_result(self, result: Reply, /) -> None:
        self._call(result, None)

    def set_exception(self, exception: BaseException, /) -> None:
        self._call(None, exception)

    def _call(self, reply: Reply | None, err: BaseException | None) -> None:
        fn = self.fn
        if fn is None:
            return
        self.fn = None  # what it holds (the call, the actor handle it keeps alive) goes now
        try:
            fn(reply, err)
        except Exception:  # a bug in the callback must not stop the stream
            log.exception("task reply callback failed")


class _Conn:
    def __init__(self, streams: TaskStreams, address: str) -> None:
        self.streams = streams
        self.address = address
        self.call = streams.core.worker_stub(address).TaskStream()
        self.pending: dict[bytes, _Outcome] = {}
        self.outbox: collections.deque[common_pb2.TaskSpec] = collections.deque()
        self.wake = asyncio.Event()
        self.broken: grpc.aio.AioRpcError | None = None
        self.unwritten: set[bytes] = set()  # queued tasks not yet handed to gRPC
        self.give_back = False  # ask the worker for its unstarted tasks in the next message
        self._writer = asyncio.ensure_future(self._write_loop())
        self._reader = asyncio.ensure_future(self._read_loop())

    def push(self, spec: common_pb2.TaskSpec, fut: _Outcome) -> None:
        if self.broken is not None:  # failed on the next iteration, never inside the caller
            asyncio.get_running_loop().call_soon(
                fut.set_exception, _StreamEnded(self.address, delivered=False))
            return
        self.pending[spec.task_id] = fut
        self.unwritten.add(spec.task_id)
        self.outbox.append(spec)
        self.wake.set()

    def request_give_back(self) -> None:
        self.give_back = True
        self.wake.set()

    async def _write_loop(self) -> None:
        try:
            while True:
                await self.wake.wait()
                self.wake.clear()
                while self.outbox or self.give_back:
                    batch = core_worker_pb2.TaskBatch(specs=self.outbox, give_back=self.give_back)
                    self.give_back = False
                    written = [spec.task_id for spec in self.outbox]
                    self.outbox.clear()
                    await self.call.write(batch)
                    self.unwritten.difference_update(written)
        except grpc.aio.AioRpcError as e:
            self._fail(e)
        except asyncio.InvalidStateError:  # the RPC had already ended (the worker died)
            self._fail(_StreamEnded(self.address))
        except asyncio.CancelledError:
            pass

    async def _read_loop(self) -> None:
        try:
            async for batch in self.call:
                for msg in batch.replies:
                    fut = self.pending.pop(msg.task_id, None)
                    if fut is not None and not fut.done():
                        fut.set_result(msg.reply)
            self._fail(_StreamEnded(self.address))
        except grpc.aio.AioRpcError as e:
            self._fail(e)
        except asyncio.CancelledError:
            pass

    def _fail(self, err: grpc.aio.AioRpcError) -> None:
        """Fails every unanswered task: with err if it went out (it may have run), with a
        never-delivered error if it was still queued here (safe to resend).

        Each task gets an error of its own, a copy of err without its traceback: err's
        traceback holds the reader's frame, and so this connection, and every waiter that
        raises an error adds its own frame to it (a task's entry, with its argument refs).
        One shared err kept here would tie the tasks' arguments to a reference cycle that only
        the cyclic GC breaks, so the owner's Free of an argument would wait for a collection
        that may not come for a long while (tests/integration/core/test_free_after_crash.py)."""
        if self.broken is None:
            self.broken = _copy(err)
            if self.streams.conns.get(self.address) is self:
                del self.streams.conns[self.address]
            self._writer.cancel()
            self.call.cancel()
        pending, self.pending = self.pending, {}
        for task_id, fut in pending.items():
            if not fut.done():
                fut.set_exception(_StreamEnded(self.address, delivered=False)
                                  if task_id in self.unwritten else _copy(err))
        self.unwritten.clear()

    def close(self) -> None:
        self._fail(_StreamEnded(self.address))
        self._reader.cancel()


def _copy(err: grpc.aio.AioRpcError) -> grpc.aio.AioRpcError:
    """A fresh error with err's status, details and metadata (no traceback, no context)."""
    return grpc.aio.AioRpcError(err.code(), err.initial_metadata(), err.trailing_metadata(),
                                err.details(), err.debug_error_string())


class _StreamEnded(grpc.aio.AioRpcError):
    """The stream to a worker ended with tasks outstanding. delivered=False: the task never
    left this process (its details say "failed to connect", which callers treat as not run)."""

    def __init__(self, address: str, delivered: bool = True) -> None:
        details = (f"task stream to {address} ended" if delivered else
                   f"failed to connect: the task stream to {address} ended before the task was sent")
        super().__init__(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(),
                         details=details)


class _AnyConn(Protocol):
    """A connection to one worker: `_Conn` (gRPC) or wire.py's `DirectConn`."""

    @property
    def broken(self) -> BaseException | None: ...

    def push(self, spec: common_pb2.TaskSpec, fut: _Outcome) -> None: ...

    def request_give_back(self) -> None: ...

    def close(self) -> None: ...


class StreamsCore(Protocol):
    """What the caller's connections (these and wire.py's) need of the core worker (CoreWorker,
    in core_worker.py)."""

    config: Config

    def worker_stub(self, address: str) -> core_worker_pb2_grpc.CoreWorkerAsyncStub: ...

    def take_generator_item_nowait(self, task_id: bytes, index: int, item: common_pb2.ReturnObject,
                                   nested: Iterable[core_worker_pb2.NestedRefs]) -> Awaitable[None] | None: ...


class TaskStreams:
    """The caller's connections to workers, one per worker address. direct(streams, address)
    makes a direct-transport connection (wire.py; None: gRPC streams only)."""

    def __init__(self, core: StreamsCore,
                 direct: Callable[[TaskStreams, str], _AnyConn] | None = None) -> None:
        self.core = core
        self.direct = direct
        self.conns: dict[str, _AnyConn] = {}
        # Each worker's direct endpoint (host, port, secret), or None: it has none (wire.py).
        self.endpoints: dict[str, tuple[str, int, bytes] | None] = {}

    async def push(self, address: str, spec: common_pb2.TaskSpec) -> core_worker_pb2.PushTaskReply:
        return await self.push_nowait(address, spec)

    def give_back(self, address: str) -> None:
        """Asks the worker at address for the tasks it holds but has not started (each comes
        back as a reply with returned_unstarted); nothing to do without a stream to it."""
        conn = self.conns.get(address)
        if conn is not None and conn.broken is None:
            conn.request_give_back()

    def push_nowait(self, address: str, spec: common_pb2.TaskSpec) -> PushFuture:
        """A future for the reply (no coroutine per task)."""
        fut: PushFuture = asyncio.get_running_loop().create_future()
        self._conn(address).push(spec, fut)
        return fut

    def push_cb(self, address: str, spec: common_pb2.TaskSpec, cb: ReplyCallback) -> None:
        """Pushes spec; cb(reply, None) or cb(None, error) is called once, from the stream's
        reader as the reply arrives (never from inside this call)."""
        self._conn(address).push(spec, _Callback(cb))

    def _conn(self, address: str) -> _AnyConn:
        conn = self.conns.get(address)
        if conn is None:
            if self.direct is not None and self.endpoints.get(address, ()) is not None:
                conn = self.conns[address] = self.direct(self, address)
            else:
                conn = self.conns[address] = _Conn(self, address)
        return conn

    def grpc_conn(self, address: str) -> _AnyConn:
        """A gRPC stream to address, which takes its pushes from now on (the direct
        transport's fallback)."""
        conn = self.conns[address] = _Conn(self, address)
        return conn

    def close(self) -> None:
        for conn in list(self.conns.values()):
            conn.close()
        self.conns.clear()


async def serve_stream(executor: TaskExecutor, request_iterator: AsyncIterator[core_worker_pb2.TaskBatch],
                       context: rpc.Context) -> AsyncIterator[core_worker_pb2.TaskReplyBatch]:
    """Worker side of TaskStream: runs each task as PushTask would, replies as they finish.

    Each spec is checked with PushTask's rules first (`validate_rules.task_spec_problem`): a
    malformed one is answered at once with an error naming the field (`refused_reply`) and the
    rest of its batch runs. A message that is not a TaskBatch at all (the kit's stream check
    raises it out of request_iterator) ends the stream with that error once the tasks already
    taken have been answered."""
    out: asyncio.Queue[core_worker_pb2.TaskStreamReply | None] = asyncio.Queue()
    state = {"inflight": 0, "reading": True}
    failed: list[Exception] = []

    def done(task_id: bytes, reply: Reply) -> None:
        state["inflight"] -= 1
        out.put_nowait(core_worker_pb2.TaskStreamReply(task_id=task_id, reply=reply))

    async def read() -> None:
        try:
            async for batch in request_iterator:
                for spec in batch.specs:
                    state["inflight"] += 1
                    problem = task_spec_problem(spec)
                    if problem is None:
                        executor.submit(spec, _StreamReply(spec.task_id, done))
                    else:
                        done(spec.task_id, refused_reply(spec, f"/ember.CoreWorker/TaskStream: {problem}"))
                if batch.give_back:
                    executor.give_back()
        except Exception as e:  # raised by the stream itself: answered after the tasks in flight
            failed.append(e)
        finally:
            state["reading"] = False
            out.put_nowait(None)

    reader = asyncio.ensure_future(read())
    try:
        while state["reading"] or state["inflight"]:
            msg = await out.get()
            replies = [] if msg is None else [msg]
            while not out.empty():  # everything ready now goes in one message
                more = out.get_nowait()
                if more is not None:
                    replies.append(more)
            if replies:
                yield core_worker_pb2.TaskReplyBatch(replies=replies)
    finally:
        reader.cancel()
    if failed:
        raise failed[0]


def refused_reply(spec: common_pb2.TaskSpec, text: str) -> core_worker_pb2.PushTaskReply:
    """The reply of a task whose spec is malformed (text names the field): it did not run, and
    each of its returns (a generator: its first item) raises RaySystemError with the text.
    `refused` tells the owner not to retry it (`retry_exceptions` is for the user's errors)."""
    error = exc.RaySystemError(f"INVALID_ARGUMENT: {text}")
    reply = core_worker_pb2.PushTaskReply(is_application_error=True, error_message=text, refused=True)
    sv = serialize_error(error)
    if spec.streaming:
        reply.num_streamed = 1
        reply.returns.append(common_pb2.ReturnObject(
            object_id=ids.object_id_for_return(spec.task_id, 1), value=sv.to_proto(), size=sv.size))
    else:
        reply.returns.extend(common_pb2.ReturnObject(object_id=oid, value=sv.to_proto(), size=sv.size)
                             for oid in spec.return_ids)
    return reply


class _StreamReply:
    """The worker side's reply sink for one task of a stream: the reply goes into the outgoing
    queue as soon as it is set (once)."""

    __slots__ = ("task_id", "emit", "_done")

    def __init__(self, task_id: bytes, emit: Callable[[bytes, Reply], None]) -> None:
        self.task_id = task_id
        self.emit = emit
        self._done = False

    def done(self) -> bool:
        return self._done

    def set_result(self, result: Reply, /) -> None:
        if not self._done:
            self._done = True
            self.emit(self.task_id, result)
