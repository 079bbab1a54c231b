"""Pipelining by default still spreads a burst of long tasks over nodes: the e2e spread test
(tests/e2e/test_cluster.py::test_tasks_land_on_both_nodes) on loopback, two real nodes."""
from __future__ import annotations

import time

import pytest

import ember
from ember.testing import LocalCluster, wait_for


@pytest.fixture(scope="module")
def two_nodes():
    c = LocalCluster()
    try:
        c.add_node({"CPU": 2}, is_head=True)
        c.add_node({"CPU": 2})
        ember.init(address=c.gcs_address)
        # As the e2e programs, start on an idle cluster the head raylet knows all of: both nodes
        # in the GCS, then a few heartbeats (0.5 s) for the head's view of the other node's resources.
        wait_for(lambda: ember.available_resources().get("CPU") == 4, timeout_s=30,
                 what="both nodes' CPUs in the cluster view")
        time.sleep(2.0)
        yield c
    finally:
        ember.shutdown()
        c.shutdown()


def test_long_tasks_right_after_start_land_on_both_nodes(two_nodes):
    """Twelve 0.5 s tasks on two 2-CPU nodes right after start use both nodes and run about a
    wave per 4 CPUs (pipelined behind the head's first two leases they stayed on the head)."""
    @ember.remote(num_cpus=1)
    def square(x):
        time.sleep(0.5)
        return x * x, ember.get_runtime_context().get_node_id()

    for _ in range(2):  # unknown function, then known long
        t0 = time.monotonic()
        res = ember.get([square.remote(i) for i in range(12)], timeout=120)
        wall = time.monotonic() - t0
        assert [r[0] for r in res] == [i * i for i in range(12)]
        assert len({r[1] for r in res}) == 2, res
        assert wall < 6.0, f"twelve 0.5 s tasks on 4 CPUs took {wall:.1f} s"
