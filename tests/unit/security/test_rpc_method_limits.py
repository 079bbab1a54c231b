"""Per-method request limits on a control server (rpc.method_limits), on a real gRPC server on
loopback: a request to an ordinary control method over EMBER_MAX_CONTROL_REQUEST_BYTES is
RESOURCE_EXHAUSTED naming the method and the limit and never reaches the servicer, one of the
methods that carry data (rpc.LARGE_CONTROL_METHODS) takes up to the server's limit, and a data
server (control=False) has no per-method limit (the request is parsed and its rules apply). A
request of OFF_LOOP_BYTES or more, parsed on a worker thread, is checked against its rules too."""
from __future__ import annotations

import asyncio

import grpc
import pytest

from ember_common import auth, config, rpc
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
        return gcs_pb2.InternalKVDelReply(deleted_num=0)


@pytest.fixture
def settings(monkeypatch):
    monkeypatch.setenv("EMBER_AUTH_MODE", "disabled")
    monkeypatch.setenv("EMBER_MAX_CONTROL_REQUEST_BYTES", str(MIB))
    monkeypatch.setattr(config, "_config", None)
    auth.reset()
    yield
    monkeypatch.setattr(config, "_config", None)
    auth.reset()


async def _calls(control: bool) -> tuple[list[int], list[grpc.StatusCode | str]]:
    kv = _KV()
    server, port, _ = rpc.build_server([lambda s: gcs_pb2_grpc.add_InternalKVGcsServiceServicer_to_server(kv, s)],
                                       host="127.0.0.1", control=control)
    await server.start()
    out: list[grpc.StatusCode | str] = []
    try:
        async with rpc.aio_channel(f"127.0.0.1:{port}") as ch:
            stub = gcs_pb2_grpc.InternalKVGcsServiceStub(ch)
            for call in (lambda: stub.InternalKVDel(gcs_pb2.InternalKVDelRequest(key=b"k" * (2 * MIB))),
                         lambda: stub.InternalKVDel(gcs_pb2.InternalKVDelRequest(key=b"k" * 1000)),
                         lambda: stub.InternalKVPut(gcs_pb2.InternalKVPutRequest(key=b"k", value=bytes(8 * MIB))),
                         # parsed and checked on a worker thread (OFF_LOOP_BYTES), its rules still apply
                         lambda: stub.InternalKVDel(gcs_pb2.InternalKVDelRequest(key=b"k" * (300 << 10)))):
                try:
                    await call()
                    out.append("OK")
                except grpc.aio.AioRpcError as e:
                    out += [e.code(), e.details() or ""]
    finally:
        await server.stop(None)
    return kv.seen, out


def test_an_ordinary_control_method_refuses_a_request_over_its_limit_unparsed(settings):
    seen, out = asyncio.run(_calls(control=True))
    assert out[0] == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert out[1].startswith("/ember.InternalKVGcsService/InternalKVDel: the request is ")
    assert f"over this method's limit of {MIB} bytes (EMBER_MAX_CONTROL_REQUEST_BYTES" in out[1]
    assert out[2:4] == ["OK", "OK"]  # a small Del, and an 8 MiB Put (a method that carries data)
    assert out[4] == grpc.StatusCode.INVALID_ARGUMENT and "key must have at most 16384 items" in out[5]
    assert seen == [1000, 8 * MIB]  # the refused requests never reached the servicer


def test_a_data_server_has_no_per_method_limit(settings):
    seen, out = asyncio.run(_calls(control=False))
    assert out[0] == grpc.StatusCode.INVALID_ARGUMENT and "key" in out[1]  # parsed: the field's rule
    assert out[2:4] == ["OK", "OK"] and out[4] == grpc.StatusCode.INVALID_ARGUMENT and seen == [1000, 8 * MIB]


def test_the_method_limit_never_exceeds_the_servers(settings, monkeypatch):
    limit_of = rpc.method_limits()
    assert limit_of("/ember.Raylet/ReturnWorker") == MIB
    assert limit_of("/ember.Raylet/PrepareBundleResources") is None
    monkeypatch.setenv("EMBER_MAX_CONTROL_MESSAGE_BYTES", str(MIB // 2))
    monkeypatch.setattr(config, "_config", None)
    assert rpc.method_limits()("/ember.Raylet/ReturnWorker") is None  # the server's own is smaller
    monkeypatch.setenv("EMBER_MAX_CONTROL_REQUEST_BYTES", "0")
    monkeypatch.setattr(config, "_config", None)
    with pytest.raises(ValueError, match="EMBER_MAX_CONTROL_REQUEST_BYTES must be > 0"):
        rpc.method_limits()


def test_every_large_method_exists():
    from ember_common.proto import gcs_task_pb2, raylet_pb2

    names = {f"/{s.full_name}/{m.name}" for mod in (gcs_pb2, gcs_task_pb2, raylet_pb2) for s in mod.DESCRIPTOR.services_by_name.values()
             for m in s.methods}
    assert rpc.LARGE_CONTROL_METHODS <= names, rpc.LARGE_CONTROL_METHODS - names
