"""The GCS on a real etcd: restart the GCS process mid-run and the cluster keeps working."""
from __future__ import annotations

import time

import pytest

import ember
from ember.testing import EtcdProcess, LocalCluster, wait_for
from ember.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from ember_common.gcs_client import SyncGcsClient

pytestmark = [pytest.mark.etcd, pytest.mark.chaos]


@pytest.fixture(scope="module")
def etcd():
    with EtcdProcess() as e:
        yield e


def _gcs(address):
    return SyncGcsClient(address, timeout_s=5)


def test_gcs_restart_keeps_cluster_working(etcd):
    mp = pytest.MonkeyPatch()
    mp.setenv("EMBER_NODE_DEATH_TIMEOUT_S", "3")
    try:
        with LocalCluster(gcs_storage=etcd.url) as c:
            head = c.add_node({"CPU": 1}, is_head=True)
            other = c.add_node({"CPU": 1, "special": 1})
            ember.init(address=c.gcs_address)
            try:
                @ember.remote
                def square(x):
                    time.sleep(0.01)
                    return x * x

                @ember.remote(resources={"special": 1})
                def special():
                    return ember.get_runtime_context().get_node_id()

                assert ember.get([square.remote(i) for i in range(20)]) == [i * i for i in range(20)]
                # A worker loads a function (and its job's code paths) from the GCS the first
                # time it runs it, so only workers that already ran `square` can run it while the
                # GCS is down: run it once on each node's worker (one each: 1 CPU per node).
                warm = [square.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n.node_id, soft=False))
                        .remote(2) for n in (head, other)]
                assert ember.get(warm, timeout=60) == [4, 4]
                with _gcs(c.gcs_address) as gcs:
                    gcs.internal_kv_put("test", b"k", b"v")
                    jobs_before = len(gcs.get_all_job_info())

                # Work in flight while the GCS is down: the task path never touches the GCS (for
                # functions its workers have loaded).
                in_flight = [square.remote(i) for i in range(50)]
                c.kill_gcs()
                during = ember.get([square.remote(i) for i in range(10)], timeout=60)
                assert during == [i * i for i in range(10)]
                c.restart_gcs()
                assert ember.get(in_flight, timeout=60) == [i * i for i in range(50)]

                with _gcs(c.gcs_address) as gcs:
                    # State came back from etcd: nodes, jobs, KV.
                    nodes = gcs.get_all_node_info()
                    assert {n.node_id for n in nodes} == {head.node_id, other.node_id}
                    assert all(n.state == 0 for n in nodes)
                    assert gcs.internal_kv_get("test", b"k") == b"v"
                    assert gcs.internal_kv_get("test", b"missing") is None
                    assert len(gcs.get_all_job_info()) == jobs_before
                # Nodes keep heartbeating to the new GCS: still alive after the death timeout.
                time.sleep(4)
                assert sum(n["Alive"] for n in ember.nodes()) == 2
                # New functions can be exported (function table in the GCS) and spillback works.
                assert ember.get(special.remote(), timeout=30) == other.node_id

                @ember.remote
                def brand_new():
                    return "new"

                assert ember.get(brand_new.remote(), timeout=30) == "new"
            finally:
                ember.shutdown()
    finally:
        mp.undo()


def test_gcs_start_fails_clearly_when_etcd_unreachable(tmp_path):
    from ember._private import node as node_mod

    with pytest.raises(RuntimeError, match="etcd.*127.0.0.1:1"):
        node_mod.start_gcs(str(tmp_path), port=0, storage="etcd://127.0.0.1:1", host="127.0.0.1")


def test_raylets_reregister_after_gcs_restart_on_new_storage_state(etcd):
    """A node that the GCS marked dead while partitioned registers again once it is heard."""
    with LocalCluster(gcs_storage=etcd.url) as c:
        n = c.add_node({"CPU": 1}, is_head=True)
        with _gcs(c.gcs_address) as gcs:
            gcs.unregister_node(n.node_id, "test")
            wait_for(lambda: any(x.node_id == n.node_id and x.state == 0
                                 for x in gcs.get_all_node_info()),
                     what="the node to register again")
