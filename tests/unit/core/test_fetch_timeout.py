"""A pull that times out is Ray's ObjectFetchTimedOutError (an ObjectLostError); a pull that
fails otherwise stays a plain ObjectLostError. ObjectTransfer._pull with a fake object manager."""
from __future__ import annotations

import asyncio

import grpc
import pytest

from ember import exceptions as exc
from ember._private.objects.object_transfer import ObjectTransfer
from ember_common.proto import common_pb2


class _Store:
    def copies(self, oid: bytes) -> list[str]:
        return []


class _Objmgr:
    def __init__(self, code: grpc.StatusCode) -> None:
        self.code = code
        self.calls = 0

    async def Pull(self, request, timeout, metadata):  # noqa: N802 (the gRPC method's name)
        self.calls += 1
        raise grpc.aio.AioRpcError(self.code, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                   details="no answer")


class _Transfer(ObjectTransfer):
    def __init__(self, code: grpc.StatusCode) -> None:
        self.node_id, self.worker_id, self.ip = "me", "w", "10.0.0.1"
        self.store = _Store()  # type: ignore[assignment]
        self.objmgr = _Objmgr(code)  # type: ignore[assignment]
        self._nodes = {}

    async def node_info(self, node_id: str) -> common_pb2.NodeInfo:
        return common_pb2.NodeInfo(node_id=node_id, state=common_pb2.NodeInfo.ALIVE,
                                   ip="10.0.0.2", objmgr_address="10.0.0.2:1")


def _entry() -> common_pb2.ReturnObject:
    return common_pb2.ReturnObject(object_id=b"\x01" * 28, node_id="other", size=10)


@pytest.mark.parametrize("code, cls", [
    (grpc.StatusCode.DEADLINE_EXCEEDED, exc.ObjectFetchTimedOutError),
    (grpc.StatusCode.UNAVAILABLE, exc.ObjectLostError),
])
def test_the_last_pull_timing_out_is_object_fetch_timed_out(code, cls):
    t = _Transfer(code)
    with pytest.raises(exc.ObjectLostError) as info:
        asyncio.run(t._pull(_entry(), None))
    assert type(info.value) is cls
    assert "no answer" in str(info.value) and t.objmgr.calls == 1
