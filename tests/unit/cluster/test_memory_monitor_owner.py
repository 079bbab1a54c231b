"""The owner's side of a worker's death with a known cause (task_queue.push_failed with the
raylet's answer): memory-monitor kills have their own retry budget (Ray's task_oom_retries) and
end in OutOfMemoryError; a dead node's task ends in NodeDiedError once its retries are used."""
from __future__ import annotations

import itertools

from ember import exceptions as exc
from ember._private.owner.task_queue import Fail, Push, TaskEntry, TaskQueue
from ember._private.owner.task_queue_types import NODE_DIED, OUT_OF_MEMORY, DeathCause
from ember_common.proto import common_pb2

KEY = (("CPU", 1.0),)
OOM = DeathCause(OUT_OF_MEMORY, "Task was killed due to the node running low on memory.")


def make(oom_retries: int = -1) -> TaskQueue:
    n = itertools.count()
    return TaskQueue("home:1", max_pending_lease_requests=10, max_tasks_in_flight_per_worker=1,
                     lease_linger_s=0.002, clock=lambda: 10.0, new_lease_id=lambda: b"L%d" % next(n),
                     task_oom_retries=oom_retries)


def task(max_retries: int) -> TaskEntry:
    spec = common_pb2.TaskSpec(task_id=b"\x01" * 16, name="t", max_retries=max_retries)
    return TaskEntry(spec, [], max_retries, KEY)


def run_on_new_lease(q: TaskQueue, t: TaskEntry, lease_id: bytes) -> None:
    assert q.request_started(KEY, lease_id) is not None
    out = q.lease_granted(KEY, lease_id, "home:1", f"w:{lease_id!r}", [], 0)
    assert [p.entry for p in out if isinstance(p, Push)] == [t]


def fails(out: list) -> list[BaseException]:
    return [i.error for i in out if isinstance(i, Fail)]


def test_oom_kills_retry_on_their_own_budget_then_fail_with_out_of_memory_error():
    q, t = make(oom_retries=2), task(max_retries=1)
    q.enqueue(t)
    for i in range(2):
        run_on_new_lease(q, t, b"L%d" % i)
        assert fails(q.push_failed(t, "UNAVAILABLE", "gone", OOM)) == []
    assert t.retries_left == 1 and t.spec.attempt == 2  # max_retries untouched
    run_on_new_lease(q, t, b"L2")
    [err] = fails(q.push_failed(t, "UNAVAILABLE", "gone", OOM))
    assert isinstance(err, exc.OutOfMemoryError) and "low on memory" in str(err)


def test_the_monitor_saying_fail_now_or_no_retries_fails_at_once():
    q, t = make(), task(max_retries=3)
    q.enqueue(t)
    run_on_new_lease(q, t, b"L0")
    [err] = fails(q.push_failed(t, "UNAVAILABLE", "gone", OOM._replace(fail_now=True)))
    assert isinstance(err, exc.OutOfMemoryError)
    q, t = make(), task(max_retries=0)  # not retriable: no OOM retries either (as Ray)
    q.enqueue(t)
    run_on_new_lease(q, t, b"L0")
    assert isinstance(fails(q.push_failed(t, "UNAVAILABLE", "gone", OOM))[0], exc.OutOfMemoryError)


def test_a_dead_node_retries_as_a_crash_then_fails_with_node_died_error():
    q, t = make(), task(max_retries=1)
    died = DeathCause(NODE_DIED, "The node running t() died")
    q.enqueue(t)
    run_on_new_lease(q, t, b"L0")
    assert fails(q.push_failed(t, "UNAVAILABLE", "gone", died)) == []
    run_on_new_lease(q, t, b"L1")
    [err] = fails(q.push_failed(t, "UNAVAILABLE", "gone", died))
    assert isinstance(err, exc.NodeDiedError) and "2 attempt(s)" in str(err)
    assert not isinstance(err, exc.WorkerCrashedError)
