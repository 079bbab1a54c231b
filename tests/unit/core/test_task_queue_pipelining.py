"""Pipelining only where it cannot hurt (task_queue.py with task_durations.py): the duration
estimates, and the decision to push a task to a busy worker, with an injected clock and without
sockets."""
from __future__ import annotations

import itertools
import math

import pytest

from ember._private.owner.task_durations import TaskDurations
from ember._private.owner.task_queue import (
    GiveBack,
    Push,
    RequestLease,
    TaskEntry,
    TaskQueue,
)
from ember_common.proto import common_pb2, core_worker_pb2

KEY = (("CPU", 1.0),)
RETURNED = core_worker_pb2.PushTaskReply(returned_unstarted=True)


class Clock:
    def __init__(self) -> None:
        self.t = 10.0

    def __call__(self) -> float:
        return self.t


def make(inflight: int = 16, budget_s: float = 0.005,
         max_requests: int = 10) -> tuple[TaskQueue, Clock]:
    clock = Clock()
    n = itertools.count()
    return TaskQueue("home:1", max_pending_lease_requests=max_requests,
                     max_tasks_in_flight_per_worker=inflight, lease_linger_s=0.002, clock=clock,
                     new_lease_id=lambda: b"L%d" % next(n), pipeline_budget_s=budget_s), clock


_ids = itertools.count(1)


def task(fn: str = "f") -> TaskEntry:
    i = next(_ids)
    spec = common_pb2.TaskSpec(task_id=i.to_bytes(16, "big"), name=fn,
                               function=common_pb2.FunctionDescriptor(function_id=fn))
    return TaskEntry(spec, [], 3, KEY)


def ran(seconds: float) -> core_worker_pb2.PushTaskReply:
    """A reply whose worker ran the task for seconds."""
    start = 1_000_000_000_000
    return core_worker_pb2.PushTaskReply(start_time_ns=start,
                                         end_time_ns=start + int(seconds * 1e9))


def pushes(out: list) -> list[tuple[str, TaskEntry]]:
    return [(p.lease.worker_address, p.entry) for p in out if isinstance(p, Push)]


def grant(q: TaskQueue, lease_id: bytes, worker: str) -> list:
    assert q.request_started(KEY, lease_id) is not None
    return q.lease_granted(KEY, lease_id, "home:1", worker, [])


# ------------------------------------------------------------------ the estimate
def test_an_unknown_function_has_an_infinite_estimate_and_the_first_run_sets_it():
    d = TaskDurations()
    assert d.estimate("f") == math.inf
    assert d.observe("f", 0.002) == 0.002 and d.estimate("f") == 0.002
    assert d.estimate("g") == math.inf


def test_the_estimate_rises_fast_and_falls_slowly():
    d = TaskDurations()
    d.observe("f", 0.001)
    assert d.observe("f", 1.001) == pytest.approx(0.501)  # one slow run: half the gap
    d2 = TaskDurations()
    d2.observe("f", 1.0)
    assert d2.observe("f", 0.0) == pytest.approx(0.875)  # one quick run: an eighth


def test_reply_times_feed_the_estimate_and_a_task_that_did_not_run_does_not():
    d = TaskDurations()
    d.observe_reply("f", 0, 0)  # returned unstarted
    d.observe_reply("f", 5_000, 0)
    assert d.estimate("f") == math.inf
    d.observe_reply("f", 1_000_000, 1_250_000)
    assert d.estimate("f") == pytest.approx(250e-6)
    d.observe("f", -1.0)  # the worker's clock stepped back: ignored
    assert d.estimate("f") == pytest.approx(250e-6)


def test_the_estimates_keep_a_bounded_number_of_functions_oldest_forgotten_first():
    d = TaskDurations(max_functions=3)
    for fn in "abcd":
        d.observe(fn, 0.001)
    assert len(d) == 3 and d.estimate("a") == math.inf and d.estimate("d") == 0.001


# ------------------------------------------------------------------ the decision
def test_an_unknown_function_is_not_pipelined_so_a_burst_asks_for_a_worker_per_task():
    q, _ = make()
    ts = [task("new") for _ in range(4)]
    for t in ts:
        q.enqueue(t)
    assert len(q.pending_requests(KEY)) == 4  # a worker each
    out = grant(q, b"L0", "w:1")
    assert pushes(out) == [("w:1", ts[0])]  # one task, the rest wait for their own workers
    assert q.queued(KEY) == 3
    out = grant(q, b"L1", "w:2")
    assert pushes(out) == [("w:2", ts[1])]


def test_a_known_short_function_is_pipelined_up_to_the_limit():
    q, _ = make(inflight=4)
    q.durations.observe("f", 100e-6)
    ts = [task() for _ in range(6)]
    for t in ts:
        q.enqueue(t)
    out = grant(q, b"L0", "w:1")
    assert pushes(out) == [("w:1", t) for t in ts[:4]]
    out = q.push_replied(ts[0], ran(100e-6))
    assert pushes(out) == [("w:1", ts[4])]


def test_the_first_reply_makes_the_rest_of_a_burst_pipelined():
    q, _ = make(max_requests=1)
    ts = [task("burst") for _ in range(5)]
    for t in ts:
        q.enqueue(t)
    assert pushes(grant(q, b"L0", "w:1")) == [("w:1", ts[0])]
    out = q.push_replied(ts[0], ran(50e-6))
    assert pushes(out) == [("w:1", t) for t in ts[1:]]


def test_a_long_function_is_not_pipelined():
    q, _ = make()
    q.durations.observe("sleep", 0.5)
    ts = [task("sleep") for _ in range(3)]
    for t in ts:
        q.enqueue(t)
    assert pushes(grant(q, b"L0", "w:1")) == [("w:1", ts[0])]
    assert q.queued(KEY) == 2 and len(q.pending_requests(KEY)) == 2


def test_the_cap_scales_with_how_short_the_function_is():
    q, _ = make(budget_s=0.005)
    q.durations.observe("f", 0.002)  # 2 + 2 <= 5 ms, a third would make 6
    ts = [task() for _ in range(4)]
    for t in ts:
        q.enqueue(t)
    assert pushes(grant(q, b"L0", "w:1")) == [("w:1", ts[0]), ("w:1", ts[1])]


def test_a_function_that_turns_long_stops_being_pipelined():
    q, _ = make(max_requests=1)
    q.durations.observe("f", 100e-6)
    a, b, c, d = task(), task(), task(), task()
    q.enqueue(a)
    q.enqueue(b)
    assert pushes(grant(q, b"L0", "w:1")) == [("w:1", a), ("w:1", b)]
    q.push_replied(a, ran(0.8))  # this run was slow
    assert q.durations.estimate("f") > 0.005
    assert pushes(q.enqueue(c)) == []  # w:1 still runs b: c is not put behind it
    assert pushes(q.push_replied(b, ran(0.8))) == [("w:1", c)]
    assert pushes(q.enqueue(d)) == []


def test_a_short_task_does_not_go_behind_an_unknown_one_but_takes_an_idle_worker():
    q, _ = make()
    q.durations.observe("short", 100e-6)
    slow, quick = task("unknown"), task("short")
    q.enqueue(slow)
    assert pushes(grant(q, b"L0", "w:1")) == [("w:1", slow)]
    out = q.enqueue(quick)
    assert pushes(out) == [] and q.queued(KEY) == 1
    assert [r.lease_id for r in out if isinstance(r, RequestLease)] == [b"L1"]
    assert pushes(grant(q, b"L1", "w:2")) == [("w:2", quick)]


def test_nothing_more_goes_to_a_worker_whose_running_task_is_overdue():
    q, clock = make()
    q.durations.observe("f", 100e-6)
    a, b, c = task(), task(), task()
    q.enqueue(a)
    grant(q, b"L0", "w:1")
    clock.t += 0.004  # a short task still running after 4 ms: within the 5 ms budget
    assert pushes(q.enqueue(b)) == [("w:1", b)]
    clock.t += 0.002  # 6 ms: a may be long after all
    assert pushes(q.enqueue(c)) == [] and q.queued(KEY) == 1
    out = q.push_replied(a, ran(100e-6))  # a ended, b starts now: c may go behind it
    assert pushes(out) == [("w:1", c)]


def test_stealing_still_rebalances_a_pipelined_backlog():
    q, _ = make(max_requests=2)
    q.durations.observe("f", 100e-6)
    ts = [task() for _ in range(4)]
    for t in ts:
        q.enqueue(t)
    assert q.request_started(KEY, b"L1") is not None
    assert len(pushes(grant(q, b"L0", "w:1"))) == 4
    out = q.lease_granted(KEY, b"L1", "home:1", "w:2", [])
    assert [g.lease.worker_address for g in out if isinstance(g, GiveBack)] == ["w:1"]
    for t in ts[1:]:
        out = q.push_replied(t, RETURNED)
    assert {t.lease.worker_address for t in ts[1:] if t.lease} == {"w:2"}


def test_what_a_lease_holds_is_accounted_back_to_nothing():
    q, _ = make()
    q.durations.observe("f", 100e-6)
    ts = [task("f"), task("f"), task("g")]
    for t in ts:
        q.enqueue(t)
    grant(q, b"L0", "w:1")
    (lease,) = q.leases(KEY)
    assert lease.inflight == 2 and lease.est_s == pytest.approx(200e-6) and lease.long == 0
    q.push_replied(ts[0], ran(100e-6))
    q.push_replied(ts[1], ran(100e-6))  # g (unknown) then goes alone
    assert lease.inflight == 1 and lease.long == 1
    q.push_replied(ts[2], ran(100e-6))
    assert (lease.inflight, lease.est_s, lease.long) == (0, 0.0, 0)


@pytest.mark.parametrize("inflight,budget_s", [(1, 0.005), (16, 0.0)])
def test_one_in_flight_or_a_zero_budget_never_pipelines(inflight, budget_s):
    q, _ = make(inflight=inflight, budget_s=budget_s)
    q.durations.observe("f", 1e-6)
    ts = [task() for _ in range(3)]
    for t in ts:
        q.enqueue(t)
    assert pushes(grant(q, b"L0", "w:1")) == [("w:1", ts[0])]


@pytest.mark.parametrize("inflight,budget_s,name", [
    (0, 0.005, "EMBER_MAX_TASKS_IN_FLIGHT_PER_WORKER"),
    (16, -1.0, "EMBER_PIPELINE_BUDGET_S"),
    (16, math.nan, "EMBER_PIPELINE_BUDGET_S")])
def test_bad_settings_are_refused_naming_the_variable(inflight, budget_s, name):
    with pytest.raises(ValueError, match=name):
        make(inflight=inflight, budget_s=budget_s)
