"""The cluster's demand as the autoscaler reads it (GetClusterResourceState on a real GCS): lease
requests queued and infeasible on a real raylet, a pending placement group and
request_resources() — and the node idle again once the work is done."""
from __future__ import annotations

import os
import time

import pytest

import ember
from ember.autoscaler.sdk import request_resources
from ember.testing import LocalCluster, wait_for
from ember.util.placement_group import placement_group, remove_placement_group
from ember_common.autoscaler_client import fetch_cluster_resource_state


@pytest.fixture
def cluster():
    mp = pytest.MonkeyPatch()
    mp.setenv("EMBER_INFEASIBLE_TIMEOUT_S", "60")
    c = LocalCluster()
    try:
        c.add_node({"CPU": 1}, is_head=True)
        ember.init(address=c.gcs_address)
        yield c
    finally:
        ember.shutdown()
        c.shutdown()
        mp.undo()


@ember.remote
def hold(path: str) -> int:
    while not os.path.exists(path):
        time.sleep(0.05)
    return 1


def shapes(demands) -> dict[tuple, int]:
    return {tuple(sorted(d.resources.items())): d.count for d in demands}


def test_demand_reaches_the_gcs_and_clears(cluster, tmp_path):
    release = str(tmp_path / "go")
    refs = [hold.remote(release) for _ in range(4)]  # one runs on the single CPU, the rest wait
    gpu = hold.options(num_gpus=1).remote(release)  # no node has a GPU: infeasible
    pg = placement_group([{"CPU": 4}], strategy="STRICT_PACK")
    request_resources(num_cpus=3, bundles=[{"CPU": 2}])

    def demand():
        s = fetch_cluster_resource_state(cluster.gcs_address)
        (node,) = s.nodes
        if not (node.reported and node.leased and shapes(node.queued).get((("CPU", 1.0),))
                and node.infeasible and s.pending_placement_groups):
            return None
        return s

    s = wait_for(demand, timeout_s=20, what="the demand in the GCS")
    node = s.nodes[0]
    assert node.is_head and node.idle_duration_s == 0
    assert shapes(node.infeasible) == {(("CPU", 1.0), ("GPU", 1.0)): 1}
    (group,) = s.pending_placement_groups
    assert group.strategy == "STRICT_PACK" and shapes(group.bundles) == {(("CPU", 4.0),): 1}
    assert shapes(s.requested) == {(("CPU", 1.0),): 3, (("CPU", 2.0),): 1}

    remove_placement_group(pg)
    request_resources(num_cpus=0)
    open(release, "w").close()
    cluster.add_node({"CPU": 1, "GPU": 1})  # the infeasible request runs there
    assert ember.get([*refs, gpu], timeout=30) == [1] * 5

    def idle():
        s = fetch_cluster_resource_state(cluster.gcs_address)
        done = all(not n.queued and not n.infeasible and n.leased == 0 and n.idle_duration_s > 0
                   for n in s.nodes)
        return s if done and not s.pending_placement_groups and not s.requested else None

    s = wait_for(idle, timeout_s=20, what="every node idle with no demand")
    assert [n.available_resources == n.total_resources for n in s.nodes] == [True, True]
