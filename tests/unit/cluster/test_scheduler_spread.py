"""The hybrid policy (local first, then spread) and the spill holds that spread a burst of
requests over many free nodes (pure, fake clock)."""
from __future__ import annotations

from ember_raylet.lease_queue import LeaseQueue, LeaseRequest, Spill
from ember_raylet.resources import NodeResources
from ember_raylet.scheduler import RemoteNode, decide, score, utilization


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def node(node_id: str, cpu: float, avail: float | None = None) -> RemoteNode:
    return RemoteNode(node_id, f"{node_id}:1", {"CPU": cpu}, {"CPU": cpu if avail is None else avail})


def local_with(total: float, used: float) -> NodeResources:
    n = NodeResources({"CPU": total})
    if used:
        assert n.allocate({"CPU": used}) is not None
    return n


def test_utilization_is_the_busiest_requested_resource():
    total = {"CPU": 4, "GPU": 2}
    avail = {"CPU": 1, "GPU": 2}
    assert utilization(total, avail, {"CPU": 1}) == 0.75
    assert utilization(total, avail, {"GPU": 1}) == 0.0  # GPU shares are packed, not spread
    assert utilization(total, avail, {"CPU": 1, "GPU": 1}) == 0.75
    assert utilization(total, {"CPU": 1, "GPU": 0}, {"CPU": 1, "GPU": 1}) == 0.75
    assert utilization(total, avail, {}) == 0.0


def test_score_is_zero_below_the_spread_threshold():
    assert score({"CPU": 4}, {"CPU": 3}, {"CPU": 1}, 0.5) == 0.0
    assert score({"CPU": 4}, {"CPU": 2}, {"CPU": 1}, 0.5) == 0.5
    assert score({"CPU": 4}, {"CPU": 3}, {"CPU": 1}, 0.0) == 0.25


def test_local_below_the_threshold_stays_local_even_with_idle_nodes():
    local = local_with(8, 3)  # 37.5% busy
    d = decide(local, {"a": node("a", 8)}, "local", {"CPU": 1}, 0)
    assert d.kind == "local"


def test_local_above_the_threshold_spreads_to_a_less_loaded_node():
    local = local_with(8, 5)  # 62.5% busy, still fits
    idle = node("a", 8)
    d = decide(local, {"a": idle}, "local", {"CPU": 1}, 0)
    assert d.kind == "spill" and d.node is idle


def test_local_above_the_threshold_stays_when_others_are_busier():
    local = local_with(8, 5)  # 62.5%
    busier = node("a", 8, 1)  # 87.5%
    assert decide(local, {"a": busier}, "local", {"CPU": 1}, 0).kind == "local"


def test_spread_threshold_one_means_pure_local_first():
    local = local_with(8, 7)
    assert decide(local, {"a": node("a", 8)}, "local", {"CPU": 1}, 0, spread_threshold=1.0).kind == "local"


def test_a_request_for_nothing_stays_local():
    local = local_with(2, 2)
    assert decide(local, {"a": node("a", 8)}, "local", {}, 0).kind == "local"


def test_pinned_request_runs_here_even_when_busy_above_threshold():
    local = local_with(8, 7)
    assert decide(local, {"a": node("a", 8)}, "local", {"CPU": 1}, 1).kind == "local"


def test_pick_chooses_among_equal_nodes():
    local = local_with(1, 1)
    nodes = {n: node(n, 1) for n in "abc"}
    seen = []

    def pick(ties: list[RemoteNode]) -> RemoteNode:
        seen.append(sorted(t.node_id for t in ties))
        return ties[-1]

    d = decide(local, nodes, "local", {"CPU": 1}, 0, pick=pick)
    assert seen == [["a", "b", "c"]]
    assert d.node is nodes["c"]


def test_a_burst_of_requests_spreads_over_every_free_node():
    """Nine requests decided before any node reports again go to nine different nodes."""
    clock = Clock()
    q = LeaseQueue("local", NodeResources({"CPU": 1}), 10.0, clock, hold_s=2.0)
    for i in range(9):
        q.update_node(node(f"n{i}", 1))
    assert q.submit(LeaseRequest(b"L", {"CPU": 1})) == "queued"
    assert len(q.schedule(1).grants) == 1
    targets = []
    for i in range(9):
        d = q.submit(LeaseRequest(bytes([i]), {"CPU": 1}))
        assert isinstance(d, Spill)
        targets.append(d.node.node_id)
    assert sorted(targets) == [f"n{i}" for i in range(9)]
    # A tenth finds every node held: it waits here, and spills once a hold ends.
    assert q.submit(LeaseRequest(b"X", {"CPU": 1})) == "queued"
    clock.t += 2.5
    s = q.schedule(0)
    assert len(s.spills) == 1


def test_a_report_showing_the_work_arrived_ends_the_hold():
    clock = Clock()
    q = LeaseQueue("local", NodeResources({"CPU": 1}), 10.0, clock, hold_s=60.0)
    q.resources.allocate({"CPU": 1})
    q.update_node(node("a", 2))
    assert isinstance(q.submit(LeaseRequest(b"1", {"CPU": 1})), Spill)
    assert q.view()["a"].available["CPU"] == 1
    q.update_node(node("a", 2, 1))  # the node reports the lease taken
    assert q.holds == {}
    assert q.view()["a"].available["CPU"] == 1
    q.update_node(node("a", 2, 2))  # freed again: a report that shows more keeps no hold
    assert q.view()["a"].available["CPU"] == 2


def test_queued_requests_spread_when_a_node_frees():
    clock = Clock()
    q = LeaseQueue("local", NodeResources({"CPU": 1}), 10.0, clock, hold_s=2.0)
    q.resources.allocate({"CPU": 1})
    q.update_node(node("a", 1, 0))
    q.update_node(node("b", 1, 0))
    for i in range(3):
        assert q.submit(LeaseRequest(bytes([i]), {"CPU": 1})) == "queued"
    q.update_node(node("a", 1, 1))
    q.update_node(node("b", 1, 1))
    s = q.schedule(0)
    assert sorted(sp.node.node_id for sp in s.spills) == ["a", "b"]
    assert len(q.waiting) == 1


def test_a_report_later_than_settle_ends_older_holds_only():
    clock = Clock()
    q = LeaseQueue("local", NodeResources({"CPU": 1}), 10.0, clock, hold_s=10.0, settle_s=1.0)
    q.resources.allocate({"CPU": 1})
    q.update_node(node("a", 4))
    assert isinstance(q.submit(LeaseRequest(b"1", {"CPU": 1})), Spill)
    clock.t += 1.5
    assert isinstance(q.submit(LeaseRequest(b"2", {"CPU": 1})), Spill)
    assert q.view()["a"].available["CPU"] == 2
    q.update_node(node("a", 4, 4))  # unchanged report: the first spill's hold is settled
    assert q.view()["a"].available["CPU"] == 3
    clock.t += 20
    assert q.view()["a"].available["CPU"] == 4


def test_prefer_here_keeps_a_fitting_request_local_above_the_threshold():
    """SPREAD and soft affinity chose this node: it runs here while it fits, spills when not."""
    busy = local_with(8, 7)
    idle = {"a": node("a", 8)}
    assert decide(busy, idle, "local", {"CPU": 1}, 0).kind == "spill"
    assert decide(busy, idle, "local", {"CPU": 1}, 0, prefer_here=True).kind == "local"
    full = local_with(8, 8)
    assert decide(full, idle, "local", {"CPU": 1}, 0, prefer_here=True).kind == "spill"
