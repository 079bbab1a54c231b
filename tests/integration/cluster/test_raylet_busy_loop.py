"""A raylet whose event loop is held by one long request keeps its node alive: heartbeats run on
their own thread (ember_raylet.server.Heartbeats), so the GCS, with a death timeout shorter than
the request, never declares the node dead and the node's actors keep running."""
from __future__ import annotations

import os
import time

import pytest

import ember
from ember.testing import LocalCluster
from ember_common import rpc
from ember_common.gcs_client import SyncGcsClient
from ember_common.proto import common_pb2, raylet_pb2, raylet_pb2_grpc
from ember_common.validate_rules import MAX_BUNDLES_PER_GROUP

DEATH_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def cluster():
    mp = pytest.MonkeyPatch()
    mp.setenv("EMBER_NODE_DEATH_TIMEOUT_S", str(DEATH_TIMEOUT_S))
    mp.setenv("EMBER_HEARTBEAT_PERIOD_S", "0.2")
    c = LocalCluster()
    try:
        c.add_node({"CPU": 2}, is_head=True)
        ember.init(address=c.gcs_address)
        yield c
    finally:
        ember.shutdown()
        c.shutdown()
        mp.undo()


@ember.remote
class Counter:
    def __init__(self):
        self.n = 0

    def incr(self):
        self.n += 1
        return self.n


def _hold_the_loop(raylet_address: str, groups: int) -> float:
    """One PrepareBundleResources of `groups` full groups of tiny bundles (each group at the
    bundle cap, so the rules let it through): the raylet reserves them in one synchronous step.
    Returns how long the call took."""
    request = raylet_pb2.PrepareBundleResourcesRequest(groups=[
        raylet_pb2.GroupBundles(placement_group_id=os.urandom(18), bundles=[
            common_pb2.Bundle(index=i, resources={"CPU": 1e-6}) for i in range(MAX_BUNDLES_PER_GROUP)])
        for _ in range(groups)])
    t0 = time.monotonic()
    with rpc.sync_channel(raylet_address) as ch:
        raylet_pb2_grpc.RayletStub(ch).PrepareBundleResources(request, timeout=300)
    return time.monotonic() - t0


def test_a_raylet_busy_longer_than_the_death_timeout_keeps_its_node_alive(cluster):
    counter = Counter.remote()
    assert ember.get(counter.incr.remote(), timeout=30) == 1
    [node] = SyncGcsClient(cluster.gcs_address).get_all_node_info()
    groups, took = 8, 0.0
    while took < 3 * DEATH_TIMEOUT_S:  # hold the loop well past the death timeout (a fast
        assert groups <= 64, took      # machine needs a larger request)
        took = _hold_the_loop(node.raylet_address, groups)
        groups *= 2
    [after] = SyncGcsClient(cluster.gcs_address).get_all_node_info()
    assert after.state == common_pb2.NodeInfo.ALIVE and not after.death_reason
    assert ember.get(counter.incr.remote(), timeout=30) == 2  # the actor was never killed
