"""The GCS's task-event store (ember_gcs/task_events.py): lazy ingest of serialized batches,
merging, bounds, drops, filters, summaries. Pure: batches in, attempts out; times are given,
no clock."""
from __future__ import annotations

import pytest

from ember_common import rpc
from ember_common.proto import gcs_task_pb2
from ember_gcs.task_events import TaskEventStore, check_filters, column, to_proto

TA = gcs_task_pb2.TaskAttempt
JOB_A, JOB_B = b"\x01\x00\x00\x00", b"\x02\x00\x00\x00"


def tid(i: int) -> bytes:
    return i.to_bytes(4, "big") + b"\x00" * 12


def batch(records: list[tuple], where: list[tuple] = (), infos: dict | None = None,
          errors: list[tuple] = ()) -> gcs_task_pb2.TaskEventBatch:
    """records: (task, attempt, {state: t}, where index); infos: task -> (job, name, type) (else
    JOB_A, "", NORMAL: a record that names nothing); where: (node, worker, pid); errors:
    (record index, type, msg)."""
    b = gcs_task_pb2.TaskEventBatch(worker_id="w1", node_id="n1", pid=7)
    for task, attempt, states, w in records:
        job, name, typ = (infos or {}).get(task, (JOB_A, "", TA.NORMAL_TASK))
        b.task_id.append(tid(task))
        b.attempt.append(attempt)
        b.ts_ns.extend([states.get(s, 0) for s in range(1, 7)])
        b.where.append(w)
        b.job_id.append(job)
        b.name.append(name)
        b.type.append(typ)
        b.actor_id.append(b"")
        b.trace_id.append("")
    for node, worker, pid in where:
        b.where_node_id.append(node)
        b.where_worker_id.append(worker)
        b.where_pid.append(pid)
    for i, t, m in errors:
        b.error_index.append(i)
        b.error_type.append(t)
        b.error_message.append(m)
    return b


def add(store: TaskEventStore, b: gcs_task_pb2.TaskEventBatch) -> None:
    """As the servicer does: bytes in, counted per job."""
    jobs: dict[str, int] = {}
    for j in b.job_id:
        jobs[j.hex()] = jobs.get(j.hex(), 0) + 1
    store.add_raw(b.SerializeToString(), jobs)


def owner_submits(store: TaskEventStore, task: int, name: str = "f", job: bytes = JOB_A, t: int = 100) -> None:
    add(store, batch([(task, 0, {TA.PENDING_ARGS_AVAIL: t, TA.PENDING_NODE_ASSIGNMENT: t + 1,
                                 TA.SUBMITTED_TO_WORKER: t + 2}, 0)], infos={task: (job, name, TA.NORMAL_TASK)}))


def ran(store: TaskEventStore, records: list[tuple], errors: list[tuple] = ()) -> None:
    """records: (task, attempt, {state: t}) that ran on worker w1 of node n1 (pid 7)."""
    add(store, batch([(*r, 1) for r in records], where=[("n1", "w1", 7)], errors=errors))


def test_owner_and_executor_reports_merge_in_any_order():
    s = TaskEventStore()
    # the executor's report arrives first (it flushes on its own schedule), without a name
    add(s, batch([(1, 0, {TA.RUNNING: 110, TA.FINISHED: 120}, 1)], where=[("n2", "w9", 42)]))
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
    ran(s, [(1, 0, {TA.FINISHED: 200})])
    ran(s, [(1, 0, {TA.FAILED: 210, TA.SUBMITTED_TO_WORKER: 999})],
        errors=[(0, "WorkerCrashedError", "the worker died")])
    [a], _ = s.query()
    assert a.state == TA.FAILED and a.state_ts_ns[TA.SUBMITTED_TO_WORKER] == 102
    assert (a.error_type, a.error_message) == ("WorkerCrashedError", "the worker died")


def test_retries_are_separate_attempts_sharing_the_task_info():
    s = TaskEventStore()
    owner_submits(s, 1, name="flaky")
    ran(s, [(1, 0, {TA.FAILED: 130}), (1, 1, {TA.SUBMITTED_TO_WORKER: 131, TA.RUNNING: 140})])
    rows, total = s.query()
    assert total == 2
    assert [(a.attempt, column(a, "state"), a.info.name) for a in rows] == [
        (1, "RUNNING", "flaky"), (0, "FAILED", "flaky")]  # newest first
    assert s.query([("attempt_number", "=", "1")])[1] == 1


def test_bound_evicts_finished_attempts_first_and_counts_drops_per_job():
    s = TaskEventStore(max_attempts=10)
    for i in range(5):
        owner_submits(s, i, job=JOB_A)
        ran(s, [(i, 0, {TA.RUNNING: 150, TA.FINISHED: 160})])
    s.merge_pending()  # (10 records wait at most, unread: a query merges them)
    for i in range(5, 15):
        owner_submits(s, i, job=JOB_B)  # still running: kept over the finished ones
    s.merge_pending()
    assert len(s) == 10
    assert s.dropped_by_job == {JOB_A.hex(): 5}
    assert {column(a, "job_id") for a in s.query()[0]} == {JOB_B.hex()}
    for i in range(15, 18):  # no finished attempt left: the oldest goes
        owner_submits(s, i, job=JOB_B)
    s.merge_pending()
    assert len(s) == 10 and s.num_dropped == 8
    assert s.dropped_by_job == {JOB_A.hex(): 5, JOB_B.hex(): 3}
    assert s.query([("task_id", "=", tid(5).hex())])[1] == 0
    assert len(s.infos) == 10 and len(s.attempts_of) == 10  # evicted tasks' infos freed too
    ran(s, [(0, 0, {TA.RUNNING: 170}), (5, 0, {TA.FINISHED: 171})])  # late reports of evicted ones
    assert len(s) == 10 and s.query([("task_id", "=", tid(0).hex())])[1] == 0 and s.num_dropped == 8
    owner_submits(s, 1)  # the owner's report of an evicted task: ignored, and its info not kept
    s.merge_pending()
    assert len(s) == 10 and len(s.infos) == 10
    # every index stays consistent with the store
    assert sum(len(v) for v in s.by_job.values()) == 10
    assert sum(len(v) for v in s.by_state.values()) == 10
    assert sum(n for c in s.counts.values() for n in c.values()) == 10


def test_a_batch_that_does_not_decode_or_is_ragged_is_dropped_whole_and_counted():
    s = TaskEventStore()
    b = batch([(1, 0, {TA.RUNNING: 1}, 0), (2, 0, {TA.RUNNING: 2}, 0)])
    del b.ts_ns[1]
    with pytest.raises(rpc.InvalidArgument, match="11 times for 2 records"):
        s.add(b)
    s.add_raw(b.SerializeToString(), {JOB_A.hex(): 2})
    s.add_raw(b"\xff\xff not a batch", {JOB_B.hex(): 1})
    add(s, batch([(1, 0, {TA.RUNNING: 1}, 3)]))  # a where index past its table
    assert s.query()[1] == 0 and s.bad_batches == 3 and "where index" in s.last_bad
    assert s.dropped_by_job == {JOB_A.hex(): 3, JOB_B.hex(): 1}
    with pytest.raises(rpc.InvalidArgument, match="negative count"):
        s.add_raw(b"", {JOB_A.hex(): -1})


def test_drops_reported_by_processes_are_counted():
    s = TaskEventStore()
    s.add_raw(b"", {}, {JOB_A.hex(): 40})
    s.add_raw(b"", {}, {JOB_A.hex(): 2, JOB_B.hex(): 1})
    assert s.dropped_by_job == {JOB_A.hex(): 42, JOB_B.hex(): 1} and s.num_dropped == 43


def test_batches_stay_bytes_until_a_query_and_the_oldest_go_past_the_budget():
    s = TaskEventStore(max_attempts=4)
    for i in range(3):
        owner_submits(s, i, job=JOB_A)
    assert len(s.pending) == 3 and len(s) == 0 and s.stored() == 3  # nothing decoded yet
    assert s.query()[1] == 3 and not s.pending and len(s) == 3  # the query merged them
    assert s.query()[1] == 3  # the merged view stays
    for i in range(3, 9):  # 6 more records than the 4 pending allowed: the oldest 2 go unread
        owner_submits(s, i, job=JOB_B)
    assert s.pending_records == 4 and s.dropped_by_job == {JOB_B.hex(): 2}
    rows, total = s.query()
    assert total == 4 and [a.task_id for a in rows] == [tid(8), tid(7), tid(6), tid(5)]
    small = TaskEventStore(max_pending_bytes=100)  # a byte budget too
    owner_submits(small, 1)
    owner_submits(small, 2)
    assert len(small.pending) == 1 and small.num_dropped == 1


def test_filters_limits_and_indexes():
    s = TaskEventStore()
    for i in range(30):
        owner_submits(s, i, name="even" if i % 2 == 0 else "odd", job=JOB_A if i < 20 else JOB_B, t=i * 10)
    ran(s, [(i, 0, {TA.RUNNING: 1000}) for i in range(0, 30, 3)])
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
    ran(s, [(0, 0, {TA.RUNNING: 1}), (1, 0, {TA.FINISHED: 2}), (4, 0, {TA.FAILED: 3})])
    assert s.summary() == {("f", TA.NORMAL_TASK): {TA.RUNNING: 1, TA.FINISHED: 1, TA.SUBMITTED_TO_WORKER: 2},
                           ("g", TA.NORMAL_TASK): {TA.FAILED: 1, TA.SUBMITTED_TO_WORKER: 1}}
    assert s.summary([("name", "=", "g")]) == {("g", TA.NORMAL_TASK): {TA.FAILED: 1, TA.SUBMITTED_TO_WORKER: 1}}


def test_a_jobs_end_fails_its_open_attempts_now_and_as_late_records_come():
    """As Ray's GCS on a driver's exit: the ended job's attempts not final yet are FAILED
    (WORKER_DIED, with why), finished ones stay, other jobs are untouched, and a record of the
    ended job arriving later is closed the same way."""
    store = TaskEventStore()
    owner_submits(store, 1, job=JOB_A)
    owner_submits(store, 2, job=JOB_A)
    add(store, batch([(2, 0, {TA.RUNNING: 110, TA.FINISHED: 120}, 0)]))
    owner_submits(store, 3, job=JOB_B)
    store.end_job(JOB_A, 500, "driver gone")
    by_task = {a.task_id: a for a in store.query()[0]}
    assert by_task[tid(1)].state == TA.FAILED and by_task[tid(1)].times[TA.FAILED - 1] == 500
    assert (by_task[tid(1)].error_type, by_task[tid(1)].error_message) == ("WORKER_DIED", "driver gone")
    assert by_task[tid(2)].state == TA.FINISHED and not by_task[tid(2)].error_type
    assert by_task[tid(3)].state == TA.SUBMITTED_TO_WORKER
    owner_submits(store, 4, job=JOB_A, t=600)  # a late record of the ended job
    late = next(a for a in store.query()[0] if a.task_id == tid(4))
    assert late.state == TA.FAILED and late.error_message == "driver gone"
    assert store.summary()[("f", TA.NORMAL_TASK)] == {TA.FAILED: 2, TA.FINISHED: 1, TA.SUBMITTED_TO_WORKER: 1}
