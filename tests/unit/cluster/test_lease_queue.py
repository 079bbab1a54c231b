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


def blocked_worker(q: LeaseQueue, cpus: float) -> dict[str, float]:
    """A worker granted `cpus` that then blocks in get(): its CPUs are lent out."""
    assert q.submit(req(200, cpu=cpus)) == "queued"
    assert len(q.schedule(1).grants) == 1
    q.resources.lend({"CPU": cpus})
    return {"CPU": cpus}


def test_a_resuming_worker_gets_its_cpus_back_at_once_when_they_are_free():
    q, _ = make({"CPU": 4})
    lent = blocked_worker(q, 3)
    assert q.resume(b"A", lent) and q.resources.available["CPU"] == 1.0
    assert q.resume(b"B", {}) and q.resume(b"C", {"CPU": 0})  # nothing lent: nothing to wait for


def test_a_resuming_worker_waits_until_its_cpus_are_free_and_never_overcommits():
    q, _ = make({"CPU": 4})
    lent = blocked_worker(q, 3)
    q.submit(req(1, cpu=3))
    (other,) = q.schedule(1).grants  # runs on the lent CPUs
    assert not q.resume(b"A", lent)  # 1 CPU free: it waits
    assert q.resources.available["CPU"] == 1.0
    q.submit(req(2, cpu=1))  # fits, but needs CPUs while a worker waits to resume
    s = q.schedule(5)
    assert s.grants == [] and s.resumed == [] and s.workers_wanted == 0
    q.resources.release(other.alloc)  # the other task ends
    s = q.schedule(5)
    assert s.resumed == [b"A"]  # first its 3 CPUs, then the queue moves on with the last one
    assert [g.request.lease_id for g in s.grants] == [bytes([2])]
    assert q.resources.available["CPU"] == 0.0


def test_resumes_are_served_in_order_and_other_blocked_workers_make_room():
    q, _ = make({"CPU": 4})
    lent = blocked_worker(q, 2)
    q.submit(req(1, cpu=2))
    q.submit(req(3, cpu=2))
    grants = q.schedule(5).grants
    assert len(grants) == 2 and q.resources.available["CPU"] == 0.0
    assert not q.resume(b"A", lent)
    assert not q.resume(b"B", {"CPU": 1})
    q.resources.lend({"CPU": 2})  # one of the others blocks in get() too: 2 CPUs lent
    s = q.schedule(5)
    assert s.resumed == [b"A"] and q.resources.available["CPU"] == 0.0
    q.resources.release(grants[1].alloc)
    assert q.schedule(5).resumed == [b"B"] and q.resources.available["CPU"] == 1.0


def test_a_lease_that_ends_while_waiting_to_resume_leaves_the_queue():
    q, _ = make({"CPU": 2})
    lent = blocked_worker(q, 2)
    q.submit(req(1, cpu=2))
    (other,) = q.schedule(5).grants
    assert not q.resume(b"A", lent)
    assert q.drop_resume(b"A") and not q.drop_resume(b"A")
    q.submit(req(2, cpu=1))
    q.resources.release(other.alloc)
    s = q.schedule(5)  # requests needing CPUs are no longer held back
    assert s.resumed == [] and [g.request.lease_id for g in s.grants] == [bytes([2])]


def test_a_request_takes_an_idle_worker_of_its_kind_or_a_fresh_one():
    q, _ = make({"CPU": 4, "GPU": 1})
    q.submit(LeaseRequest(b"\x01", {"CPU": 1, "GPU": 1}))
    q.submit(req(2))
    s = q.schedule({"|cpu": 1})  # one idle worker, that ran CPU-only work
    assert [g.request.lease_id for g in s.grants] == [b"\x02"]
    assert s.wanted_by_env == {"": 1}  # the GPU request waits for a worker of its own
    s = q.schedule({"": 1})  # a fresh worker: it may take GPU work
    assert [g.request.lease_id for g in s.grants] == [b"\x01"]
