"""The worker's side of the direct transport (client wire_server.py) on a real socket pair and
a real event loop: replies written by the threads that ran their tasks (send_now) and frames
the loop writes come out whole, each once, whatever the interleaving; a thread's write that
fills the socket leaves its tail to the loop, ahead of everything written later; a connection
that ended takes no more writes. Reads go into the loop's shared buffer, overwritten on each
read. Bounded: a few thousand small frames, each wait 30 s at most."""
from __future__ import annotations

import asyncio
import socket
import threading
import time
from types import SimpleNamespace
from typing import Any, Iterator

import pytest

from ember._private.transport import wire_server
from ember._private.transport.wire import HELLO, ITEM, REPLIES, FrameDecoder, encode
from ember_common.proto import core_worker_pb2

WAIT_S = 30
MAX = 64 << 20


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    t = threading.Thread(target=lp.run_forever, daemon=True)
    t.start()
    yield lp
    lp.call_soon_threadsafe(lp.stop)
    t.join(WAIT_S)
    lp.close()


def _on(loop: asyncio.AbstractEventLoop, fn: Any, *args: Any) -> Any:
    async def call() -> Any:
        return fn(*args)
    return asyncio.run_coroutine_threadsafe(call(), loop).result(WAIT_S)


@pytest.fixture
def connect(loop: asyncio.AbstractEventLoop) -> Iterator[Any]:
    """connect() -> (the worker side's connection, the caller's socket); both closed after."""
    made: list[tuple[Any, socket.socket]] = []

    def make() -> tuple[Any, socket.socket]:
        conn, peer = _connect(loop)
        made.append((conn, peer))
        return conn, peer
    yield make
    for conn, peer in made:
        peer.close()
        if conn.transport is not None:
            _on(loop, conn.transport.close)
    deadline = time.monotonic() + WAIT_S
    while any(conn.transport is not None for conn, _ in made):
        assert time.monotonic() < deadline
        time.sleep(0.01)


def _connect(loop: asyncio.AbstractEventLoop) -> tuple[Any, socket.socket]:
    core = SimpleNamespace(loop=loop, config=SimpleNamespace(max_message_bytes=MAX), executor=None)
    server = wire_server.DirectServer(core)  # type: ignore[arg-type]
    ours, peer = socket.socketpair()
    conn = _on(loop, wire_server._ServerConn, server)

    async def accept() -> None:
        await loop.connect_accepted_socket(lambda: conn, ours)
    asyncio.run_coroutine_threadsafe(accept(), loop).result(WAIT_S)
    peer.sendall(encode(HELLO, server.secret))
    deadline = time.monotonic() + WAIT_S
    while not conn.authed:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return conn, peer


def _read_frames(peer: socket.socket, count: int) -> list[tuple[int, bytes]]:
    dec, frames = FrameDecoder(MAX), []
    peer.settimeout(WAIT_S)
    while len(frames) < count:
        data = peer.recv(1 << 16)
        assert data, f"connection closed after {len(frames)} of {count} frames"
        frames.extend(dec.feed(data))
    return frames


def _reply_ids(frames: list[tuple[int, bytes]]) -> list[bytes]:
    return [r.task_id for kind, p in frames if kind == REPLIES
            for r in core_worker_pb2.TaskReplyBatch.FromString(p).replies]


def _sink(conn: Any, i: int) -> Any:
    return wire_server._DirectReply(b"%015d" % i + b"t", conn)


def test_thread_replies_and_loop_frames_come_out_whole_and_once(loop, connect):
    conn, peer = connect()
    n_threads, per = 4, 200
    sent_by_thread = [0]
    lock = threading.Lock()

    def run(k: int) -> None:
        for i in range(per):
            sink = _sink(conn, k * per + i)
            if sink.send_now(core_worker_pb2.PushTaskReply()):
                with lock:
                    sent_by_thread[0] += 1
            else:  # something was queued before it: the loop sends it
                loop.call_soon_threadsafe(sink.set_result, core_worker_pb2.PushTaskReply())

    def items() -> None:  # the loop writes frames of its own meanwhile
        for j in range(100):
            _on(loop, conn.report, core_worker_pb2.ReportGeneratorItemRequest(task_id=b"g" * 16, index=j), False)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(n_threads)] + [threading.Thread(target=items)]
    for t in threads:
        t.start()
    # Replies may share a frame when the loop sends them: read until all are in.
    got: list[bytes] = []
    item_count = 0
    dec = FrameDecoder(MAX)
    peer.settimeout(WAIT_S)
    while len(got) < n_threads * per or item_count < 100:
        data = peer.recv(1 << 16)
        assert data
        for kind, payload in dec.feed(data):
            if kind == ITEM:
                item_count += 1
            else:
                got.extend(_reply_ids([(kind, payload)]))
    for t in threads:
        t.join(WAIT_S)
    assert sorted(got) == sorted(b"%015d" % i + b"t" for i in range(n_threads * per))
    assert sent_by_thread[0] > 0  # most go out from the threads themselves


def test_a_write_that_fills_the_socket_leaves_its_tail_ahead_of_later_frames(loop, connect):
    conn, peer = connect()
    big = core_worker_pb2.PushTaskReply(error_message="x" * (8 << 20))  # more than the socket takes
    assert _sink(conn, 1).send_now(big)
    assert conn._tail is not None or conn._backlog  # the rest waits for the loop
    # Later replies queue behind it: the threads hand them to the loop.
    late = _sink(conn, 2)
    assert not late.send_now(core_worker_pb2.PushTaskReply())
    loop.call_soon_threadsafe(late.set_result, core_worker_pb2.PushTaskReply())
    frames = _read_frames(peer, 2)
    assert _reply_ids(frames) == [b"%015d" % 1 + b"t", b"%015d" % 2 + b"t"]
    first = core_worker_pb2.TaskReplyBatch.FromString(frames[0][1]).replies[0].reply
    assert first.error_message == big.error_message
    deadline = time.monotonic() + WAIT_S
    while conn._backlog or conn._tail is not None:  # drained: threads write directly again
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert _sink(conn, 3).send_now(core_worker_pb2.PushTaskReply())
    assert _reply_ids(_read_frames(peer, 1)) == [b"%015d" % 3 + b"t"]


def test_a_reply_is_sent_once_and_not_after_the_connection_ended(loop, connect):
    conn, peer = connect()
    sink = _sink(conn, 7)
    assert sink.send_now(core_worker_pb2.PushTaskReply())
    assert sink.done()
    assert sink.send_now(core_worker_pb2.PushTaskReply())  # already sent: nothing more
    _on(loop, sink.set_result, core_worker_pb2.PushTaskReply())
    assert _reply_ids(_read_frames(peer, 1)) == [b"%015d" % 7 + b"t"]
    peer.close()
    deadline = time.monotonic() + WAIT_S
    while conn.transport is not None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert _sink(conn, 8).send_now(core_worker_pb2.PushTaskReply())  # dropped, as over a broken stream
    assert conn._fd == -1


def test_frames_read_through_a_reused_buffer_come_out_whole():
    frames = [(REPLIES, bytes([i]) * (i * 997 % 5000)) for i in range(60)]
    stream = b"".join(encode(k, p) for k, p in frames)
    buf = memoryview(bytearray(4096))
    dec, out, pos = FrameDecoder(MAX), [], 0
    while pos < len(stream):
        n = min(len(buf), len(stream) - pos, 1 + pos % 1500)
        buf[:n] = stream[pos:pos + n]
        out.extend(dec.feed(buf[:n]))
        buf[:] = b"\xff" * len(buf)  # the next read overwrites it
        pos += n
    assert out == frames
