"""A raylet killed and started again for the same node (a container restart): the workers that
died with the old raylet are reported dead by the new one (services/raylet/ember_raylet/
worker_ledger.py), so the node's object manager drops their pins and frees what they held.

Found by the chaos suite: a 50 MB object stayed in the head node's store after the workload, held
by a worker of a raylet-head that had been killed (nobody ever reported that worker's exit)."""
from __future__ import annotations

import gc
import time

import numpy as np
import pytest

import ember
from ember import exceptions as ex
from ember.testing import LocalCluster, wait_for
from ember_common import rpc
from ember_common.proto import objmgr_pb2, objmgr_pb2_grpc

MiB = 2**20


def _objects(address: str) -> list[objmgr_pb2.ObjectStat]:
    ch = rpc.sync_channel(address)
    try:
        return list(objmgr_pb2_grpc.ObjectManagerStub(ch).ListObjects(
            objmgr_pb2.ListObjectsRequest(), timeout=5).objects)
    finally:
        ch.close()


def _two_nodes():
    """(cluster, node b): a head and a node b with one prestarted worker, a driver attached.
    The cyclic GC is off meanwhile: only reference counts free anything, so what the tests
    check does not depend on when a collection happens to run (which depends on the tests that
    ran before in this process: test_free_after_crash.py)."""
    gc.collect()
    gc.disable()
    try:
        with LocalCluster() as c:
            c.add_node({"CPU": 1}, is_head=True)
            node = c.add_node({"CPU": 1, "b": 1}, num_prestart_workers=1)
            ember.init(address=c.gcs_address)
            try:
                yield c, node
            finally:
                ember.shutdown()
    finally:
        gc.enable()


@pytest.fixture
def cluster():
    yield from _two_nodes()


@ember.remote(resources={"b": 1}, max_retries=0)
def hold(arr: np.ndarray, started: str) -> int:
    open(started, "w").close()
    time.sleep(600)  # holds its view of the argument (a pin in the node's store) until killed
    return int(arr[0])


@ember.remote(resources={"b": 1})
def read(arr: np.ndarray) -> int:
    return int(arr.sum())


def test_pins_of_workers_that_died_with_their_raylet_are_dropped(cluster, tmp_path):
    c, node = cluster
    arr = np.ones(8 * MiB, dtype=np.uint8)
    ref = ember.put(arr)  # primary copy on the head node; the task pulls a copy to node b
    started = tmp_path / "started"
    out = hold.remote(ref, str(started))
    wait_for(started.exists, timeout_s=60, what="the task to hold its argument on node b")
    copy = [o for o in _objects(node.record.objmgr_address) if o.object_id == ref.binary()]
    assert copy and copy[0].pins >= 1, f"node b's copy is not pinned by the task: {copy}"

    c.restart_raylet(node)
    with pytest.raises(ex.RayError):  # WorkerCrashedError (or a lost node): max_retries=0
        ember.get(out, timeout=60)
    # The dead worker's pin is dropped, so node b's copy is evictable again (and is freed with
    # the owner's Free or death: a pulled copy is the owner's, not the puller's).
    oid = ref.binary()

    def unpinned() -> bool:
        left = [o for o in _objects(node.record.objmgr_address) if o.object_id == oid]
        return all(o.pins == 0 for o in left)

    wait_for(unpinned, timeout_s=30,
             what="node b's store to drop the pin of the worker that died with its raylet "
                  f"(left: {_objects(node.record.objmgr_address)})")
    del out, ref  # nothing refers to the object any more: the owner frees every copy

    def gone() -> bool:
        return not [o for o in _objects(node.record.objmgr_address) if o.size >= MiB]

    wait_for(gone, timeout_s=30, what="node b's store to free the copy once its owner let go of it")
    # The node works on under its new raylet.
    assert ember.get(read.remote(ember.put(np.full(MiB, 2, dtype=np.uint8))), timeout=60) == 2 * MiB


def test_the_new_raylet_reports_each_worker_of_the_old_one_once(cluster):
    """Its predecessor's ids (read from the GCS KV) are reported, then dropped from the ledger."""
    from ember._private.doors.internal_kv import _internal_kv_get

    c, node = cluster
    key = f"workers/{node.node_id}"
    before = wait_for(lambda: (_internal_kv_get(key, namespace="raylet") or b"").split(), timeout_s=30,
                      what="node b's worker ledger")
    c.restart_raylet(node)

    def handed_over() -> list[bytes] | None:
        now = (_internal_kv_get(key, namespace="raylet") or b"").split()
        return now if now and not set(before) & set(now) else None

    after = wait_for(handed_over, timeout_s=30, what="the new raylet's ledger without the old ids")
    assert len(after) >= 4  # the ids written ahead for its next workers


@pytest.fixture
def quick_death_cluster(monkeypatch):
    monkeypatch.setenv("EMBER_NODE_DEATH_TIMEOUT_S", "3")
    yield from _two_nodes()


def test_a_dead_nodes_ledger_leaves_the_kv_and_a_later_raylet_still_frees_the_pins(
        quick_death_cluster, tmp_path):
    """The raylet is killed and stays away past the death timeout: the GCS declares the node
    dead and deletes its worker ledger from the KV (before, it stayed there for good). A raylet
    that starts for the node after that finds no ledger; the GCS, which kept the ids, reports
    the old workers dead for it, so node b's store still drops their pins."""
    import os
    import signal

    from ember._private.doors.internal_kv import _internal_kv_get

    c, node = quick_death_cluster
    key = f"workers/{node.node_id}"
    wait_for(lambda: _internal_kv_get(key, namespace="raylet"), timeout_s=30, what="node b's ledger")
    ref = ember.put(np.ones(8 * MiB, dtype=np.uint8))
    started = tmp_path / "started"
    out = hold.remote(ref, str(started))
    wait_for(started.exists, timeout_s=60, what="the task to hold its argument on node b")
    oid = ref.binary()

    os.kill(node.raylet.pid, signal.SIGKILL)  # its workers die with it; its objmgr lives on
    wait_for(lambda: [n for n in ember.nodes() if n["NodeID"] == node.node_id and not n["Alive"]],
             timeout_s=30, what="node b declared dead")
    wait_for(lambda: _internal_kv_get(key, namespace="raylet") is None, timeout_s=10,
             what="the dead node's ledger deleted from the KV")
    with pytest.raises(ex.RayError):
        ember.get(out, timeout=60)

    c.restart_raylet(node)  # the node comes back under a new raylet
    wait_for(lambda: [n for n in ember.nodes() if n["NodeID"] == node.node_id and n["Alive"]],
             timeout_s=30, what="node b alive again")

    def unpinned() -> bool:
        return all(o.pins == 0 for o in _objects(node.record.objmgr_address) if o.object_id == oid)

    wait_for(unpinned, timeout_s=30, what="node b's store to drop the pin of the worker that died "
                                          f"with the old raylet (left: {_objects(node.record.objmgr_address)})")
    wait_for(lambda: _internal_kv_get(key, namespace="raylet"), timeout_s=30,
             what="the new raylet's ledger")
    del out, ref
    wait_for(lambda: not [o for o in _objects(node.record.objmgr_address) if o.size >= MiB],
             timeout_s=30, what="node b's copy freed once its owner let go of it")
