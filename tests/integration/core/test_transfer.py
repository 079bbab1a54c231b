"""Node-to-node transfer in one process: two real ObjectStores, the source's ObjectTransfer service
on a loopback gRPC port and the destination's ObjectManager servicer pulling from it (no cluster:
this checks the pull path itself - parallel ranges, merging, errors). The cluster-level 1 GiB
transfer is in test_objects.py."""
from __future__ import annotations

import asyncio
import os

import grpc
import numpy as np
import pytest

from ember_common import rpc
from ember_common.proto import objmgr_pb2
from ember_common.rpc import NotFound
from ember_objmgr.server import ObjectManagerServicer
from ember_objmgr.store import ObjectStore
from ember_objmgr.transfer import CHUNK_BYTES, FIRST_RANGE_BYTES, TransferServicer, _ranges

MiB = 2**20


def _run(tmp_path, body):
    async def main():
        src = ObjectStore(str(tmp_path / "src"), 96 * MiB, str(tmp_path / "src-spill"))
        dst = ObjectStore(str(tmp_path / "dst"), 96 * MiB, str(tmp_path / "dst-spill"))
        server = grpc.aio.server(options=rpc.channel_options())
        server.add_generic_rpc_handlers([TransferServicer(src).handler()])
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servicer = ObjectManagerServicer(dst, "dst-node")
        try:
            await body(src, dst, servicer, f"127.0.0.1:{port}")
        finally:
            await servicer.close()
            await server.stop(0)
            src.destroy()
            dst.destroy()

    asyncio.run(main())


def _put(store: ObjectStore, data: np.ndarray) -> bytes:
    oid = os.urandom(28)
    off = store.create(oid, data.nbytes, "owner")
    store.view[off:off + data.nbytes] = data
    store.seal(oid)
    return oid


def _read(store: ObjectStore, oid: bytes) -> bytes:
    e = store.get(oid, "test")
    try:
        return bytes(store.view[e.offset:e.offset + e.size])
    finally:
        store.release(oid, "test")


def test_concurrent_pulls_of_one_object_are_merged_into_one_parallel_transfer(tmp_path):
    async def body(src, dst, servicer, source):
        size = 40 * MiB + 123  # a first range and two parallel ones, the last chunk partial
        assert len(_ranges(FIRST_RANGE_BYTES, size, 4)) == 2
        data = np.random.default_rng(1).integers(0, 256, size, dtype=np.uint8)
        oid = _put(src, data)
        transfers = []
        pull = servicer.puller.pull

        async def counted(*args):
            transfers.append(args)
            return await pull(*args)

        servicer.puller.pull = counted
        req = objmgr_pb2.PullRequest(object_id=oid, source_address=source, owner_worker_id="owner")
        replies = await asyncio.gather(*(servicer.Pull(req, None) for _ in range(8)))
        assert [r.size for r in replies] == [size] * 8
        assert len(transfers) == 1, "concurrent pulls of one object were not merged"
        assert _read(dst, oid) == data.tobytes()
        e = dst.objects[oid]
        assert not e.primary and e.state == "SEALED" and not e.pinned
        assert not src.objects[oid].pinned  # the source's read pins were released
        # The copy is recorded in this node's store: later pulls find it without a transfer.
        assert (await servicer.Pull(req, None)).size == size and len(transfers) == 1

    _run(tmp_path, body)


@pytest.mark.parametrize("size", [1, CHUNK_BYTES, FIRST_RANGE_BYTES + 1])
def test_pulls_of_small_and_boundary_sizes(tmp_path, size):
    async def body(src, dst, servicer, source):
        data = np.arange(size, dtype=np.uint64).astype(np.uint8)
        oid = _put(src, data)
        assert await servicer.puller.pull(oid, source, "owner") == size
        assert _read(dst, oid) == data.tobytes()

    _run(tmp_path, body)


def test_pulling_an_unknown_object_or_from_a_dead_node_fails_cleanly(tmp_path):
    async def body(src, dst, servicer, source):
        with pytest.raises(NotFound, match="is not at"):
            await servicer.puller.pull(os.urandom(28), source, "owner")
        oid = _put(src, np.ones(MiB, np.uint8))
        with pytest.raises(rpc.Unavailable, match="failed"):
            await servicer.puller.pull(oid, "127.0.0.1:1", "owner")
        assert oid not in dst.objects and dst.alloc.used == 0  # nothing half-written is left
        assert await servicer.puller.pull(oid, source, "owner") == MiB

    _run(tmp_path, body)


def test_a_pulled_copy_is_recorded_and_serves_readers_when_the_primary_node_dies():
    """The owner learns where readers pulled its object; when the node with the primary copy
    dies, later readers pull the recorded copy instead of losing the object."""
    import ember
    from ember.testing import LocalCluster, wait_for

    with LocalCluster(object_store_memory=256 * MiB) as c:
        c.add_node({"CPU": 1}, is_head=True)
        c.add_node({"CPU": 1, "primary": 1})
        reader = c.add_node({"CPU": 1, "reader": 1})
        ember.init(address=c.gcs_address)
        try:
            @ember.remote(resources={"primary": 1})
            def produce():
                return np.arange(8 * MiB, dtype=np.int64)  # 64 MiB, stored on the primary node

            @ember.remote(resources={"reader": 1})
            def where(a):
                return ember.get_runtime_context().get_node_id(), int(a[-1])

            ref = produce.remote()
            assert ember.get(where.remote(ref), timeout=120) == (reader.node_id, 8 * MiB - 1)
            core = ember._private.worker.global_worker().core
            oid = ref.binary()
            wait_for(lambda: reader.node_id in core.object_copies(oid), timeout_s=20,
                     what="the reader's copy to be reported to the owner")

            c.kill_raylet(c.nodes[1])  # the primary copy is gone with its node
            a = ember.get(ref, timeout=120)  # pulled from the reader's node instead
            assert a.nbytes == 64 * MiB and int(a[-1]) == 8 * MiB - 1 and not a.flags.writeable
            del a, ref
        finally:
            ember.shutdown()
