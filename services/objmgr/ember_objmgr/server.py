"""The object manager gRPC service: a thin shell over ObjectStore, plus node-to-node pulls
(chunked gRPC streams, concurrent pulls of one object merged) and the GCS "workers" feed
(objects owned by a dead process are freed, its pins dropped)."""
from __future__ import annotations

import asyncio
import logging
import os
import sys
from typing import Any, AsyncIterator

from ember_common import backoff, ids, metrics, rpc, service, tracing
from ember_common.config import get_config
from ember_common.gcs_client import GcsClient
from ember_common.proto import objmgr_pb2, objmgr_pb2_grpc
from ember_common.rpc import rpc_errors
from ember_common.settings import ObjmgrSettings

from .store import ObjectStore
from .transfer import Puller, TransferServicer, stall_timeout_s

log = logging.getLogger(__name__)
HEALTH_NAME = objmgr_pb2.DESCRIPTOR.services_by_name["ObjectManager"].full_name  # "ember.ObjectManager"
CHUNK_BYTES = 16 * 1024 * 1024
# How long a Get that must restore a spilled object waits for pinned space to be released.
RESTORE_WAIT = backoff.Backoff(initial_s=0.005, max_s=0.1, deadline_s=1.0)


class ObjectManagerServicer(objmgr_pb2_grpc.ObjectManagerServicer):
    def __init__(self, store: ObjectStore, node_id: str) -> None:
        self.store = store
        self.node_id = node_id
        self._pulls: dict[bytes, asyncio.Future[Any]] = {}
        self.puller = Puller(store)

    @rpc_errors
    async def Create(self, request: objmgr_pb2.CreateRequest, context: rpc.Context) -> Any:
        offset = self.store.create(request.object_id, request.size, request.owner_worker_id,
                                   creator=request.client_id)
        return objmgr_pb2.CreateReply(offset=offset,
                                      fallback_path=self.store.objects[request.object_id].fallback_path)

    @rpc_errors
    async def Seal(self, request: objmgr_pb2.SealRequest, context: rpc.Context) -> Any:
        self.store.seal(request.object_id)
        return objmgr_pb2.SealReply()

    @rpc_errors  # NotFound, DataLoss, ResourceExhausted (no room to restore) -> status codes
    async def Get(self, request: objmgr_pb2.GetRequest, context: rpc.Context) -> Any:
        # Restoring a spilled object may need room that pinned objects hold; readers release
        # their pins in batches a few milliseconds after their views die, so a full store gets
        # a short while (RESTORE_WAIT) before the reader is told it is full.
        return await backoff.retry_async(lambda: self._get_all(request), RESTORE_WAIT,
                                         retry_on=lambda e: isinstance(e, rpc.ResourceExhausted))

    async def _get_all(self, request: Any) -> Any:
        reply = objmgr_pb2.GetReply()
        taken: list[bytes] = []
        try:
            for oid in request.object_ids:
                e = self.store.get(oid, request.client_id)
                taken.append(oid)
                reply.objects.append(objmgr_pb2.ObjectLocation(object_id=oid, offset=e.offset, size=e.size,
                                                                fallback_path=e.fallback_path))
        except BaseException:  # all or nothing: drop the pins taken so far
            for oid in taken:
                self.store.release(oid, request.client_id)
            raise
        return reply

    @rpc_errors
    async def Release(self, request: objmgr_pb2.ReleaseRequest, context: rpc.Context) -> Any:
        for oid in request.object_ids:
            self.store.release(oid, request.client_id)
        return objmgr_pb2.ReleaseReply()

    @rpc_errors
    async def Pull(self, request: objmgr_pb2.PullRequest, context: rpc.Context) -> Any:
        oid = request.object_id
        if self.store.contains(oid):
            return objmgr_pb2.PullReply(size=self.store.objects[oid].size)
        fut = self._pulls.get(oid)
        if fut is None:
            fut = self._pulls[oid] = asyncio.ensure_future(
                self._pull(oid, request.source_address, request.owner_worker_id))
            fut.add_done_callback(lambda _f: self._pulls.pop(oid, None))
        size = await asyncio.shield(fut)
        return objmgr_pb2.PullReply(size=size)

    async def _pull(self, oid: bytes, source: str, owner: str) -> int:
        if not tracing.enabled():
            return await self.puller.pull(oid, source, owner)  # parallel ReadRange streams
        with tracing.span("objmgr pull", **{"ember.object_id": oid.hex(), "ember.node_id": self.node_id,
                                            "ember.pull.source": source}) as sp:
            size = await self.puller.pull(oid, source, owner)
            sp.set_attribute("ember.object.size", size)
            return size

    @rpc_errors
    async def ReadObject(self, request: objmgr_pb2.ReadObjectRequest, context: rpc.Context) -> AsyncIterator[Any]:
        client = f"read-{id(context)}"
        e = self.store.get(request.object_id, client)  # NotFound / DataLoss -> status codes
        try:
            total, pos = e.size, 0
            while True:
                n = min(CHUNK_BYTES, total - pos)
                yield objmgr_pb2.ObjectChunk(total_size=total, offset=pos,
                                             data=bytes(self.store.buffer(e)[pos:pos + n]))
                pos += n
                if pos >= total:
                    break
        finally:
            self.store.release(request.object_id, client)

    @rpc_errors
    async def WriteObject(self, request_iterator: Any, context: Any) -> Any:
        """Chunks of one object (the first names it and its size); each chunk must lie inside
        the object, or the call fails INVALID_ARGUMENT and the unsealed object is dropped (a
        chunk out of bounds would overwrite other objects in the arena)."""
        oid = b""
        size = 0
        buf = memoryview(b"")
        fresh = False
        try:
            async for chunk in request_iterator:
                if not oid:
                    oid, size = chunk.object_id, chunk.total_size
                    if len(oid) != ids.OBJECT_ID_LEN or size < 0:
                        raise rpc.InvalidArgument(
                            f"WriteObject: the first chunk needs an object_id of {ids.OBJECT_ID_LEN} bytes "
                            f"(got {len(oid)}) and a total_size >= 0 (got {size})")
                    if self.store.contains(oid):
                        return objmgr_pb2.WriteObjectReply()
                    fresh = oid not in self.store.objects
                    self.store.create(oid, size, chunk.owner_worker_id)
                    buf = self.store.buffer(self.store.objects[oid])
                elif chunk.object_id and chunk.object_id != oid:
                    raise rpc.InvalidArgument(f"WriteObject: a chunk of object {chunk.object_id.hex()} "
                                              f"in the stream of {oid.hex()}")
                n = len(chunk.data)
                if chunk.offset < 0 or chunk.offset + n > size:
                    raise rpc.InvalidArgument(f"WriteObject: a chunk of {n} bytes at offset {chunk.offset} "
                                              f"does not fit object {oid.hex()} of {size} bytes")
                buf[chunk.offset:chunk.offset + n] = chunk.data
        except BaseException:
            if fresh:
                self.store.abort(oid)  # never sealed: its space is free again
            raise
        if oid:
            self.store.seal(oid)
        return objmgr_pb2.WriteObjectReply()

    @rpc_errors
    async def Free(self, request: objmgr_pb2.FreeRequest, context: rpc.Context) -> Any:
        for oid in request.object_ids:
            self.store.free(oid)
        return objmgr_pb2.FreeReply()

    @rpc_errors
    async def GetStoreStats(self, request: objmgr_pb2.GetStoreStatsRequest, context: rpc.Context) -> Any:
        s = self.store
        spilled = [e for e in s.objects.values() if e.state == "SPILLED"]
        return objmgr_pb2.GetStoreStatsReply(
            used_bytes=s.alloc.used, capacity_bytes=s.capacity, num_objects=len(s.objects),
            spilled_bytes=sum(e.size for e in spilled), num_spilled=len(spilled),
            arena_path=s.arena_path, num_pinned=sum(1 for e in s.objects.values() if e.pinned),
            fallback_bytes=s.fallback_bytes, num_fallback=sum(1 for e in s.objects.values() if e.fallback_path))

    @rpc_errors
    async def ListObjects(self, request: objmgr_pb2.ListObjectsRequest, context: rpc.Context) -> Any:
        reply = objmgr_pb2.ListObjectsReply(node_id=self.node_id)
        for e in self.store.objects.values():
            reply.objects.append(objmgr_pb2.ObjectStat(object_id=e.object_id, size=e.size,
                                                       owner_worker_id=e.owner, state=e.state,
                                                       pins=sum(e.pins.values()), pinned_by=sorted(e.pins),
                                                       creator=e.creator if e.state == "CREATED" else ""))
        return reply

    async def follow_worker_deaths(self, gcs_address: str, stop: asyncio.Event) -> None:
        """Frees objects owned by dead processes and drops their pins."""
        if not gcs_address:
            return
        def on_message(msg: Any) -> None:
            if msg.HasField("worker_death"):
                n = self.store.client_died(msg.worker_death.worker_id)
                if n:
                    log.info("freed %d objects of dead worker %s", n, msg.worker_death.worker_id)

        gcs = GcsClient(gcs_address)
        try:
            await gcs.follow(["workers"], on_message, stop)
        finally:
            await gcs.close()

    async def close(self) -> None:
        await self.puller.close()


def parse_args(argv: list[str] | None = None) -> ObjmgrSettings:
    """The object manager's command line (ember_common.settings.ObjmgrSettings)."""
    return ObjmgrSettings.from_argv_or_exit(argv)


async def serve(ns: ObjmgrSettings, stop: asyncio.Event) -> None:
    store = ObjectStore(ns.store_dir, ns.capacity_bytes, ns.spill_dir,
                        prefault_bytes=get_config().object_store_prefault_bytes, fallback_dir=ns.fallback_dir)
    servicer = ObjectManagerServicer(store, ns.node_id)
    register_metrics(store, ns.node_id)
    server, port, health = rpc.build_server(
        [lambda s: objmgr_pb2_grpc.add_ObjectManagerServicer_to_server(servicer, s),
         lambda s: s.add_generic_rpc_handlers([TransferServicer(store).handler()])],
        host=ns.host, port=ns.port, control=False)  # WriteObject's chunks: the data-plane limit
    await server.start()
    await rpc.mark_serving(health, [HEALTH_NAME])
    follow = asyncio.ensure_future(servicer.follow_worker_deaths(ns.gcs_address, stop))
    await service.advertise_metrics(ns.gcs_address, f"objmgr/{ns.node_id}",
                                    metrics.advertise_host(ns.host, ns.gcs_address))
    rpc.write_port_file(ns.port_file, port)
    log.info("object manager serving on %s:%d, arena %s (%d bytes), spill %s", ns.host, port,
             store.arena_path, store.capacity, store.spill_uri)
    try:
        await stop.wait()
    finally:
        await server.stop(0.5)
        follow.cancel()
        await asyncio.gather(follow, return_exceptions=True)
        await servicer.close()
        store.destroy()


def register_metrics(store: ObjectStore, node_id: str) -> None:
    """Live gauges of the store (no-op unless --metrics-export-port is set)."""
    if not metrics.enabled():
        return
    key = (node_id,)
    metrics.gauge("ember_object_store_used_bytes", "Bytes allocated in the shared-memory arena",
                  lambda: {key: store.alloc.used}, ("node_id",))
    metrics.gauge("ember_object_store_capacity_bytes", "Size of the shared-memory arena",
                  lambda: {key: store.capacity}, ("node_id",))
    metrics.gauge("ember_object_store_spilled_bytes", "Bytes of objects spilled to disk",
                  lambda: {key: store.spilled_bytes}, ("node_id",))

    def objects() -> dict[tuple[str, ...], float]:
        counts: dict[tuple[str, ...], float] = {}
        for e in list(store.objects.values()):
            counts[(node_id, e.state)] = counts.get((node_id, e.state), 0) + 1
        return counts

    metrics.gauge("ember_object_store_num_objects", "Objects in this node's store by state",
                  objects, ("node_id", "state"))


def main(argv: list[str] | None = None) -> int:
    ns = parse_args(argv)
    service.setup(ns, "objmgr")
    if ns.capacity_bytes <= 0:
        print("error: --capacity-bytes must be > 0", file=sys.stderr)
        return 1
    try:
        stall_timeout_s()
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    os.makedirs(ns.store_dir, exist_ok=True)
    return service.run(lambda stop: serve(ns, stop))
