"""Demand for the autoscaler, without sockets: the raylet's lease queue counted by shape and its
load report (idle clock), the GCS's load table, pending groups and stored resource requests, and
request_resources()'s validation."""
from __future__ import annotations

import json

import pytest

from ember.autoscaler import sdk
from ember_common.proto import autoscaler_pb2, common_pb2
from ember_gcs.autoscaler_state import LoadTable, pending_groups, requested
from ember_raylet.lease_queue import LeaseQueue, LeaseRequest
from ember_raylet.load_report import IdleClock, Sender, build_report
from ember_raylet.resources import NodeResources


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def queue(clock: Clock, cpus: float = 1.0) -> LeaseQueue:
    return LeaseQueue("me", NodeResources({"CPU": cpus}), infeasible_timeout_s=30, clock=clock)


def test_lease_queue_counts_waiting_requests_by_shape():
    q = queue(Clock())
    for i in range(3):
        assert q.submit(LeaseRequest(bytes([i]), {"CPU": 1.0})) == "queued"
    assert q.submit(LeaseRequest(b"m", {"CPU": 1.0, "memory": 0.0})) == "queued"  # 0 drops out
    assert q.submit(LeaseRequest(b"g", {"GPU": 1.0})) == "infeasible"
    queued, infeasible = q.demand()
    assert queued == {(("CPU", 1.0),): 4}
    assert infeasible == {(("GPU", 1.0),): 1}
    q.schedule(1)  # one granted: it leaves the demand
    assert q.demand()[0] == {(("CPU", 1.0),): 3}


class FakeNode:
    def __init__(self, clock: Clock) -> None:
        self.node_id = "me"
        self.queue = queue(clock)
        self.resources = self.queue.resources
        self.leases: dict[bytes, object] = {}


def test_load_report_and_the_idle_clock():
    clock = Clock()
    node, idle = FakeNode(clock), IdleClock()
    r = build_report(node, idle, clock())
    assert (r.node_id, list(r.queued), r.idle_duration_s, r.leased, r.idle) == ("me", [], 0.0, 0, True)
    clock.t += 7
    assert build_report(node, idle, clock()).idle_duration_s == 7.0
    # queued work (and bundle-bound requests, which are left out of the demand) make it busy
    node.queue.submit(LeaseRequest(b"a", {"CPU": 1.0}))
    node.queue.submit(LeaseRequest(b"b", {"CPU_group_0_ab": 1.0}))
    r = build_report(node, idle, clock())
    assert r.idle_duration_s == 0.0 and not r.idle
    assert [(dict(d.resources), d.count) for d in r.queued] == [({"CPU": 1.0}, 1)]
    node.queue.drain()
    node.leases[b"x"] = object()
    assert build_report(node, idle, clock()).leased == 1
    node.leases.clear()
    node.resources.allocate({"CPU": 0.5})  # a reserved bundle still uses the node
    assert build_report(node, idle, clock()).idle_duration_s == 0.0


def test_reports_go_out_on_change_or_as_keepalive():
    send = Sender(keepalive_s=3)
    idle = autoscaler_pb2.ReportResourceLoadRequest(node_id="n", idle=True, idle_duration_s=1)
    assert send.wants(idle, 0.0)
    send.sent(idle, 0.0)
    later = autoscaler_pb2.ReportResourceLoadRequest(node_id="n", idle=True, idle_duration_s=2)
    assert not send.wants(later, 1.0)  # only the idle time grew: the GCS extrapolates it
    busy = autoscaler_pb2.ReportResourceLoadRequest(node_id="n", leased=1)
    assert send.wants(busy, 1.0)  # the load changed
    assert send.wants(later, 3.0)  # the keepalive


def alive(node_id: str, head: bool = False, state: int = common_pb2.NodeInfo.ALIVE) -> common_pb2.NodeInfo:
    return common_pb2.NodeInfo(node_id=node_id, is_head=head, state=state, total_resources={"CPU": 2.0},
                               available_resources={"CPU": 1.0}, raylet_address=f"{node_id}:1")


def test_load_table_joins_reports_with_alive_nodes_and_drops_stale_ones():
    clock = Clock()
    t = LoadTable(stale_s=5, clock=clock)
    t.report(autoscaler_pb2.ReportResourceLoadRequest(
        node_id="w", idle_duration_s=3, leased=2,
        queued=[autoscaler_pb2.ResourceDemand(resources={"CPU": 1.0}, count=4)]))
    t.report(autoscaler_pb2.ReportResourceLoadRequest(node_id="gone"))
    out = t.nodes([alive("w"), alive("h", head=True), alive("gone", state=common_pb2.NodeInfo.DEAD)])
    assert [n.node_id for n in out] == ["h", "w"]  # the head first, dead nodes left out
    assert out[0].reported is False and out[1].reported is True
    assert (out[1].queued[0].count, out[1].leased, out[1].idle_duration_s) == (4, 2, 0.0)  # busy
    assert "gone" not in t.reports
    t.report(autoscaler_pb2.ReportResourceLoadRequest(node_id="i", idle=True, idle_duration_s=3))
    clock.t += 4  # an idle node's idle time goes on between its reports
    assert t.nodes([alive("i")])[0].idle_duration_s == 7.0
    clock.t += 2
    assert t.nodes([alive("w")])[0].reported is False  # its raylet stopped reporting
    with pytest.raises(ValueError, match="node_id"):
        t.report(autoscaler_pb2.ReportResourceLoadRequest())
    with pytest.raises(ValueError, match="count"):
        t.report(autoscaler_pb2.ReportResourceLoadRequest(
            node_id="w", queued=[autoscaler_pb2.ResourceDemand(count=-1)]))


def test_pending_groups_list_unplaced_bundles_only():
    pg = common_pb2.PlacementGroupInfo(placement_group_id=b"p", strategy=common_pb2.PlacementGroupInfo.STRICT_SPREAD)
    pg.bundles.add(index=0, resources={"CPU": 1.0}, node_id="n1")
    pg.bundles.add(index=1, resources={"CPU": 2.0})
    placed = common_pb2.PlacementGroupInfo(placement_group_id=b"q")
    placed.bundles.add(index=0, resources={"CPU": 1.0}, node_id="n1")
    out = pending_groups([pg, placed])
    assert len(out) == 1 and out[0].strategy == "STRICT_SPREAD"
    assert [dict(b.resources) for b in out[0].bundles] == [{"CPU": 2.0}]


def test_stored_resource_requests_are_counted_by_shape():
    raw = json.dumps([{"CPU": 1}, {"CPU": 1.0}, {"GPU": 1, "CPU": 0}]).encode()
    got = sorted((sorted(d.resources.items()), d.count) for d in requested(raw))
    assert got == [([("CPU", 1.0)], 2), ([("GPU", 1.0)], 1)]
    assert requested(None) == [] and requested(b"not json") == []


def test_request_resources_bundles_and_errors():
    assert sdk._bundles(2, [{"GPU": 1}]) == [{"CPU": 1.0}, {"CPU": 1.0}, {"GPU": 1.0}]
    assert sdk._bundles(0, None) == []
    with pytest.raises(ValueError, match="num_cpus must be >= 0"):
        sdk._bundles(-1, None)
    with pytest.raises(TypeError, match="num_cpus must be an integer"):
        sdk._bundles(1.5, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"bundles\[0\]\['CPU'\]"):
        sdk._bundles(None, [{"CPU": -1}])
    with pytest.raises(TypeError, match="bundles must be a list"):
        sdk._bundles(None, {"CPU": 1})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bundle_label_selectors"):
        sdk.request_resources(bundles=[{"CPU": 1}], bundle_label_selectors=[{"a": "b"}])
