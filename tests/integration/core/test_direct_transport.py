"""The direct task transport (client wire.py) over real sockets, on a real local cluster.

A worker tells its port and secret only over its authenticated gRPC service (a driver, which
runs no tasks, offers none); a connection whose first frame is not that secret, or that later
sends a malformed frame, is closed with a log line while the worker keeps serving; a malformed
spec is refused naming its field as over TaskStream; a worker that dies with a task written to
it fails that task as delivered, and a task pushed afterwards as undelivered; a caller that
cannot reach the direct port falls back to the gRPC TaskStream, and one that holds a stale
secret gets its tasks back undelivered; streamed items are acknowledged, and a malformed one
closes the connection on the caller's side. Bounded: each socket read 30 s
at most, a few dozen frames per test.
"""
from __future__ import annotations

import asyncio
import socket
import struct
import time

import grpc
import pytest
from core_probe import Probe, probe_cluster

import ember
from ember_common import ids, rpc
from ember_common.proto import common_pb2, core_worker_pb2, core_worker_pb2_grpc

READ_TIMEOUT_S = 30


@pytest.fixture(scope="module")
def cluster():
    with probe_cluster() as c:
        yield c


def _core():
    from ember._private.worker import global_worker

    return global_worker().core


def _endpoint(address: str) -> core_worker_pb2.DirectEndpointReply:
    with rpc.sync_channel(address) as ch:
        return core_worker_pb2_grpc.CoreWorkerStub(ch).DirectEndpoint(
            core_worker_pb2.DirectEndpointRequest(), timeout=30)


def _harmless_spec() -> common_pb2.TaskSpec:
    """A well-formed task the worker runs and fails (its function does not exist)."""
    task_id = ids.new_task_id()
    return common_pb2.TaskSpec(task_id=task_id, name="harmless",
                               function=common_pb2.FunctionDescriptor(function_id="no-such-function"),
                               return_ids=[ids.object_id_for_return(task_id, 1)])


def _frame(kind: int, payload: bytes) -> bytes:
    from ember._private.transport.wire import encode

    return encode(kind, payload)


def _read_until_closed_or_frame(sock: socket.socket) -> list[tuple[int, bytes]] | None:
    """The frames read before the first complete one arrives (a list), or None when the worker
    closes the connection first."""
    from ember._private.transport.wire import FrameDecoder

    dec = FrameDecoder(1 << 30)
    sock.settimeout(READ_TIMEOUT_S)
    while True:
        data = sock.recv(65536)
        if not data:
            return None
        frames = dec.feed(data)
        if frames:
            return frames


def _connect(cluster) -> tuple[socket.socket, bytes]:
    ep = _endpoint(cluster.worker_address)
    return socket.create_connection(("127.0.0.1", ep.port), timeout=READ_TIMEOUT_S), ep.secret


def test_only_workers_offer_an_endpoint_over_their_authenticated_service(cluster):
    ep = _endpoint(cluster.worker_address)
    assert ep.port > 0 and len(ep.secret) == 32
    driver = _endpoint(f"127.0.0.1:{_core().port}")  # runs no tasks: none
    assert driver.port == 0 and driver.secret == b""
    with grpc.insecure_channel(cluster.worker_address) as ch:  # no token: refused
        with pytest.raises(grpc.RpcError) as err:
            core_worker_pb2_grpc.CoreWorkerStub(ch).DirectEndpoint(core_worker_pb2.DirectEndpointRequest(),
                                                                   timeout=30)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize("first", ["wrong", "missing", "short"])
def test_a_connection_without_the_secret_is_closed_and_the_worker_keeps_serving(cluster, first):
    from ember._private.transport.wire import BATCH, HELLO, REFUSED

    sock, secret = _connect(cluster)
    with sock:
        batch = core_worker_pb2.TaskBatch(specs=[_harmless_spec()]).SerializeToString()
        opening = {"wrong": _frame(HELLO, bytes(32)), "missing": _frame(BATCH, batch),
                   "short": _frame(HELLO, secret[:16])}[first]
        sock.sendall(opening + _frame(BATCH, batch))
        assert _read_until_closed_or_frame(sock) == [(REFUSED, b"wrong or missing secret")]
        assert _read_until_closed_or_frame(sock) is None  # then closed: the task never ran
    assert ember.get(cluster.probe.ping.remote(), timeout=60) == "pong"


def test_the_secret_opens_a_connection_that_runs_tasks_and_refuses_malformed_specs(cluster):
    from ember._private.transport.wire import BATCH, HELLO, REPLIES

    good = _harmless_spec()
    bad = _harmless_spec()
    bad.return_ids[0] = b"short"  # refused: an object id is 20 bytes
    sock, secret = _connect(cluster)
    with sock:
        sock.sendall(_frame(HELLO, secret) + _frame(BATCH, core_worker_pb2.TaskBatch(
            specs=[good, bad]).SerializeToString()))
        replies: dict[bytes, core_worker_pb2.PushTaskReply] = {}
        deadline = time.monotonic() + READ_TIMEOUT_S
        while len(replies) < 2 and time.monotonic() < deadline:
            frames = _read_until_closed_or_frame(sock)
            assert frames is not None, "the worker closed a connection that presented its secret"
            for kind, payload in frames:
                assert kind == REPLIES
                replies.update((r.task_id, r.reply) for r in
                               core_worker_pb2.TaskReplyBatch.FromString(payload).replies)
    assert replies[bad.task_id].refused and "direct task transport: " in replies[bad.task_id].error_message
    assert "spec.return_ids[0] must be 20 bytes" in replies[bad.task_id].error_message
    ran = replies[good.task_id]
    assert ran.is_application_error and ran.start_time_ns > 0 and not ran.refused  # it ran (and failed)


@pytest.mark.parametrize("garbage", ["type", "length", "payload", "hello-again"])
def test_a_malformed_frame_closes_that_connection_only(cluster, garbage):
    from ember._private.transport.wire import HELLO

    sock, secret = _connect(cluster)
    with sock:
        bad = {"type": _frame(99, b"abc"), "length": struct.pack(">IB", 0x7FFFFFFF, 2),
               "payload": _frame(2, b"\xff\xff\xff\xff"), "hello-again": _frame(HELLO, secret)}[garbage]
        sock.sendall(_frame(HELLO, secret) + bad)
        assert _read_until_closed_or_frame(sock) is None
    assert ember.get(cluster.probe.ping.remote(), timeout=60) == "pong"


def _on_loop(core, coro_fn):
    return core.run(coro_fn, timeout=60)


def test_a_worker_that_dies_with_a_task_written_fails_it_delivered_and_later_ones_undelivered(cluster):
    """A stand-in worker on the driver's loop takes the secret and one batch, then drops the
    connection without a reply (a crash mid-batch)."""
    from ember._private.transport.wire import BATCH, HELLO, FrameDecoder

    core = _core()
    secret = b"k" * 32
    got: list[int] = []

    class Dying(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport, self.dec = transport, FrameDecoder(1 << 20)

        def data_received(self, data):
            for kind, _ in self.dec.feed(data):
                got.append(kind)
                if kind == BATCH:
                    self.transport.abort()

    async def scenario():
        server = await asyncio.get_running_loop().create_server(Dying, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        address = f"127.0.0.1:{port}"
        try:
            errors = []
            for _ in range(2):
                # (a broken connection forgets the endpoint: the stand-in has no DirectEndpoint)
                core.task_streams.endpoints[address] = ("127.0.0.1", port, secret)
                try:
                    await asyncio.wait_for(core.task_streams.push(address, _harmless_spec()), 30)
                except grpc.aio.AioRpcError as e:
                    errors.append((e.code(), e.details()))
            return address, errors
        finally:
            server.close()
            core.task_streams.endpoints.pop(address, None)

    address, errors = _on_loop(core, scenario)
    assert got[:2] == [HELLO, BATCH]
    assert errors[0] == (grpc.StatusCode.UNAVAILABLE, f"task stream to {address} ended")  # may have run
    # The next push opens a new connection; the stand-in drops it too, again after the batch.
    assert errors[1] == (grpc.StatusCode.UNAVAILABLE, f"task stream to {address} ended")

    async def after_break():  # a push to a connection already broken never left this process
        from ember._private.transport.wire import DirectConn

        conn = DirectConn(core.task_streams, "127.0.0.1:1")
        conn.close()
        fut = asyncio.get_running_loop().create_future()
        conn.push(_harmless_spec(), fut)
        try:
            await fut
        except grpc.aio.AioRpcError as e:
            return e.details()

    assert _on_loop(core, after_break).startswith("failed to connect: ")


def test_an_unreachable_direct_port_falls_back_to_the_grpc_stream(cluster):
    from ember._private.transport.task_stream import _Conn
    from ember._private.transport.wire import DirectConn

    core = _core()
    probe = Probe.remote()
    port = ember.get(probe.core_port.remote(), timeout=60)
    address = next(a for a in core.task_streams.conns if a.endswith(f":{port}"))
    assert isinstance(core.task_streams.conns[address], DirectConn)

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]

    async def break_it():
        core.task_streams.conns.pop(address).close()
        core.task_streams.endpoints[address] = ("127.0.0.1", closed, b"x" * 32)

    _on_loop(core, break_it)
    assert ember.get([probe.ping.remote() for _ in range(20)], timeout=60) == ["pong"] * 20
    assert isinstance(core.task_streams.conns[address], _Conn)  # the gRPC stream took over
    assert address not in core.task_streams.endpoints  # asked again next time
    ember.kill(probe)


def test_a_killed_actor_worker_fails_calls_in_flight_and_restarts(cluster):
    """End to end: calls written to an actor whose process dies fail ActorDiedError (no task
    retries) or run again on the restarted actor (retries), as over the gRPC stream."""
    import os
    import signal

    @ember.remote(max_restarts=1, max_task_retries=0)
    class Victim:
        def pid(self) -> int:
            return os.getpid()

        def slow(self) -> str:
            time.sleep(30)
            return "late"

    v = Victim.remote()
    pid = ember.get(v.pid.remote(), timeout=60)
    ref = v.slow.remote()
    time.sleep(0.5)
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(ember.exceptions.RayActorError):
        ember.get(ref, timeout=60)
    assert ember.get(v.pid.remote(), timeout=60) != pid  # restarted, reached over a new connection
    ember.kill(v)


def test_a_stale_secret_fails_the_tasks_undelivered(cluster):
    """A caller whose remembered endpoint has the wrong secret (another process on that port)
    is refused before anything runs: its tasks fail as never delivered (safe to resend), and
    the next connection asks for the endpoint again."""
    core = _core()
    ep = _endpoint(cluster.worker_address)
    address = "localhost:" + cluster.worker_address.rsplit(":", 1)[1]  # a conn of its own

    async def scenario():
        core.task_streams.endpoints[address] = ("127.0.0.1", ep.port, b"s" * 32)
        try:
            await asyncio.wait_for(core.task_streams.push(address, _harmless_spec()), 30)
        except grpc.aio.AioRpcError as e:
            return e.details(), address in core.task_streams.endpoints

    details, remembered = _on_loop(core, scenario)
    assert details.startswith("failed to connect: "), details
    assert not remembered
    assert ember.get(cluster.probe.ping.remote(), timeout=60) == "pong"


def test_items_are_acknowledged_and_a_bad_item_closes_the_connection(cluster):
    """A stand-in worker sends the caller a well-formed item of a generator the caller does not
    hold (taken and dropped, then acknowledged), then an item whose task id is malformed: the
    caller closes that connection (its task fails as delivered) and keeps working."""
    from ember._private.transport.wire import BATCH, ITEM, ITEM_ACK, FrameDecoder, encode

    core = _core()
    secret = b"k" * 32
    acks: list[core_worker_pb2.ReportGeneratorItemRequest] = []
    stray = ids.new_task_id()
    item = core_worker_pb2.ReportGeneratorItemRequest(
        task_id=stray, index=0, item=common_pb2.ReturnObject(object_id=ids.object_id_for_return(stray, 1)))

    class Streaming(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport, self.dec = transport, FrameDecoder(1 << 20)

        def data_received(self, data):
            for kind, payload in self.dec.feed(data):
                if kind == BATCH:
                    self.transport.write(encode(ITEM, item.SerializeToString()))
                elif kind == ITEM_ACK:
                    acks.append(core_worker_pb2.ReportGeneratorItemRequest.FromString(payload))
                    bad = core_worker_pb2.ReportGeneratorItemRequest(task_id=b"short", index=1)
                    self.transport.write(encode(ITEM, bad.SerializeToString()))

    async def scenario():
        server = await asyncio.get_running_loop().create_server(Streaming, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        address = f"127.0.0.1:{port}"
        core.task_streams.endpoints[address] = ("127.0.0.1", port, secret)
        try:
            await asyncio.wait_for(core.task_streams.push(address, _harmless_spec()), 30)
        except grpc.aio.AioRpcError as e:
            return address, e.details()
        finally:
            server.close()

    address, details = _on_loop(core, scenario)
    assert [(a.task_id, a.index) for a in acks] == [(stray, 0)]
    assert details == f"task stream to {address} ended"
    assert ember.get(cluster.probe.ping.remote(), timeout=60) == "pong"


@pytest.mark.parametrize("answers", [False, True])
def test_keepalive_drops_a_silent_worker_and_keeps_an_answering_one(cluster, answers):
    """A stand-in worker takes a batch and then says nothing: with the keepalive at 0.5 s the
    caller pings after 0.5 s of silence and, with no answer within 0.5 s more, drops the
    connection (the task fails as delivered). One that answers the pings keeps its connection
    until it replies (a long task)."""
    from ember._private.transport import wire
    from ember._private.transport.wire import BATCH, PING, PONG, REPLIES, FrameDecoder, encode

    core = _core()
    pings: list[float] = []

    class Quiet(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport, self.dec = transport, FrameDecoder(1 << 20)

        def data_received(self, data):
            for kind, payload in self.dec.feed(data):
                if kind == BATCH:
                    self.task_id = core_worker_pb2.TaskBatch.FromString(payload).specs[0].task_id
                    if answers:  # replies after 2.5 s, answering pings meanwhile
                        asyncio.get_running_loop().call_later(2.5, self.reply)
                elif kind == PING:
                    pings.append(time.monotonic())
                    if answers:
                        self.transport.write(encode(PONG, b""))

        def reply(self):
            batch = core_worker_pb2.TaskReplyBatch(replies=[core_worker_pb2.TaskStreamReply(
                task_id=self.task_id, reply=core_worker_pb2.PushTaskReply(num_streamed=7))])
            self.transport.write(encode(REPLIES, batch.SerializeToString()))

    async def scenario():
        server = await asyncio.get_running_loop().create_server(Quiet, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        address = f"127.0.0.1:{port}"
        core.task_streams.endpoints[address] = ("127.0.0.1", port, b"k" * 32)
        wire.DirectConn.keepalive_s = 0.5
        t0 = time.monotonic()
        try:
            reply = await asyncio.wait_for(core.task_streams.push(address, _harmless_spec()), 30)
            return "reply", reply.num_streamed, time.monotonic() - t0
        except grpc.aio.AioRpcError as e:
            return "error", e.details(), time.monotonic() - t0
        finally:
            wire.DirectConn.keepalive_s = None
            server.close()

    what, detail, took = _on_loop(core, scenario)
    assert pings, "no ping was sent"
    if answers:
        assert (what, detail) == ("reply", 7) and took >= 2.4 and len(pings) >= 2
    else:
        assert what == "error" and detail.endswith("ended"), detail
        assert 0.9 <= took < 10, took
