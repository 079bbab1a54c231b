"""Several nodes on one machine (real raylets and object managers on loopback): spillback,
infeasible requests, cross-node objects, and node death with task retry."""
from __future__ import annotations

import time

import numpy as np
import pytest

import ember
from ember import exceptions as ex
from ember.testing import LocalCluster, wait_for


@pytest.fixture(scope="module")
def cluster():
    mp = pytest.MonkeyPatch()
    mp.setenv("EMBER_NODE_DEATH_TIMEOUT_S", "2")
    mp.setenv("EMBER_INFEASIBLE_TIMEOUT_S", "2")
    c = LocalCluster()
    try:
        c.add_node({"CPU": 1}, is_head=True)
        c.add_node({"CPU": 2, "GPU": 1})
        c.add_node({"CPU": 1, "special": 1})
        c.add_node({"CPU": 1, "special": 1})
        ember.init(address=c.gcs_address)
        yield c
    finally:
        ember.shutdown()
        c.shutdown()
        mp.undo()


@ember.remote
def where(*_):
    return ember.get_runtime_context().get_node_id()


def test_driver_attaches_to_head_and_sees_all_nodes(cluster):
    head = cluster.nodes[0]
    assert ember.get_runtime_context().get_node_id() == head.node_id
    assert ember.cluster_resources()["CPU"] == 5
    assert sum(n["Alive"] for n in ember.nodes()) == 4


def test_spillback_to_the_node_with_the_resource(cluster):
    gpu_node = cluster.nodes[1].node_id
    special = {cluster.nodes[2].node_id, cluster.nodes[3].node_id}
    assert ember.get(where.options(num_gpus=1).remote()) == gpu_node
    assert ember.get(where.options(num_cpus=2).remote()) == gpu_node
    assert ember.get(where.options(resources={"special": 1}).remote()) in special
    # Plain tasks beyond the head's single CPU spread to other nodes.
    @ember.remote
    def busy():
        time.sleep(0.5)
        return ember.get_runtime_context().get_node_id()

    assert len(set(ember.get([busy.remote() for _ in range(5)]))) >= 2


def test_infeasible_request_fails_with_clear_error(cluster):
    with pytest.raises(ex.TaskUnschedulableError, match="GPU=4"):
        ember.get(where.options(num_gpus=4).remote(), timeout=30)
    assert ember.get(where.remote()) in {n.node_id for n in cluster.nodes}


def test_large_object_crosses_nodes(cluster):
    @ember.remote(resources={"special": 1})
    def produce():
        return np.full(3_000_000, 7, dtype=np.int64)  # 24 MB, lives on a special node

    @ember.remote(num_gpus=1)
    def consume(a):
        return int(a.sum()), ember.get_runtime_context().get_node_id()

    ref = produce.remote()
    arr = ember.get(ref)  # pulled to the head node
    assert arr.sum() == 21_000_000 and not arr.flags.writeable
    assert ember.get(consume.remote(ref)) == (21_000_000, cluster.nodes[1].node_id)



def test_a_pulled_copy_is_the_owners_and_goes_with_it(cluster):
    """A copy pulled to another node belongs to the object's owner, not to the worker that
    pulled it: the owner's death frees it even when the owner never learnt of the copy and the
    puller lives on (a pooled worker). Before, a copy was the puller's, and such a copy stayed."""
    import subprocess
    import sys

    gpu_node = cluster.nodes[1].node_id
    # A driver of its own (this one must outlive the test): it makes the object on a special
    # node, has it read on the GPU node, and reports the copy's listed owner before it exits.
    script = f"""
import numpy as np, ember
from ember.testing import wait_for
from ember.util.state import list_objects
ember.init(address={cluster.gcs_address!r})
@ember.remote(resources={{"special": 1}})
def produce():
    return np.full(3_000_000, 5, dtype=np.int64)
@ember.remote(num_gpus=1)
def consume(a):
    return int(a.sum())
ref = produce.remote()
assert ember.get(consume.remote(ref)) == 15_000_000
owners = wait_for(lambda: [o["owner_worker_id"] for o in list_objects(
    filters=[("object_id", "=", ref.hex())], detail=True) if o["node_id"] == {gpu_node!r}],
    what="the pulled copy listed")
print(ref.hex(), ember.get_runtime_context().get_worker_id(), *owners, flush=True)
ember.shutdown()
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    oid, driver, *owners = out.stdout.split()
    assert owners == [driver]  # the copy is the owner's, not the pulling worker's

    def copies():
        from ember.util.state import list_objects

        return [o for o in list_objects(address=cluster.gcs_address, filters=[("object_id", "=", oid)],
                                        detail=True) if o["node_id"] == gpu_node]

    # The driver has exited: its job ends, the GCS publishes its death, every store frees
    # what it owned, the pulled copy on the GPU node included.
    wait_for(lambda: not copies(), timeout_s=30, what="the pulled copy freed after its owner exited")


@pytest.mark.chaos
def test_killed_raylet_node_marked_dead_and_tasks_retried(cluster):
    @ember.remote(resources={"special": 1}, max_retries=2)
    def slow(t):
        time.sleep(t)
        return ember.get_runtime_context().get_node_id()

    victim_ref = slow.remote(5)
    survivors = {cluster.nodes[2].node_id, cluster.nodes[3].node_id}
    # Find the node running the task, then kill it.
    def running_node():
        for n in cluster.nodes[2:]:
            stats = _stats(n)
            if any(w.leased for w in stats.workers):
                return n
        return None

    victim = wait_for(running_node, what="the task to start on a special node")
    cluster.kill_raylet(victim)
    result = ember.get(victim_ref, timeout=60)
    assert result in survivors - {victim.node_id}
    dead = wait_for(lambda: [n for n in ember.nodes() if n["NodeID"] == victim.node_id and not n["Alive"]],
                    timeout_s=10, what="the killed node to be marked DEAD")
    assert "heartbeat" in dead[0]["DeathReason"]
    cluster.nodes.remove(victim)
    assert ember.get(slow.remote(0)) in survivors


def _stats(node):
    from ember_common import rpc
    from ember_common.proto import raylet_pb2, raylet_pb2_grpc

    ch = rpc.sync_channel(node.record.raylet_address)
    try:
        return raylet_pb2_grpc.RayletStub(ch).GetNodeStats(raylet_pb2.GetNodeStatsRequest(), timeout=5)
    finally:
        ch.close()
