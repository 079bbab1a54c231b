"""Requests the rules refuse before any work, on a real cluster: a placement group past the
bundle cap, absurd resource amounts, oversized KV keys and out-of-range times. Each is refused
naming the field, and the cluster keeps working (its node stays alive, tasks still run)."""
from __future__ import annotations

import os
import time

import grpc
import pytest

import ember
from ember.util.placement_group import placement_group, remove_placement_group
from ember_common import rpc
from ember_common.proto import common_pb2, gcs_pb2, gcs_pb2_grpc
from ember_common.validate_rules import MAX_BUNDLES_PER_GROUP


@pytest.fixture(scope="module")
def cluster():
    ember.init(num_cpus=2)
    yield ember.get_runtime_context().gcs_address
    ember.shutdown()


@ember.remote
def one():
    return 1


def _still_works():
    assert ember.get(one.remote(), timeout=30) == 1
    assert [n["Alive"] for n in ember.nodes()] == [True]


def test_a_group_at_the_bundle_cap_is_placed_and_removed_and_one_past_it_is_refused(cluster):
    t0 = time.monotonic()
    pg = placement_group([{"CPU": 0.0001}] * MAX_BUNDLES_PER_GROUP)
    ember.get(pg.ready(), timeout=120)
    remove_placement_group(pg)
    _still_works()
    assert time.monotonic() - t0 < 90
    with pytest.raises(ValueError, match=f"at most {MAX_BUNDLES_PER_GROUP} bundles, got {MAX_BUNDLES_PER_GROUP + 1}"):
        placement_group([{"CPU": 0.0001}] * (MAX_BUNDLES_PER_GROUP + 1))


def _call(address, stub, method, request):
    with rpc.sync_channel(address) as ch:
        return getattr(getattr(gcs_pb2_grpc, stub)(ch), method)(request, timeout=30)


@pytest.mark.parametrize("stub, method, request_, field", [
    ("NodeInfoGcsServiceStub", "RegisterNode", gcs_pb2.RegisterNodeRequest(node=common_pb2.NodeInfo(
        node_id="ghost", raylet_address="127.0.0.1:1", total_resources={"CPU": 1e308},
        available_resources={"CPU": 1e308}, state=common_pb2.NodeInfo.ALIVE)), "node.total_resources"),
    ("InternalKVGcsServiceStub", "InternalKVPut", gcs_pb2.InternalKVPutRequest(key=b"k" * (1 << 20), value=b"v"), "key"),
    ("JobInfoGcsServiceStub", "AddJob", gcs_pb2.AddJobRequest(job=common_pb2.JobInfo(start_time=1e308)), "job.start_time"),
])
def test_absurd_values_are_refused_naming_the_field(cluster, stub, method, request_, field):
    with pytest.raises(grpc.RpcError) as err:
        _call(cluster, stub, method, request_)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in err.value.details()
    _still_works()  # no ghost node joined; the GCS keeps serving


def _group(bundles: int, resources: dict[str, float]) -> common_pb2.PlacementGroupInfo:
    return common_pb2.PlacementGroupInfo(placement_group_id=os.urandom(18), bundles=[
        common_pb2.Bundle(index=i, resources=resources) for i in range(bundles)])


def test_raw_create_placement_group_past_the_cap_is_refused_naming_it(cluster):
    """The GCS refuses what the client-side check would have: 100,000 tiny bundles sent straight
    over gRPC, and a bundle of CPU=1e308; the node stays alive."""
    t0 = time.monotonic()
    with pytest.raises(grpc.RpcError) as err:
        _call(cluster, "PlacementGroupInfoGcsServiceStub", "CreatePlacementGroup",
              gcs_pb2.CreatePlacementGroupRequest(spec=_group(100_000, {"CPU": 0.0001})))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"spec.bundles must have at most {MAX_BUNDLES_PER_GROUP} items, got 100000" in err.value.details()
    assert time.monotonic() - t0 < 20  # refused before any placement work
    with pytest.raises(grpc.RpcError) as err:
        _call(cluster, "PlacementGroupInfoGcsServiceStub", "CreatePlacementGroup",
              gcs_pb2.CreatePlacementGroupRequest(spec=_group(1, {"CPU": 1e308})))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.bundles[0].resources" in err.value.details() and "CPU" in err.value.details()
    reply = _call(cluster, "PlacementGroupInfoGcsServiceStub", "CreatePlacementGroups",
                  gcs_pb2.CreatePlacementGroupsRequest(specs=[_group(100_000, {"CPU": 0.0001}),
                                                              _group(1, {"CPU": 1e308})]))
    assert f"at most {MAX_BUNDLES_PER_GROUP} bundles, got 100000" in reply.errors[0]
    assert "CPU" in reply.errors[1]
    _still_works()


def _latencies(n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.monotonic()
        ember.get(one.remote(), timeout=60)
        out.append(time.monotonic() - t0)
    return out


def _names(address: str) -> int:
    with rpc.sync_channel(address) as ch:
        nodes = gcs_pb2_grpc.NodeInfoGcsServiceStub(ch).GetAllNodeInfo(gcs_pb2.GetAllNodeInfoRequest(), timeout=30).nodes
    assert [n.state for n in nodes] == [common_pb2.NodeInfo.ALIVE]
    return len(nodes[0].total_resources)


def test_a_node_holding_18000_bundles_keeps_its_heartbeats_and_leases_quick(cluster):
    """18,000 committed bundles name 36,000 resources: the heartbeat that first carries them is
    4.7 MB, over the control limit, so it travels in chunks, once; later heartbeats and the
    nodes feed carry only what changed (tests/unit/security/test_heartbeat_deltas.py measures
    their sizes). The GCS learns every name, the node stays alive, and a plain task's latency
    stays within 1 s or 10 times its slowest at rest (on a loaded machine)."""
    rest = max(_latencies(10))
    groups = [placement_group([{"CPU": 0.00001}] * 9000) for _ in range(2)]
    ember.get([g.ready() for g in groups], timeout=120)
    deadline = time.monotonic() + 30
    while _names(cluster) < 36_000 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _names(cluster) >= 36_000
    busy = _latencies(30)
    assert max(busy) < max(1.0, 10 * rest), (busy, rest)
    for g in groups:
        remove_placement_group(g)
    deadline = time.monotonic() + 30
    while _names(cluster) > 100 and time.monotonic() < deadline:  # the removals reach the GCS as deltas
        time.sleep(0.2)
    assert _names(cluster) < 100
    _still_works()
