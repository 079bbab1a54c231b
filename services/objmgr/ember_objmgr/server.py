"""The object manager gRPC service: Seal, Pull (deduplicated, chunked), ReadObject, Free."""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
from typing import Any, AsyncIterator

import grpc

from ember._private import rpc, service
from ember._private.rpc import NotFound, Unavailable, rpc_errors
from ember._proto import objmgr_pb2, objmgr_pb2_grpc

from .store import ObjectStore

log = logging.getLogger(__name__)
CHUNK_BYTES = 4 * 1024 * 1024


class ObjectManagerServicer(objmgr_pb2_grpc.ObjectManagerServicer):
    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self._pulls: dict[bytes, asyncio.Future] = {}
        self._channels: dict[str, grpc.aio.Channel] = {}

    @rpc_errors
    async def Seal(self, request: Any, context: Any) -> Any:
        self.store.seal(request.object_id, request.size)
        return objmgr_pb2.SealReply()

    @rpc_errors
    async def Pull(self, request: Any, context: Any) -> Any:
        oid = request.object_id
        if oid in self.store.sizes:
            return objmgr_pb2.PullReply(size=self.store.sizes[oid])
        fut = self._pulls.get(oid)
        if fut is None:
            fut = self._pulls[oid] = asyncio.ensure_future(self._pull(oid, request.source_address))
            fut.add_done_callback(lambda _f: self._pulls.pop(oid, None))
        size = await asyncio.shield(fut)
        return objmgr_pb2.PullReply(size=size)

    async def _pull(self, oid: bytes, source: str) -> int:
        ch = self._channels.get(source)
        if ch is None:
            ch = self._channels[source] = rpc.aio_channel(source)
        stub = objmgr_pb2_grpc.ObjectManagerStub(ch)
        path = self.store.path(oid)
        tmp = path + ".pull"
        total = 0
        try:
            with open(tmp, "wb") as f:
                async for chunk in stub.ReadObject(objmgr_pb2.ReadObjectRequest(object_id=oid)):
                    if total == 0 and chunk.offset == 0:
                        self.store.reserve_check(chunk.total_size)
                    f.seek(chunk.offset)
                    f.write(chunk.data)
                    total = chunk.total_size
            os.replace(tmp, path)
        except grpc.aio.AioRpcError as e:
            if os.path.exists(tmp):
                os.unlink(tmp)
            if e.code() == grpc.StatusCode.NOT_FOUND:
                raise NotFound(f"object {oid.hex()} is not at {source}") from None
            raise Unavailable(f"pulling {oid.hex()} from {source} failed: {e.code().name}") from None
        self.store.seal(oid, total)
        return total

    async def ReadObject(self, request: Any, context: Any) -> AsyncIterator[Any]:
        path = self.store.path(request.object_id)
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"object {request.object_id.hex()} not here")
            return
        with f:
            total = os.fstat(f.fileno()).st_size
            offset = 0
            while True:
                data = f.read(CHUNK_BYTES)
                if not data and offset > 0:
                    break
                yield objmgr_pb2.ObjectChunk(total_size=total, offset=offset, data=data)
                offset += len(data)
                if not data:
                    break

    @rpc_errors
    async def Free(self, request: Any, context: Any) -> Any:
        for oid in request.object_ids:
            self.store.free(oid)
        return objmgr_pb2.FreeReply()

    @rpc_errors
    async def GetStoreStats(self, request: Any, context: Any) -> Any:
        return objmgr_pb2.GetStoreStatsReply(used_bytes=self.store.used, capacity_bytes=self.store.capacity,
                                             num_objects=len(self.store.sizes))

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="ember-objmgr", description="Ember object manager (one per node)")
    p.add_argument("--store-dir", required=True, help="directory on a tmpfs (e.g. under /dev/shm)")
    p.add_argument("--capacity-bytes", type=int, default=0)
    p.add_argument("--node-id", default="")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=0)
    service.add_common_flags(p)
    return p.parse_args(argv)


async def serve(ns: argparse.Namespace, stop: asyncio.Event) -> None:
    store = ObjectStore(ns.store_dir, ns.capacity_bytes)
    servicer = ObjectManagerServicer(store)
    server, port, health = rpc.build_server(
        [lambda s: objmgr_pb2_grpc.add_ObjectManagerServicer_to_server(servicer, s)],
        host=ns.host, port=ns.port)
    await server.start()
    await rpc.mark_serving(health, ["ember.ObjectManager"])
    rpc.write_port_file(ns.port_file, port)
    log.info("object manager serving on %s:%d, store %s (%d bytes)", ns.host, port, ns.store_dir,
             ns.capacity_bytes)
    try:
        await stop.wait()
    finally:
        await server.stop(0.5)
        await servicer.close()
        store.destroy()


def main(argv: list[str] | None = None) -> int:
    ns = parse_args(argv)
    service.setup(ns, "objmgr")
    return service.run(lambda stop: serve(ns, stop))
