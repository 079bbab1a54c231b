"""The task queue (task_queue.py): leases, pushes, linger, retries and failures, with an
injected clock and lease ids, without sockets."""
from __future__ import annotations

import itertools
from typing import Any

from ember import exceptions as exc
from ember._private.owner.task_queue import (
    CancelLeaseRequest,
    Complete,
    Fail,
    GiveBack,
    Push,
    RequestLease,
    ReturnLease,
    SetTimer,
    TaskEntry,
    TaskQueue,
)
from ember_common.proto import common_pb2, core_worker_pb2

KEY = (("CPU", 1.0),)
OK = core_worker_pb2.PushTaskReply()
APP_ERROR = core_worker_pb2.PushTaskReply(is_application_error=True, error_message="boom")


class Clock:
    def __init__(self) -> None:
        self.t = 10.0

    def __call__(self) -> float:
        return self.t


def make(max_requests: int = 10, linger_s: float = 0.002,
         classify: Any = None, inflight: int = 1) -> tuple[TaskQueue, Clock]:
    clock = Clock()
    n = itertools.count()
    extra = {} if classify is None else {"classify": classify}
    q = TaskQueue("home:1", max_pending_lease_requests=max_requests,
                  max_tasks_in_flight_per_worker=inflight, lease_linger_s=linger_s, clock=clock,
                  new_lease_id=lambda: b"L%d" % next(n), **extra)
    q.durations.observe("", 1e-4)  # the tasks here are known short: pipelined when inflight > 1
    return q, clock


def task(i: int, retries: int = 3, retry_exceptions: bool = False,
         allowlist: tuple[type[BaseException], ...] | None = None) -> TaskEntry:
    spec = common_pb2.TaskSpec(task_id=bytes([i]) * 16, name=f"t{i}",
                               retry_exceptions=retry_exceptions)
    return TaskEntry(spec, [], retries, KEY, allowlist)


def of(out: list, kind: type) -> list:
    return [i for i in out if isinstance(i, kind)]


def grant(q: TaskQueue, lease_id: bytes, worker: str = "w:1", gpus: list[int] | None = None,
          capacity: int = 0) -> list:
    assert q.request_started(KEY, lease_id) is not None
    return q.lease_granted(KEY, lease_id, "home:1", worker, gpus or [], capacity)


def test_lease_requests_are_bounded_by_queued_tasks_and_the_limit():
    q, _ = make(max_requests=2)
    assert of(q.enqueue(task(1)), RequestLease) == [RequestLease(KEY, b"L0", "home:1")]
    assert len(of(q.enqueue(task(2)), RequestLease)) == 1
    assert of(q.enqueue(task(3)), RequestLease) == []  # two in flight already
    assert q.pending_requests(KEY) == {b"L0": "home:1", b"L1": "home:1"}


def test_a_granted_lease_runs_tasks_one_at_a_time_and_is_reused():
    q, _ = make()
    t1, t2 = task(1), task(2)
    q.enqueue(t1)
    q.enqueue(t2)
    out = grant(q, b"L0", gpus=[3])
    assert of(out, Push) == [Push(t1.lease, t1)] and list(t1.spec.gpu_ids) == [3]
    out = q.push_replied(t1, OK)
    assert of(out, Complete) == [Complete(t1, OK)]
    assert [p.entry for p in of(out, Push)] == [t2]  # same worker, next task
    assert t2.lease is not None and t2.lease.worker_address == "w:1"


def test_an_idle_lease_lingers_then_goes_back():
    q, clock = make(linger_s=0.5)
    t1 = task(1)
    q.enqueue(t1)
    grant(q, b"L0")
    out = q.push_replied(t1, OK)
    assert of(out, SetTimer) == [SetTimer(10.5)] and of(out, ReturnLease) == []
    clock.t = 10.2
    assert q.expire(clock.t) == [SetTimer(10.5)]  # not yet
    t2 = task(2)
    assert [p.entry for p in of(q.enqueue(t2), Push)] == [t2]  # reused while lingering
    clock.t = 10.6
    assert q.expire(clock.t) == []  # it is busy: stays
    out = q.push_replied(t2, OK)
    assert of(out, SetTimer) == [SetTimer(11.1)]
    clock.t = 11.2
    out = q.expire(clock.t)
    assert [r.lease.lease_id for r in of(out, ReturnLease)] == [b"L0"] and not q.leases(KEY)


def test_a_lease_granted_after_the_queue_emptied_goes_straight_back():
    q, _ = make()
    t1 = task(1)
    q.enqueue(t1)
    assert q.remove(t1) and not q.remove(t1)
    assert q.request_started(KEY, b"L0") is None  # nothing to ask for any more
    t2 = task(2)
    q.enqueue(t2)  # asks again (L1)
    q.remove(t2)
    out = q.lease_granted(KEY, b"L1", "home:1", "w:9", [])
    assert of(out, ReturnLease) == [ReturnLease(out[0].lease, False)] and not q.leases(KEY)


def test_pending_requests_are_cancelled_when_the_queue_empties():
    q, _ = make(max_requests=3)
    ts = [task(i) for i in range(3)]
    for t in ts:
        q.enqueue(t)
    out = grant(q, b"L0")
    assert [p.entry for p in of(out, Push)] == [ts[0]]
    q.request_moved(KEY, b"L1", "other:2")  # followed a spillback
    q.remove(ts[1])
    q.remove(ts[2])
    out = q.push_replied(ts[0], OK)
    assert sorted(of(out, CancelLeaseRequest)) == [CancelLeaseRequest("home:1", b"L2"),
                                                    CancelLeaseRequest("other:2", b"L1")]
    assert of(q.lease_cancelled(KEY, b"L1"), RequestLease) == []


def test_a_dead_worker_costs_a_retry_and_the_task_goes_first():
    q, _ = make()
    t1, t2 = task(1, retries=1), task(2)
    q.enqueue(t1)
    q.enqueue(t2)
    grant(q, b"L0")
    lease = t1.lease
    out = q.push_failed(t1, "UNAVAILABLE", "socket closed")
    assert of(out, ReturnLease) == [ReturnLease(lease, True)] and lease.dead
    assert t1.retries_left == 0 and t1.spec.attempt == 1
    out = grant(q, b"L1", worker="w:2")
    assert [p.entry for p in of(out, Push)] == [t1]  # the retried task runs first
    out = q.push_failed(t1, "UNAVAILABLE", "socket closed")
    fails = of(out, Fail)
    assert [f.entry for f in fails] == [t1] and isinstance(fails[0].error, exc.WorkerCrashedError)
    assert "2 attempt(s)" in str(fails[0].error)


def test_application_errors_are_retried_only_with_retry_exceptions():
    q, _ = make()
    plain, retried = task(1), task(2, retries=1, retry_exceptions=True)
    q.enqueue(plain)
    grant(q, b"L0")
    assert of(q.push_replied(plain, APP_ERROR), Complete) == [Complete(plain, APP_ERROR)]
    assert [p.entry for p in of(q.enqueue(retried), Push)] == [retried]  # the lingering lease
    out = q.push_replied(retried, APP_ERROR)
    assert of(out, Complete) == [] and retried.spec.attempt == 1
    assert [p.entry for p in of(out, Push)] == [retried]
    assert of(q.push_replied(retried, APP_ERROR), Complete) == [Complete(retried, APP_ERROR)]


def test_a_refused_spec_is_not_retried_even_with_retry_exceptions():
    """A worker refuses a malformed spec without running it: retrying the same spec would be
    refused again, so the error is the result at once, with every retry left."""
    from ember._private.transport.task_stream import refused_reply

    q, _ = make()
    t = task(1, retries=3, retry_exceptions=True)
    refused = refused_reply(t.spec, "/ember.CoreWorker/TaskStream: task 1: field 'name' is bad")
    assert refused.refused and refused.is_application_error
    q.enqueue(t)
    grant(q, b"L0")
    assert of(q.push_replied(t, refused), Complete) == [Complete(t, refused)]
    assert t.retries_left == 3 and t.spec.attempt == 0


def test_an_allowlist_retries_only_the_errors_the_classifier_accepts():
    seen: list[tuple[str, tuple]] = []

    def classify(reply: Any, allowlist: tuple) -> bool:
        seen.append((reply.error_message, allowlist))
        return reply.error_message == "listed"

    listed = core_worker_pb2.PushTaskReply(is_application_error=True, error_message="listed")
    other = core_worker_pb2.PushTaskReply(is_application_error=True, error_message="other")
    q, _ = make(classify=classify)
    t1 = task(1, retries=2, retry_exceptions=True, allowlist=(ConnectionError,))
    q.enqueue(t1)
    grant(q, b"L0")
    out = q.push_replied(t1, listed)  # listed: retried while retries last
    assert of(out, Complete) == [] and [p.entry for p in of(out, Push)] == [t1]
    out = q.push_replied(t1, other)  # not listed: done at once, retries left or not
    assert of(out, Complete) == [Complete(t1, other)] and t1.retries_left == 1
    assert seen == [("listed", (ConnectionError,)), ("other", (ConnectionError,))]
    t2 = task(2, retries=1, retry_exceptions=True, allowlist=(ConnectionError,))
    q.enqueue(t2)
    q.push_replied(t2, listed)
    assert of(q.push_replied(t2, listed), Complete) == [Complete(t2, listed)]  # retries spent
    assert len(seen) == 3
    # An empty list retries nothing and never asks; no allowlist retries any error unasked.
    t3, t4 = task(3, retry_exceptions=True, allowlist=()), task(4, retries=1, retry_exceptions=True)
    q.enqueue(t3)
    assert of(q.push_replied(t3, listed), Complete) == [Complete(t3, listed)]
    q.enqueue(t4)
    assert of(q.push_replied(t4, other), Complete) == [] and len(seen) == 3


def test_without_an_injected_classifier_an_allowlisted_error_is_not_retried():
    q, _ = make()
    t1 = task(1, retries=2, retry_exceptions=True, allowlist=(ConnectionError,))
    q.enqueue(t1)
    grant(q, b"L0")
    assert of(q.push_replied(t1, APP_ERROR), Complete) == [Complete(t1, APP_ERROR)]


def test_a_cancelled_task_fails_with_task_cancelled_error():
    q, _ = make()
    t1 = task(1)
    q.enqueue(t1)
    grant(q, b"L0")
    t1.cancelled = True
    fails = of(q.push_replied(t1, OK), Fail)
    assert isinstance(fails[0].error, exc.TaskCancelledError)


def test_an_infeasible_lease_fails_every_queued_task():
    q, _ = make()
    ts = [task(i) for i in range(3)]
    for t in ts:
        q.enqueue(t)
    out = q.lease_failed(KEY, b"L0", exc.TaskUnschedulableError("no node has 64 GPUs"))
    assert [f.entry for f in of(out, Fail)] == ts and q.queued(KEY) == 0
    assert q.lease_failed(KEY, b"L1", None) == []  # shutting down: nothing fails


def test_shutdown_returns_every_lease_and_cancels_every_request():
    q, _ = make()
    ts = [task(i) for i in range(3)]
    for t in ts:
        q.enqueue(t)
    grant(q, b"L0")
    out = q.shutdown()
    assert [r.lease.lease_id for r in of(out, ReturnLease)] == [b"L0"]
    assert {c.lease_id for c in of(out, CancelLeaseRequest)} == {b"L1", b"L2"}
    assert q.closing


# ---------------------------------------------------------------- pipelining, give-back, stealing
RETURNED = core_worker_pb2.PushTaskReply(returned_unstarted=True)


def test_pipelined_pushes_go_to_the_least_loaded_lease_up_to_the_limit():
    q, _ = make(inflight=3)
    ts = [task(i) for i in range(8)]
    for t in ts:
        q.enqueue(t)
    out = grant(q, b"L0", "w:1")
    assert [p.entry for p in of(out, Push)] == ts[:3]  # three in flight on the only worker
    out = grant(q, b"L1", "w:2")
    assert [p.entry for p in of(out, Push)] == ts[3:6]
    out = q.push_replied(ts[0], OK)  # w:1 has room again: the next queued task goes there
    assert [(p.lease.worker_address, p.entry) for p in of(out, Push)] == [("w:1", ts[6])]


def test_a_blocked_worker_gives_back_the_task_queued_behind_it_and_the_lease_is_held():
    """The deadlock case: A runs on the only worker and blocks on B, pushed behind it. B comes
    back unstarted: it is queued again (no attempt counted), not pushed to the blocked worker,
    and a new lease is asked for; B runs on the new worker, then A ends and the held lease takes
    work again."""
    q, _ = make(max_requests=1, inflight=2)
    a, b, c = task(1), task(2), task(3)
    q.enqueue(a)
    q.enqueue(b)
    out = grant(q, b"L0", "w:1")
    assert [p.entry for p in of(out, Push)] == [a, b]
    # b waits behind a: another worker is asked for at once (it would steal b).
    assert of(out, RequestLease) == [RequestLease(KEY, b"L1", "home:1")]
    out = q.push_replied(b, RETURNED)
    assert of(out, Push) == [] and of(out, Complete) == [] and of(out, ReturnLease) == []
    assert of(out, RequestLease) == []  # L1 is still on its way
    assert q.queued(KEY) == 1 and b.spec.attempt == 0 and b.retries_left == 3
    assert of(q.enqueue(c), Push) == []  # held: nothing more goes to the blocked worker
    out = grant(q, b"L1", "w:2")
    assert [(p.lease.worker_address, p.entry) for p in of(out, Push)] == [("w:2", b), ("w:2", c)]
    out = q.push_replied(a, OK)  # A ended: w:1 is not held any more
    assert of(out, Complete) == [Complete(a, OK)]
    d = task(4)
    assert [(p.lease.worker_address, p.entry) for p in of(q.enqueue(d), Push)] == [("w:1", d)]


def test_a_returned_task_that_was_cancelled_fails_as_cancelled():
    q, _ = make(inflight=2)
    a, b = task(1), task(2)
    q.enqueue(a)
    q.enqueue(b)
    grant(q, b"L0")
    b.cancelled = True
    out = q.push_replied(b, RETURNED)
    assert [type(f.error) for f in of(out, Fail)] == [exc.TaskCancelledError]
    assert q.queued(KEY) == 0


def test_a_new_idle_lease_steals_the_backlog_instead_of_going_back():
    q2, _ = make(max_requests=2, inflight=4)
    ts = [task(i) for i in range(4)]
    for t in ts:
        q2.enqueue(t)
    assert q2.request_started(KEY, b"L1") is not None  # both requests are on their way
    out = grant(q2, b"L0", "w:1")
    assert len(of(out, Push)) == 4  # the whole backlog went to the first worker
    out = q2.lease_granted(KEY, b"L1", "home:1", "w:2", [])
    assert of(out, ReturnLease) == [] and [g.lease.worker_address for g in of(out, GiveBack)] == ["w:1"]
    for t in ts[1:]:  # w:1 runs ts[0] and gives the other three back
        out = q2.push_replied(t, RETURNED)
    assert {t.lease.worker_address for t in ts[1:] if t.lease} == {"w:2"}


def test_an_idle_lease_steals_from_a_lease_with_a_backlog():
    q, _ = make(inflight=3)
    ts = [task(i) for i in range(4)]
    for t in ts:
        q.enqueue(t)
    grant(q, b"L0", "w:1")  # ts[0..2]
    grant(q, b"L1", "w:2")  # ts[3]
    out = q.push_replied(ts[3], OK)  # w:2 is idle, w:1 still holds two unstarted tasks
    assert [g.lease.worker_address for g in of(out, GiveBack)] == ["w:1"]
    assert of(out, ReturnLease) == []
    out = q.push_replied(ts[2], RETURNED)
    assert [(p.lease.worker_address, p.entry) for p in of(out, Push)] == [("w:2", ts[2])]
    # A steal that found nothing unstarted: the held lease is free again once a task ends.
    out = q.push_replied(ts[0], OK)
    assert of(out, Complete) == [Complete(ts[0], OK)]
    e = task(9)
    assert [p.lease.worker_address for p in of(q.enqueue(e), Push)] == ["w:1"]


def test_one_in_flight_per_worker_never_steals():
    q, _ = make(inflight=1)
    a, b = task(1), task(2)
    q.enqueue(a)
    q.enqueue(b)
    grant(q, b"L0", "w:1")
    grant(q, b"L1", "w:2")
    out = q.push_replied(b, OK)
    assert of(out, GiveBack) == []


def test_each_pending_lease_request_is_cancelled_once():
    q, _ = make(max_requests=3)
    ts = [task(i) for i in range(3)]
    for t in ts:
        q.enqueue(t)
    for lid in (b"L0", b"L1", b"L2"):
        assert q.request_started(KEY, lid) is not None
    q.lease_granted(KEY, b"L0", "home:1", "w:1", [])
    assert of(q.push_replied(ts[0], OK), CancelLeaseRequest) == []  # ts[2] still queued
    out = q.push_replied(ts[1], OK)  # ts[2] pushed: the queue is empty
    assert sorted(c.lease_id for c in of(out, CancelLeaseRequest)) == [b"L1", b"L2"]
    out = q.push_replied(ts[2], OK)
    assert of(out, CancelLeaseRequest) == []  # not sent twice
    assert of(q.enqueue(task(7)), CancelLeaseRequest) == []
    assert of(q.lease_cancelled(KEY, b"L1"), CancelLeaseRequest) == []
    # The worker is busy with task 7: a new request is made, L2 (being cancelled) not counted.
    assert len(of(q.enqueue(task(8)), RequestLease)) == 1


def test_when_a_pipelined_worker_dies_only_the_task_it_ran_costs_an_attempt():
    q, _ = make(max_requests=1, inflight=3)
    a, b, c = task(1, retries=0), task(2, retries=0), task(3, retries=0)
    for t in (a, b, c):
        q.enqueue(t)
    grant(q, b"L0", "w:1")
    out = q.push_failed(a, "UNAVAILABLE", "gone")  # a ran (the oldest unanswered): it fails
    assert [type(f.error) for f in of(out, Fail)] == [exc.WorkerCrashedError]
    assert of(out, ReturnLease)[0].disconnect is True
    out = q.push_failed(b, "UNAVAILABLE", "gone") + q.push_failed(c, "UNAVAILABLE", "gone")
    assert of(out, Fail) == []  # b and c never started: queued again, no attempt counted
    assert q.queued(KEY) == 2 and b.spec.attempt == 0 and c.spec.attempt == 0
    out = grant(q, b"L1", "w:2")
    assert [p.entry for p in of(out, Push)] == [b, c]  # their order kept


def test_a_task_pipelined_behind_a_running_one_asks_for_another_worker_which_steals_it():
    """slow then fast on one worker: fast must not wait for slow when another worker exists."""
    q, _ = make(inflight=4)
    slow, fast = task(1), task(2)
    q.enqueue(slow)
    q.enqueue(fast)
    out = grant(q, b"L0", "w:1")
    assert [p.entry for p in of(out, Push)] == [slow, fast]
    assert q.pending_requests(KEY) == {b"L1": "home:1"}  # the backlog of one asks for a worker
    out = grant(q, b"L1", "w:2")  # nothing queued: the new worker steals instead of going back
    assert [g.lease.worker_address for g in of(out, GiveBack)] == ["w:1"]
    out = q.push_replied(fast, RETURNED)
    assert [(p.lease.worker_address, p.entry) for p in of(out, Push)] == [("w:2", fast)]
    assert of(out, CancelLeaseRequest) == [] and q.pending_requests(KEY) == {}


def test_a_stealing_lease_is_kept_past_its_linger_time_until_the_tasks_come_back():
    q, clock = make(inflight=4)
    slow, fast = task(1), task(2)
    q.enqueue(slow)
    q.enqueue(fast)
    grant(q, b"L0", "w:1")
    out = grant(q, b"L1", "w:2")
    assert of(out, GiveBack) and of(out, SetTimer)
    clock.t += 1.0  # the give-back is slow to come back (a loaded worker)
    out = q.expire(clock.t)
    assert of(out, ReturnLease) == [] and of(out, SetTimer)  # still waiting for it
    out = q.push_replied(fast, RETURNED)
    assert [(p.lease.worker_address, p.entry) for p in of(out, Push)] == [("w:2", fast)]


def test_requests_beyond_what_the_cluster_holds_are_not_sent_once_a_grant_says_so():
    # A 2-CPU cluster: a backlog of 100 one-CPU tasks first asks for 10 workers (nothing
    # known yet); once a grant says the cluster holds 2 such leases, the owner keeps only one
    # request beyond its leases, instead of asking again for 10 that could only wait at the
    # raylet and be cancelled when the backlog drains.
    q, _ = make(max_requests=10)
    tasks = [task(i) for i in range(100)]
    out: list = []
    for t in tasks:
        out += q.enqueue(t)
    assert len(of(out, RequestLease)) == 10
    grant(q, b"L0", capacity=2)
    grant(q, b"L1", "w:2", capacity=2)
    pending = q.pending_requests(KEY)
    assert len(pending) == 8  # sent before the capacity was known: left to wait or be cancelled
    for lease_id in list(pending):
        q.lease_cancelled(KEY, lease_id)
    # the 8 gone, the cap holds: one request beyond the two leases
    assert len(q.pending_requests(KEY)) == 1
    # the backlog drains: the probe is cancelled, the leases linger
    out = []
    for t in tasks:
        out += q.push_replied(t, OK)
    assert len(of(out, CancelLeaseRequest)) == 1
    assert len(of(out, RequestLease)) == 0


def test_the_capacity_cap_keeps_one_request_pending_even_past_it():
    # Leases past the capacity (blocked workers lent their CPUs to the raylet, which granted
    # more): one request stays pending while tasks wait, so lent CPUs keep being used.
    q, _ = make(max_requests=10)
    for i in range(20):
        q.enqueue(task(i))
    for n, lease_id in enumerate(list(q.pending_requests(KEY))[:3]):
        grant(q, lease_id, f"w:{n}", capacity=1)
    for lease_id in list(q.pending_requests(KEY)):
        q.lease_cancelled(KEY, lease_id)
    assert len(q.leases(KEY)) == 3
    assert len(q.pending_requests(KEY)) == 1


def test_without_a_capacity_the_request_limit_alone_applies():
    q, _ = make(max_requests=4)
    for i in range(20):
        q.enqueue(task(i))
    grant(q, b"L0", capacity=0)  # a shape that needs nothing a node runs out of: no bound
    assert len(q.pending_requests(KEY)) == 4


def test_a_larger_capacity_in_a_later_grant_lets_more_requests_go():
    # A node joined: the next grant says so and the owner asks for more workers again.
    q, _ = make(max_requests=10)
    for i in range(50):
        q.enqueue(task(i))
    grant(q, b"L0", capacity=1)
    for lease_id in list(q.pending_requests(KEY)):
        q.lease_cancelled(KEY, lease_id)
    assert len(q.pending_requests(KEY)) == 1
    grant(q, next(iter(q.pending_requests(KEY))), "w:2", capacity=6)
    assert len(q.pending_requests(KEY)) == 6 + 1 - 2
