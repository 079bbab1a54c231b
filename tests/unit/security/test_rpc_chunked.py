"""Control servers' limits on a real gRPC server on loopback (`rpc.build_server`, `chunked`): a
control server receives messages of at most EMBER_MAX_CONTROL_REQUEST_BYTES (gRPC refuses a
longer one from its length prefix; the servicer never sees it), while the methods that carry
data (rpc.LARGE_CONTROL_METHODS) take bigger requests, which the kit's channels (asyncio and
blocking) send as a chunked stream, up to EMBER_MAX_CONTROL_MESSAGE_BYTES, with their rules
still applied. A chunked stream for another method, one over the data limit, or one without
the token is refused; a data server (control=False) has no chunked method."""
from __future__ import annotations

import asyncio

import grpc
import pytest

from ember_common import auth, chunked, config, rpc
from ember_common.proto import gcs_pb2, gcs_pb2_grpc

MIB = 1 << 20


class _KV(gcs_pb2_grpc.InternalKVGcsServiceServicer):
    def __init__(self) -> None:
        self.seen: list[int] = []

    async def InternalKVPut(self, request, context):
        self.seen.append(len(request.value))
        return gcs_pb2.InternalKVPutReply(added=True)

    async def InternalKVDel(self, request, context):
        self.seen.append(len(request.key))
        return gcs_pb2.InternalKVDelReply(deleted_num=7)


@pytest.fixture
def settings(monkeypatch):
    def apply(**env: str) -> None:
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        monkeypatch.setattr(config, "_config", None)
        auth.reset()
    apply(EMBER_AUTH_MODE="disabled", EMBER_MAX_CONTROL_REQUEST_BYTES=str(MIB),
          EMBER_MAX_CONTROL_MESSAGE_BYTES=str(16 * MIB))
    yield apply
    monkeypatch.setattr(config, "_config", None)
    auth.reset()


async def _served(control: bool, calls):
    """Starts a KV server, runs calls(address) (a coroutine function), returns (seen, its result)."""
    kv = _KV()
    server, port, _ = rpc.build_server([lambda s: gcs_pb2_grpc.add_InternalKVGcsServiceServicer_to_server(kv, s)],
                                       host="127.0.0.1", control=control)
    await server.start()
    try:
        out = await calls(f"127.0.0.1:{port}")
    finally:
        await server.stop(None)
    return kv.seen, out


async def _outcome(call) -> list:
    try:
        reply = await call
        return ["OK", reply]
    except grpc.aio.AioRpcError as e:
        return [e.code(), e.details() or ""]


def _aio_calls(address_calls):
    async def run(address: str) -> list:
        async with rpc.aio_channel(address) as ch:
            stub = gcs_pb2_grpc.InternalKVGcsServiceStub(ch)
            return [await _outcome(c(stub)) for c in address_calls]
    return run


def test_a_control_server_refuses_a_message_over_its_limit_and_takes_big_data_in_chunks(settings):
    seen, out = asyncio.run(_served(True, _aio_calls([
        lambda s: s.InternalKVDel(gcs_pb2.InternalKVDelRequest(key=b"k" * (2 * MIB))),
        lambda s: s.InternalKVDel(gcs_pb2.InternalKVDelRequest(key=b"k" * 1000)),
        lambda s: s.InternalKVPut(gcs_pb2.InternalKVPutRequest(key=b"k", value=bytes(8 * MIB))),
        # a chunked request's rules still apply (the key), and a small one's, parsed off the loop
        lambda s: s.InternalKVPut(gcs_pb2.InternalKVPutRequest(key=b"k" * (2 * MIB), value=b"v")),
        lambda s: s.InternalKVDel(gcs_pb2.InternalKVDelRequest(key=b"k" * (300 << 10))),
        lambda s: s.InternalKVPut(gcs_pb2.InternalKVPutRequest(key=b"k", value=bytes(17 * MIB))),
    ])))
    assert out[0][0] == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in out[0][1], out[0]
    assert out[1] == ["OK", gcs_pb2.InternalKVDelReply(deleted_num=7)]
    assert out[2] == ["OK", gcs_pb2.InternalKVPutReply(added=True)]
    assert out[3][0] == grpc.StatusCode.INVALID_ARGUMENT and "key must have at most 16384 items" in out[3][1]
    assert out[4][0] == grpc.StatusCode.INVALID_ARGUMENT and "key must have at most 16384 items" in out[4][1]
    assert out[5][0] == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert f"over this method's limit of {16 * MIB} bytes (EMBER_MAX_CONTROL_MESSAGE_BYTES" in out[5][1]
    assert seen == [1000, 8 * MIB]  # the refused requests never reached the servicer


def test_a_blocking_channel_chunks_big_data_too(settings):
    async def run(address: str) -> list:
        def blocking() -> list:
            with rpc.sync_channel(address) as ch:
                put = gcs_pb2_grpc.InternalKVGcsServiceStub(ch).InternalKVPut
                reply = put(gcs_pb2.InternalKVPutRequest(key=b"k", value=bytes(5 * MIB)), timeout=30)
                reply2, call = put.with_call(gcs_pb2.InternalKVPutRequest(key=b"k", value=b"v"), timeout=30)
                return [reply, reply2, call.code()]
        return await asyncio.to_thread(blocking)
    seen, out = asyncio.run(_served(True, run))
    assert out == [gcs_pb2.InternalKVPutReply(added=True)] * 2 + [grpc.StatusCode.OK]
    assert seen == [5 * MIB, 1]


def _raw_stream(address: str, target: str, pieces: list[bytes], md=()) -> tuple[grpc.StatusCode, str]:
    with grpc.insecure_channel(address) as ch:
        try:
            ch.stream_unary(chunked.METHOD)(iter(pieces), timeout=30, metadata=(*md, (chunked.TARGET_KEY, target)))
            return grpc.StatusCode.OK, ""
        except grpc.RpcError as e:
            return e.code(), e.details() or ""


def test_a_chunked_stream_for_another_method_or_without_the_token_is_refused(settings):
    settings(EMBER_AUTH_MODE="token", EMBER_AUTH_TOKEN="t0ken-for-the-chunked-test")
    put = gcs_pb2.InternalKVPutRequest(key=b"k", value=b"v" * 100).SerializeToString()

    async def run(address: str) -> list:
        return [await asyncio.to_thread(_raw_stream, address, *args) for args in [
            ("/ember.InternalKVGcsService/InternalKVDel", [put], auth.client_metadata()),
            ("/ember.InternalKVGcsService/InternalKVPut", [put[:50], put[50:]], auth.client_metadata()),
            ("/ember.InternalKVGcsService/InternalKVPut", [put]),  # no token
            ("/ember.InternalKVGcsService/InternalKVPut", [b"\xff" * 10], auth.client_metadata()),
        ]]
    seen, out = asyncio.run(_served(True, run))
    assert out[0][0] == grpc.StatusCode.INVALID_ARGUMENT and "does not take a chunked request" in out[0][1]
    assert out[1] == (grpc.StatusCode.OK, "")
    assert out[2][0] == grpc.StatusCode.UNAUTHENTICATED
    assert out[3][0] == grpc.StatusCode.INVALID_ARGUMENT and "not a valid ember.InternalKVPutRequest" in out[3][1]
    assert seen == [100]


def test_a_data_server_has_no_chunked_method_and_the_big_limit(settings):
    async def run(address: str) -> list:
        stream = await asyncio.to_thread(_raw_stream, address, "/ember.InternalKVGcsService/InternalKVPut", [b""])
        return [stream, *await _aio_calls([
            lambda s: s.InternalKVDel(gcs_pb2.InternalKVDelRequest(key=b"k" * (2 * MIB)))])(address)]
    seen, out = asyncio.run(_served(False, run))
    assert out[0][0] == grpc.StatusCode.UNIMPLEMENTED
    assert out[1][0] == grpc.StatusCode.INVALID_ARGUMENT and "key" in out[1][1]  # received and parsed
    assert seen == []


def test_the_limits_and_the_chunk_size(settings):
    assert rpc.receive_limit(control=True) == MIB and rpc.data_limit() == 16 * MIB
    assert chunked.chunk_bytes(MIB) == MIB and chunked.chunk_bytes(64 * MIB) == chunked.CHUNK_BYTES
    assert [len(p) for p in chunked.pieces(bytes(5), 2)] == [2, 2, 1]
    settings(EMBER_MAX_CONTROL_REQUEST_BYTES="0")
    with pytest.raises(ValueError, match="EMBER_MAX_CONTROL_REQUEST_BYTES must be > 0"):
        rpc.server_options(control=True)


def test_every_large_method_exists_and_is_unary():
    from ember_common.proto import gcs_task_pb2, raylet_pb2

    methods = {f"/{s.full_name}/{m.name}": m for mod in (gcs_pb2, gcs_task_pb2, raylet_pb2)
               for s in mod.DESCRIPTOR.services_by_name.values() for m in s.methods}
    assert rpc.LARGE_CONTROL_METHODS <= methods.keys(), rpc.LARGE_CONTROL_METHODS - methods.keys()
    assert not any(methods[m].client_streaming or methods[m].server_streaming for m in rpc.LARGE_CONTROL_METHODS)
