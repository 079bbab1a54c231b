"""LeaseQueue: grant order, spillback, the infeasible timeout, cancellation (pure, fake clock)."""
from __future__ import annotations

from ember_raylet.lease_queue import Fail, LeaseQueue, LeaseRequest, Spill
from ember_raylet.resources import NodeResources
from ember_raylet.scheduler import RemoteNode


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def req(n: int, cpu: float = 1, **kw: object) -> LeaseRequest:
    return LeaseRequest(bytes([n]), {"CPU": cpu}, **kw)  # type: ignore[arg-type]


def make(total: dict[str, float] | None = None, timeout: float = 10.0) -> tuple[LeaseQueue, Clock]:
    clock = Clock()
    return LeaseQueue("local", NodeResources(total or {"CPU": 2}), timeout, clock), clock


def test_grants_in_arrival_order_up_to_the_idle_workers():
    q, _ = make({"CPU": 4})
    for i in range(3):
        assert q.submit(req(i)) == "queued"
    s = q.schedule(idle_workers=2)
    assert [g.request.lease_id for g in s.grants] == [b"\x00", b"\x01"]
    assert s.workers_wanted == 1
    assert q.resources.available["CPU"] == 2
    s = q.schedule(idle_workers=5)
    assert [g.request.lease_id for g in s.grants] == [b"\x02"]
    assert len(q) == 0


def test_a_request_that_does_not_fit_waits_and_others_pass_it():
    q, _ = make({"CPU": 2})
    q.submit(req(0, cpu=2))
    q.submit(req(1, cpu=2, spillback_count=1))  # never spilled again: waits here
    q.submit(req(2, cpu=0))
    s = q.schedule(idle_workers=3)
    assert [g.request.lease_id for g in s.grants] == [b"\x00", b"\x02"]
    assert [r.lease_id for r in q.waiting] == [b"\x01"]
    q.resources.release(s.grants[0].alloc)
    assert [g.request.lease_id for g in q.schedule(1).grants] == [b"\x01"]


def test_waiting_request_spills_when_another_node_has_room():
    q, _ = make({"CPU": 1})
    q.submit(req(0))
    assert len(q.schedule(1).grants) == 1
    q.submit(req(1))
    assert q.schedule(1).grants == []
    q.update_node(RemoteNode("other", "other:1", {"CPU": 4}, {"CPU": 4}))
    s = q.schedule(1)
    assert [(sp.request.lease_id, sp.node.node_id) for sp in s.spills] == [(b"\x01", "other")]
    assert len(q) == 0


def test_submit_spills_at_once_when_local_is_full():
    q, _ = make({"CPU": 1})
    q.update_node(RemoteNode("other", "other:1", {"CPU": 4}, {"CPU": 4}))
    q.resources.allocate({"CPU": 1})
    d = q.submit(req(0))
    assert isinstance(d, Spill) and d.node.node_id == "other"


def test_infeasible_fails_after_the_timeout_with_the_reason():
    q, clock = make({"CPU": 2}, timeout=10)
    assert q.submit(req(0, cpu=8, name="big")) == "infeasible"
    assert "CPU=8" in q.why_infeasible(q.infeasible[0])
    clock.t += 9.9
    assert q.tick() == []
    clock.t += 0.2
    (d,) = q.tick()
    assert isinstance(d, Fail)
    assert "CPU=8" in d.reason and "Waited 10s" in d.reason and "big" in d.reason
    assert len(q) == 0


def test_infeasible_spills_when_a_node_that_fits_joins():
    q, clock = make({"CPU": 2})
    q.submit(req(0, cpu=8))
    clock.t += 5
    q.update_node(RemoteNode("big", "big:1", {"CPU": 16}, {"CPU": 16}))
    (d,) = q.tick()
    assert isinstance(d, Spill) and d.node.node_id == "big"


def test_infeasible_until_a_node_joins_then_gone_again():
    q, _ = make({"CPU": 2})
    q.update_node(RemoteNode("big", "big:1", {"CPU": 16}, {"CPU": 16}))
    q.update_node(RemoteNode("big", "big:1", {"CPU": 16}, {}, alive=False))
    assert q.cluster == {}
    assert q.submit(req(0, cpu=8)) == "infeasible"


def test_cancel_and_drop_owner():
    q, _ = make({"CPU": 0.5})
    q.submit(req(0, owner_worker_id="w1"))
    q.submit(req(1, owner_worker_id="w2"))
    q.submit(req(2, cpu=9, owner_worker_id="w1"))
    assert q.cancel(b"\x01") is not None
    assert q.cancel(b"\x01") is None
    assert sorted(r.lease_id for r in q.drop_owner("w1")) == [b"\x00", b"\x02"]
    assert len(q) == 0
