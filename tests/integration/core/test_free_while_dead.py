"""A node declared dead that comes back must not keep the copies freed while it was dead.

A raylet that was only silent (a network cut, a long pause) is declared dead by the GCS and
registers again, with its object store intact. While it was dead its owners' Frees skipped it
(they go to live nodes only, or failed on the silent node): the copies freed meanwhile stayed
in its store until their owners died. The owner now keeps the Frees a node missed and sends them
once the node is alive again (client/ember/_private/owner/missed_frees.py). The same holds for a Free
that a live node's silent object manager did not answer. Each test fails on the code before
(the first with a 7 s sleep in place of its wait on the owner's table, which that code lacks).
"""
from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

import ember
from ember.testing import LocalCluster, wait_for
from ember_common import rpc
from ember_common.proto import objmgr_pb2, objmgr_pb2_grpc

MiB = 2**20


def _big_objects(address: str) -> list[bytes]:
    ch = rpc.sync_channel(address)
    try:
        return [o.object_id for o in objmgr_pb2_grpc.ObjectManagerStub(ch).ListObjects(
            objmgr_pb2.ListObjectsRequest(), timeout=5).objects if o.size >= MiB]
    finally:
        ch.close()


def _alive(node_id: str) -> bool:
    return any(n["NodeID"] == node_id and n["Alive"] for n in ember.nodes())


@pytest.fixture
def cluster():
    mp = pytest.MonkeyPatch()
    mp.setenv("EMBER_NODE_DEATH_TIMEOUT_S", "2")  # the GCS reads it: b is declared dead soon
    c = LocalCluster()
    try:
        c.add_node({"CPU": 1}, is_head=True)
        b = c.add_node({"CPU": 1, "b": 1}, num_prestart_workers=1)
        ember.init(address=c.gcs_address)
        yield c, b
    finally:
        ember.shutdown()
        c.shutdown()
        mp.undo()


@ember.remote(resources={"b": 1})
def read(arr: np.ndarray) -> int:
    return int(arr[0])


def _stop(pids: list[int]) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)


def _cont(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def test_a_free_a_silent_objmgr_did_not_answer_is_sent_again(cluster):
    """b's object manager alone goes silent (b stays alive): the owner's Free to it times out;
    once it answers again, the owner sends the Free again and b's copy goes."""
    c, b = cluster
    store_b = b.record.objmgr_address
    ref = ember.put(np.full(4 * MiB, 5, dtype=np.uint8))
    assert ember.get(read.remote(ref), timeout=60) == 5
    freed_id = ref.binary()
    assert freed_id in _big_objects(store_b)
    core = ember._private.worker.global_worker().core
    pid = b.procs[1].pid
    _stop([pid])
    try:
        del ref
        # The Free to b times out (5 s): the owner records it as missed.
        wait_for(lambda: core._missed_frees is not None and len(core._missed_frees), timeout_s=30,
                 what="the owner to record b's missed Free")
    finally:
        _cont([pid])
    wait_for(lambda: freed_id not in _big_objects(store_b), timeout_s=30,
             what="b's copy to go once its object manager answers again")


@pytest.mark.parametrize("silent", ["raylet", "node"])
def test_copies_freed_while_a_node_was_dead_go_when_it_comes_back(cluster, silent):
    """b holds a copy of the driver's object; b goes silent (its raylet, or raylet and object
    manager) until the GCS declares it dead; the driver frees the object meanwhile; b comes back
    and registers again: its copy must go too, and a live object's copy must stay."""
    c, b = cluster
    head, store_b = c.nodes[0].record.objmgr_address, b.record.objmgr_address
    ref = ember.put(np.full(4 * MiB, 7, dtype=np.uint8))
    kept = ember.put(np.full(4 * MiB, 9, dtype=np.uint8))
    assert ember.get([read.remote(ref), read.remote(kept)], timeout=60) == [7, 9]
    freed_id, kept_id = ref.binary(), kept.binary()
    assert {freed_id, kept_id} <= set(_big_objects(store_b)), "b should hold pulled copies"

    pids = [b.procs[0].pid] if silent == "raylet" else [p.pid for p in b.procs]
    _stop(pids)
    try:
        wait_for(lambda: not _alive(b.node_id), timeout_s=30, what=f"node {b.node_id} declared dead")
        del ref  # the owner frees it now: b is dead (or silent), so b's copy is missed
        wait_for(lambda: freed_id not in _big_objects(head), timeout_s=30,
                 what="the head's copy freed")
    finally:
        _cont(pids)
    wait_for(lambda: _alive(b.node_id), timeout_s=30, what=f"node {b.node_id} registered again")
    t0 = time.monotonic()
    wait_for(lambda: freed_id not in _big_objects(store_b), timeout_s=30,
             what="b's copy of the object freed while b was dead to go")
    assert kept_id in _big_objects(store_b), "the copy of a live object was dropped"
    assert time.monotonic() - t0 < 30
    # The cluster works on: b runs tasks and reads the live object again.
    assert ember.get(read.remote(kept), timeout=60) == 9
