"""The GCS's task-event store (ember_gcs/task_events.py): merging, bounds, drops, filters,
summaries. Pure: batches in, attempts out; times are given, no clock."""
from __future__ import annotations

import pytest

from ember_common import rpc
from ember_common.proto import gcs_task_pb2
from ember_gcs.task_events import TaskEventStore, check_filters, column, to_proto

TA = gcs_task_pb2.TaskAttempt
JOB_A, JOB_B = b"\x01\x00\x00\x00", b"\x02\x00\x00\x00"


def tid(i: int) -> bytes:
    return i.to_bytes(4, "big") + b"\x00" * 12


def batch(events: list[tuple], infos: list[tuple] = (), worker: str = "w1", node: str = "n1", pid: int = 7,
          errors: list[tuple] = (), dropped: dict | None = None) -> gcs_task_pb2.TaskEventBatch:
    """events: (task, attempt, state, t); infos: (task, job, name, type); errors: (index, type, msg)."""
    b = gcs_task_pb2.TaskEventBatch(worker_id=worker, node_id=node, pid=pid, dropped_by_job=dropped or {})
    for task, attempt, state, t in events:
        b.task_id.append(tid(task))
        b.attempt.append(attempt)
        b.state.append(state)
        b.time_ns.append(t)
    for task, job, name, typ in infos:
        b.info_task_id.append(tid(task))
        b.info_job_id.append(job)
        b.info_name.append(name)
        b.info_type.append(typ)
        b.info_actor_id.append(b"")
        b.info_trace_id.append("")
    for i, t, m in errors:
        b.error_index.append(i)
        b.error_type.append(t)
        b.error_message.append(m)
    return b


def owner_submits(store: TaskEventStore, task: int, name: str = "f", job: bytes = JOB_A, t: int = 100) -> None:
    store.add(batch([(task, 0, TA.PENDING_ARGS_AVAIL, t), (task, 0, TA.PENDING_NODE_ASSIGNMENT, t + 1),
                     (task, 0, TA.SUBMITTED_TO_WORKER, t + 2)], [(task, job, name, TA.NORMAL_TASK)],
                    worker="driver", node="n0", pid=1))


def test_owner_and_executor_reports_merge_in_any_order():
    s = TaskEventStore()
    # the executor's report arrives first (it flushes on its own schedule)
    s.add(batch([(1, 0, TA.RUNNING, 110), (1, 0, TA.FINISHED, 120)], worker="w9", node="n2", pid=42))
    owner_submits(s, 1, name="square")
    [a], total = s.query()
    assert total == 1
    assert column(a, "state") == "FINISHED"  # a later report of an earlier state does not go back
    assert (a.info.name, a.node_id, a.worker_id, a.pid) == ("square", "n2", "w9", 42)
    assert a.state_ts_ns == {TA.PENDING_ARGS_AVAIL: 100, TA.PENDING_NODE_ASSIGNMENT: 101,
                             TA.SUBMITTED_TO_WORKER: 102, TA.RUNNING: 110, TA.FINISHED: 120}
    assert s.query([("name", "=", "square")])[1] == 1  # the index followed the late info
    p = to_proto(a)
    assert p.state_ts_ns["RUNNING"] == 110 and p.func_name == "square"


def test_a_repeated_state_keeps_its_first_time_and_failed_beats_finished():
    s = TaskEventStore()
    owner_submits(s, 1)
    s.add(batch([(1, 0, TA.FINISHED, 200)]))
    s.add(batch([(1, 0, TA.FAILED, 210), (1, 0, TA.SUBMITTED_TO_WORKER, 999)],
                errors=[(0, "WorkerCrashedError", "the worker died")]))
    [a], _ = s.query()
    assert a.state == TA.FAILED and a.state_ts_ns[TA.SUBMITTED_TO_WORKER] == 102
    assert (a.error_type, a.error_message) == ("WorkerCrashedError", "the worker died")


def test_retries_are_separate_attempts_sharing_the_task_info():
    s = TaskEventStore()
    owner_submits(s, 1, name="flaky")
    s.add(batch([(1, 0, TA.FAILED, 130), (1, 1, TA.SUBMITTED_TO_WORKER, 131), (1, 1, TA.RUNNING, 140)]))
    rows, total = s.query()
    assert total == 2
    assert [(a.attempt, column(a, "state"), a.info.name) for a in rows] == [
        (1, "RUNNING", "flaky"), (0, "FAILED", "flaky")]  # newest first
    assert s.query([("attempt_number", "=", "1")])[1] == 1


def test_bound_evicts_finished_attempts_first_and_counts_drops_per_job():
    s = TaskEventStore(max_attempts=10)
    for i in range(5):
        owner_submits(s, i, job=JOB_A)
        s.add(batch([(i, 0, TA.RUNNING, 150), (i, 0, TA.FINISHED, 160)]))
    for i in range(5, 15):
        owner_submits(s, i, job=JOB_B)  # still running: kept over the finished ones
    assert len(s) == 10
    assert s.dropped_by_job == {JOB_A.hex(): 5}
    assert {column(a, "job_id") for a in s.query()[0]} == {JOB_B.hex()}
    for i in range(15, 18):  # no finished attempt left: the oldest goes
        owner_submits(s, i, job=JOB_B)
    assert len(s) == 10 and s.num_dropped == 8
    assert s.dropped_by_job == {JOB_A.hex(): 5, JOB_B.hex(): 3}
    assert s.query([("task_id", "=", tid(5).hex())])[1] == 0
    assert len(s.infos) == 10 and len(s.attempts_of) == 10  # evicted tasks' infos freed too
    s.add(batch([(0, 0, TA.RUNNING, 170), (5, 0, TA.FINISHED, 171)]))  # late reports of evicted ones
    assert len(s) == 10 and s.query([("task_id", "=", tid(0).hex())])[1] == 0 and s.num_dropped == 8
    owner_submits(s, 1)  # the owner's report of an evicted task: ignored, and its info not kept
    assert len(s) == 10 and len(s.infos) == 10
    # every index stays consistent with the store
    assert sum(len(v) for v in s.by_job.values()) == 10
    assert sum(len(v) for v in s.by_state.values()) == 10
    assert sum(n for c in s.counts.values() for n in c.values()) == 10


def test_a_batch_with_ragged_columns_is_refused_whole():
    s = TaskEventStore()
    b = batch([(1, 0, TA.RUNNING, 1), (2, 0, TA.RUNNING, 2)])
    del b.time_ns[1]
    with pytest.raises(rpc.InvalidArgument, match="event columns differ"):
        s.add(b)
    assert len(s) == 0


def test_drops_reported_by_processes_are_counted():
    s = TaskEventStore()
    s.add(batch([], dropped={JOB_A.hex(): 40}))
    s.add(batch([], dropped={JOB_A.hex(): 2, JOB_B.hex(): 1}))
    assert s.dropped_by_job == {JOB_A.hex(): 42, JOB_B.hex(): 1} and s.num_dropped == 43


def test_filters_limits_and_indexes():
    s = TaskEventStore()
    for i in range(30):
        owner_submits(s, i, name="even" if i % 2 == 0 else "odd", job=JOB_A if i < 20 else JOB_B, t=i * 10)
    for i in range(0, 30, 3):
        s.add(batch([(i, 0, TA.RUNNING, 1000)]))
    rows, total = s.query([("job_id", "=", JOB_A.hex()), ("name", "=", "EVEN")], limit=3)
    assert total == 10 and len(rows) == 3
    assert [a.task_id for a in rows] == [tid(18), tid(16), tid(14)]
    assert s.query([("state", "=", "running")])[1] == 10
    assert s.query([("state", "!=", "RUNNING"), ("job_id", "=", JOB_B.hex())])[1] == 7
    assert s.query([("state", "=", "FINISHED")])[1] == 0
    assert s.query([("job_id", "=", "not-hex")])[1] == 0
    assert s.query([("node_id", "=", "n1")])[1] == 10  # RUNNING reports name the node
    assert s.query(limit=0)[1] == 30 and len(s.query(limit=0)[0]) == 30


def test_bad_filters_name_the_problem():
    with pytest.raises(rpc.InvalidArgument, match="'colour' is not supported"):
        check_filters([("colour", "=", "red")])
    with pytest.raises(rpc.InvalidArgument, match="predicate '>'"):
        check_filters([("state", ">", "RUNNING")])
    with pytest.raises(rpc.InvalidArgument, match="limit"):
        TaskEventStore().query(limit=-1)
    with pytest.raises(ValueError, match="positive"):
        TaskEventStore(0)


def test_summary_counts_follow_state_changes():
    s = TaskEventStore()
    for i in range(6):
        owner_submits(s, i, name="f" if i < 4 else "g")
    s.add(batch([(0, 0, TA.RUNNING, 1), (1, 0, TA.FINISHED, 2), (4, 0, TA.FAILED, 3)]))
    assert s.summary() == {("f", TA.NORMAL_TASK): {TA.RUNNING: 1, TA.FINISHED: 1, TA.SUBMITTED_TO_WORKER: 2},
                           ("g", TA.NORMAL_TASK): {TA.FAILED: 1, TA.SUBMITTED_TO_WORKER: 1}}
    assert s.summary([("name", "=", "g")]) == {("g", TA.NORMAL_TASK): {TA.FAILED: 1, TA.SUBMITTED_TO_WORKER: 1}}
