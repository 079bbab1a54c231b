"""The reporter side of task events (ember._private.telemetry.task_events): the owner's hooks coalesce a
task's transitions into one record (the reply's times included), the executor keeps only what
its owner cannot see, a batch is columnar, open records are sent once per change, drops are
counted per job, and the flag turns it all off. No cluster: the module's tables are used
directly (the reporter thread is not started)."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from ember._private.owner.task_queue_types import TaskEntry
from ember._private.telemetry import task_events as te
from ember_common.config import Config
from ember_common.proto import common_pb2, core_worker_pb2, gcs_task_pb2

TA = gcs_task_pb2.TaskAttempt
ME = ("n1", "w1", 11)
WORKERS = {"10.0.0.2:7000": ("n2", "w2", 22)}


@pytest.fixture()
def buffer(monkeypatch):
    """The hooks on, empty tables of at most 5 records, no reporter."""
    monkeypatch.setattr(te, "on", True)
    monkeypatch.setattr(te, "_max_records", 5)
    monkeypatch.setattr(te, "_max_flat", 5 * te.WIDTH)
    for name in ("_tracked", "_running", "_workers", "_dropped"):
        monkeypatch.setattr(te, name, {})
    monkeypatch.setattr(te, "_closed", [])
    return te


def spec(i: int, job: bytes = b"\x01\x00\x00\x00", **kw) -> common_pb2.TaskSpec:
    return common_pb2.TaskSpec(task_id=i.to_bytes(16, "big"), job_id=job, name=f"f{i}", **kw)


def task(i: int, job: bytes = b"\x01\x00\x00\x00", **kw) -> TaskEntry:
    """A task the owner submitted: an entry in its table of tasks in flight (as submit does)."""
    entry = TaskEntry(spec(i, job, **kw), [], 0)
    te._tracked[entry.spec.task_id] = entry
    return entry


def n_open() -> int:
    return sum(1 for e in te._tracked.values() if e.ev is not None)


def closed() -> list[tuple]:
    return [tuple(te._closed[i:i + te.WIDTH]) for i in range(0, len(te._closed), te.WIDTH)]


def times(b: gcs_task_pb2.TaskEventBatch, i: int) -> dict[int, int]:
    return {s: t for s, t in enumerate(b.ts_ns[6 * i:6 * i + 6], 1) if t}


def test_a_task_is_one_record_with_every_state_the_reply_included(buffer, monkeypatch):
    from ember_common import tracing
    from ember_common.tracing import _context

    monkeypatch.setattr(tracing._state, "on", True)  # trace ids are read only in a tracing process
    headers = {"traceparent": "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01", "tracestate": "k=v"}
    s = task(1, trace_parent=_context.encode(headers))  # the header form (a tracestate)
    te.submitted(s)
    te.record(s, te.PENDING_NODE_ASSIGNMENT)
    te.leased("10.0.0.2:7000", "n2", "w2", 22)
    te.pushed(s, "10.0.0.2:7000")
    assert n_open() == 1 and not te._closed
    te.replied(s, core_worker_pb2.PushTaskReply(start_time_ns=5, end_time_ns=9))
    assert n_open() == 0 and len(closed()) == 1 and len(te._closed) == te.WIDTH
    assert not any(isinstance(v, common_pb2.TaskSpec) for v in closed()[0])  # the spec is freed
    b, by_job = te.encode(te.take({}), ME, te._workers)
    assert len(b.task_id) == 1 and by_job == {"01000000": 1}
    got = times(b, 0)
    assert list(got) == [TA.PENDING_ARGS_AVAIL, TA.PENDING_NODE_ASSIGNMENT, TA.SUBMITTED_TO_WORKER,
                         TA.RUNNING, TA.FINISHED]
    assert got[TA.PENDING_ARGS_AVAIL] <= got[TA.SUBMITTED_TO_WORKER] and (got[TA.RUNNING], got[TA.FINISHED]) == (5, 9)
    assert list(b.where) == [1] and (b.where_node_id[0], b.where_worker_id[0], b.where_pid[0]) == ("n2", "w2", 22)
    assert list(b.name) == ["f1"] and list(b.trace_parent) == [b"\xab" * 16]  # the header form's trace id
    assert not b.type and not b.actor_id  # optional columns: empty when every record has the default
    assert (b.node_id, b.worker_id, b.pid) == ME and not b.error_index


def test_the_compact_trace_context_is_reported_as_its_trace_id(buffer, monkeypatch):
    """A task submitted with tracing's compact context (TaskSpec.trace_parent, 25 bytes): its
    record and the batch carry the bytes as they are (no hex on the owner's side); the GCS's
    store reads the trace id from them."""
    from ember_common import tracing
    from ember_gcs.task_events import TaskEventStore, to_proto

    monkeypatch.setattr(tracing._state, "on", True)
    tp = bytes(range(1, 17)) + bytes(range(17, 25)) + b"\x01"
    traced, plain, bad = task(1, trace_parent=tp), task(2), task(3, trace_parent=b"\x01" * 7)
    for s in (traced, plain, bad):
        te.submitted(s)
        te.replied(s, core_worker_pb2.PushTaskReply(start_time_ns=5, end_time_ns=9))
    assert closed()[0][te.C_TRACE] == tp
    b, by_job = te.encode(te.take({}), ME, te._workers)
    assert list(b.trace_parent) == [tp, b"", b""] and not b.trace_id and not b.span_resource
    store = TaskEventStore()
    store.add_raw(b.SerializeToString(), by_job)
    rows = {a.info.name: to_proto(a) for a in store.query()[0]}
    assert {n: r.trace_id for n, r in rows.items()} == {"f1": tp[:16].hex(), "f2": "", "f3": ""}


def test_an_error_retried_is_its_attempts_failure_and_the_retry_a_new_record(buffer):
    s = task(1)
    te.submitted(s)
    te.pushed(s, "10.0.0.2:7000")
    err = core_worker_pb2.PushTaskReply(is_application_error=True, error_message="ValueError: x",
                                        start_time_ns=5, end_time_ns=6)
    te.replied(s, err)  # the push's reply (a retry may follow)
    s.spec.attempt = 1
    te.pushed(s, "10.0.0.2:7000")
    te.replied(s, err)  # retries exhausted: complete() sees it again
    te.failed(task(2), TimeoutError("slow"))
    assert not any(isinstance(v, common_pb2.TaskSpec) for v in te._closed)  # specs freed
    b, _ = te.encode(te.take({}), ME, WORKERS)
    assert list(b.attempt) == [0, 1, 0]
    assert [max(times(b, i)) for i in range(3)] == [TA.FAILED, TA.FAILED, TA.FAILED]
    assert list(b.error_index) == [0, 1, 2]
    assert list(b.error_type) == ["TASK_EXECUTION_EXCEPTION"] * 2 + ["TimeoutError"]
    assert list(b.where) == [1, 1, 0]  # spec(2) never reached a worker


def test_a_push_that_breaks_fails_the_attempt_and_owner_failures_get_rays_names(buffer):
    from ember import exceptions as exc

    s = task(1)
    te.submitted(s)
    te.push_failed(s, "UNAVAILABLE", "gone")
    te.failed(task(2), exc.TaskCancelledError("t"))
    te.failed(task(3), exc.WorkerCrashedError())
    b, _ = te.encode(te.take({}), ME, {})
    assert list(b.error_type) == ["WORKER_DIED", "TASK_CANCELLED", "WORKER_DIED"]
    assert "UNAVAILABLE: gone" in b.error_message[0]


def test_open_records_are_sent_once_per_change(buffer):
    s = task(1)
    te.submitted(s)
    sent: dict = {}
    assert len(te.take(sent)) == te.WIDTH  # pending: shown before it ends (one record, flat)
    assert te.take(sent) == []  # nothing moved
    te.pushed(s, "10.0.0.2:7000")
    r = te.take(sent)
    assert len(r) == te.WIDTH and r[te.C_TS + 2]  # a frozen copy: the hot path keeps its own
    te.replied(s, core_worker_pb2.PushTaskReply(start_time_ns=5, end_time_ns=9))
    assert len(te.take(sent)) == te.WIDTH and sent == {}


def test_the_executor_reports_only_running_tasks_and_actor_creations(buffer):
    creation = spec(1, actor_id=b"\x09" * 16, actor_creation=common_pb2.ActorCreationSpec(class_name="A"))
    plain, long = spec(2), spec(3)
    te.started(creation)
    te.started(plain)
    te.executed(plain, core_worker_pb2.PushTaskReply())  # its owner reports it
    te.started(long, 123)  # still running at the flush (since the time the executor took)
    sent: dict = {}
    b, _ = te.encode(te.take(sent), ME, {})
    assert list(b.name) == ["f1", "f3"] and list(b.type) == [TA.ACTOR_CREATION_TASK, TA.NORMAL_TASK]
    assert times(b, 1) == {TA.RUNNING: 123}
    assert [max(times(b, i)) for i in range(2)] == [TA.RUNNING, TA.RUNNING]
    assert list(b.where) == [1, 1] and list(b.where_worker_id) == ["w1"]
    te.executed(creation, core_worker_pb2.PushTaskReply())
    b, _ = te.encode(te.take(sent), ME, {})  # spec(3) was sent already
    assert list(b.name) == ["f1"] and max(times(b, 0)) == TA.FINISHED


def test_past_the_bound_tasks_are_dropped_and_counted_per_job(buffer):
    tasks = []
    for i in range(8):  # one after the other, as the owner submits them
        tasks.append(task(i, job=b"\x01" if i % 2 else b"\x02"))
        te.submitted(tasks[-1])
    assert n_open() == 5 and te._dropped == {"01": 2, "02": 1}
    te.pushed(tasks[7], "a")  # not recorded: its later hooks drop too
    assert n_open() == 5 and te._dropped == {"01": 3, "02": 1}


def test_the_batch_round_trips_and_off_means_nothing_is_kept(buffer, monkeypatch):
    te.submitted(task(1))
    b, _ = te.encode(te.take({}), ME, {})
    assert gcs_task_pb2.TaskEventBatch.FromString(b.SerializeToString()) == b
    assert te.encode([], ME, {}) == (gcs_task_pb2.TaskEventBatch(node_id="n1", worker_id="w1", pid=11), {})
    monkeypatch.setattr(te, "on", False)
    off = task(2)
    te.submitted(off)
    te.record(off, te.PENDING_NODE_ASSIGNMENT)
    te.started(spec(3))
    assert n_open() == 1 and off.ev is None and not te._running and not te._dropped


def test_what_the_reporter_encodes_the_gcs_store_reads_back(buffer):
    from ember_gcs.task_events import TaskEventStore, to_proto

    actor = task(2, actor_id=b"\x09" * 16)
    plain, fails = task(1), task(3)
    for s in (plain, actor, fails):
        te.submitted(s)
        te.pushed(s, "10.0.0.2:7000")
    te.replied(plain, core_worker_pb2.PushTaskReply(start_time_ns=5, end_time_ns=9))
    te.failed(fails, TimeoutError("slow"))
    b, by_job = te.encode(te.take({}), ME, WORKERS, traced=False)
    assert not b.trace_id and list(b.type) == [TA.NORMAL_TASK, TA.NORMAL_TASK, TA.ACTOR_TASK]
    store = TaskEventStore()
    store.add_raw(b.SerializeToString(), by_job)
    assert len(store.pending) == 1 and len(store) == 0
    rows = {a.info.name: to_proto(a) for a in store.query()[0]}
    assert {n: TA.State.Name(a.state) for n, a in rows.items()} == {
        "f1": "FINISHED", "f2": "SUBMITTED_TO_WORKER", "f3": "FAILED"}
    assert (rows["f1"].node_id, rows["f1"].worker_id, rows["f1"].pid) == WORKERS["10.0.0.2:7000"]
    assert rows["f1"].state_ts_ns["RUNNING"] == 5 and rows["f3"].error_type == "TimeoutError"
    assert rows["f2"].type == TA.ACTOR_TASK and rows["f2"].actor_id == b"\x09" * 16


def test_start_honours_the_flag_and_checks_its_settings(monkeypatch):
    monkeypatch.setattr(te, "on", False)
    off = SimpleNamespace(config=dataclasses.replace(Config(), task_events_enabled=False))
    te.start(off)  # type: ignore[arg-type]
    assert te.on is False and te._reporter is None
    bad = SimpleNamespace(config=dataclasses.replace(Config(), task_events_report_interval_s=0.0))
    with pytest.raises(ValueError, match="EMBER_TASK_EVENTS_REPORT_INTERVAL_S"):
        te.start(bad)  # type: ignore[arg-type]


def test_a_reply_with_no_open_record_is_recorded_from_the_reply_alone(buffer):
    te.replied(task(1), core_worker_pb2.PushTaskReply(start_time_ns=5, end_time_ns=9))  # events just on
    te.failed(task(2), TimeoutError("slow"))
    b, _ = te.encode(te.take({}), ME, {})
    assert times(b, 0) == {TA.RUNNING: 5, TA.FINISHED: 9} and list(b.where) == [0, 0]
    assert list(times(b, 1)) == [TA.FAILED] and te._EMPTY == (None, -1, 0, 0, 0, 0, 0, 0, None, None)


def test_the_record_lives_on_the_entry_and_a_closed_one_leaves_nothing_for_the_gc(buffer):
    import gc

    t = task(1)
    te.submitted(t)
    te.pushed(t, "10.0.0.2:7000")
    assert t.ev is not None and t.ev[te.WHERE] == "10.0.0.2:7000"  # no table entry of its own
    del te._tracked[t.spec.task_id]  # done in the owner's table (complete() pops it first)
    te.replied(t, core_worker_pb2.PushTaskReply(start_time_ns=5, end_time_ns=9))
    assert t.ev is None and len(te._closed) == te.WIDTH
    assert not any(gc.is_tracked(v) for v in te._closed)  # plain values: no tuple or list per record
    assert te.take({}) and te.take({}) == []  # taken once; no open record is left to show


def test_encode_refuses_a_flat_list_that_is_not_whole_records(buffer):
    te.submitted(task(1))
    flat = te.take({})
    with pytest.raises(ValueError, match="not whole records of 15"):
        te.encode(flat[:-1], ME, {})


# ------------------------------------------------------------ submit spans left to task events
def left_task(i: int) -> tuple[TaskEntry, bytes]:
    """A task whose root submit span was left to its record (_submit.left)."""
    tp = i.to_bytes(16, "big") + bytes((0x40 + i % 64,)) * 8 + b"\x01"
    entry = task(i, trace_parent=tp)
    entry.span_left = True
    return entry, tp


def traces(flat: list) -> dict[tuple[str, int], bytes]:
    """(name, attempt) -> its trace column value, of flat records."""
    return {(flat[i + te.C_NAME], flat[i + te.C_ATTEMPT]): flat[i + te.C_TRACE] for i in range(0, len(flat), te.WIDTH)}


@pytest.fixture()
def traced(buffer, monkeypatch):
    """The buffer, in a tracing process; submit spans recorded here are kept in the list returned."""
    from ember_common import tracing

    monkeypatch.setattr(tracing._state, "on", True)
    here: list = []
    monkeypatch.setattr(tracing, "record_submit_left", lambda spec, t: here.append((spec.name, t)))
    return here


def test_a_submit_span_goes_once_with_the_first_record_sent_closed_or_open(traced):
    """The first attempt's record carries the submit span (26th byte, bit 1) in the first
    batch that sends it: closed, or frozen while still open (its later records carry none);
    a retry's record never does."""
    addr = "10.0.0.2:7000"
    done, tp1 = left_task(1)  # closed before any batch
    te.submitted(done)
    te.replied(done, core_worker_pb2.PushTaskReply(start_time_ns=5, end_time_ns=9, exec_span_left=True))
    running, tp2 = left_task(2)  # still open at the batch
    te.submitted(running)
    te.pushed(running, addr)
    retried, tp3 = left_task(3)  # its first attempt's worker died
    te.submitted(retried)
    te.push_failed(retried, "UNAVAILABLE", "gone")
    retried.spec.attempt = 1
    te.pushed(retried, addr)
    plain = task(4, trace_parent=b"\x04" * 25)  # the owner recorded its span itself
    te.submitted(plain)
    te.replied(plain, core_worker_pb2.PushTaskReply(start_time_ns=5, end_time_ns=9))
    sent: dict = {}
    first = te.take(sent)
    assert traces(first) == {("f1", 0): tp1 + b"\x03",  # its execute span too
                             ("f2", 0): tp2 + b"\x02", ("f3", 0): tp3 + b"\x02", ("f3", 1): tp3,
                             ("f4", 0): b"\x04" * 25}
    assert te.spans_in(first) == 3
    te.replied(running, core_worker_pb2.PushTaskReply(start_time_ns=5, end_time_ns=9, exec_span_left=True))
    te.replied(retried, core_worker_pb2.PushTaskReply(start_time_ns=5, end_time_ns=9))
    assert traces(te.take(sent)) == {("f2", 0): tp2 + b"\x01", ("f3", 1): tp3}
    assert traced == []  # nothing recorded by the owner itself


def test_a_submit_span_whose_record_cannot_go_is_recorded_by_the_owner(traced, monkeypatch):
    """Past the bound of open records or of closed ones, or with task events stopped, the
    owner records the submit span itself (_submit.record_left), once."""
    entries = []
    for i in range(1, 8):  # one after the other, as the owner submits them
        entries.append(left_task(i)[0])
        te.submitted(entries[-1])
    assert n_open() == 5 and [n for n, _ in traced] == ["f6", "f7"]  # past the 5 open records
    monkeypatch.setattr(te, "_closed", [0] * te._max_flat)  # the closed records' buffer is full
    te.replied(entries[0], core_worker_pb2.PushTaskReply(start_time_ns=5, end_time_ns=9))
    te.failed(entries[1], TimeoutError("slow"))
    assert [n for n, _ in traced] == ["f6", "f7", "f1", "f2"]
    monkeypatch.setattr(te, "on", False)
    late, _ = left_task(9)
    te.submitted(late)
    assert [n for n, _ in traced][-1] == "f9" and len(traced) == 5
    assert all(t > 0 for _, t in traced)


def test_the_owners_loop_and_the_reporter_never_both_send_a_submit_span(traced, monkeypatch):
    """The loop closing records while the reporter freezes the open ones, the two threads
    switching every µs: every submit span goes exactly once (a record frozen and then closed,
    or closed while the reporter held it, carries it once)."""
    import sys
    import threading

    monkeypatch.setattr(te, "_max_records", 100_000)
    monkeypatch.setattr(te, "_max_flat", 100_000 * te.WIDTH)
    n = 20_000
    out: list = []
    stop = threading.Event()

    def reporter() -> None:
        sent: dict = {}
        while not stop.is_set():
            out.extend(te.take(sent))
        out.extend(te.take(sent))

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    thread = threading.Thread(target=reporter)
    thread.start()
    try:
        reply = core_worker_pb2.PushTaskReply(start_time_ns=5, end_time_ns=9)
        for i in range(n):
            e, _ = left_task(i)
            te.submitted(e)
            te.replied(e, reply)
            del te._tracked[e.spec.task_id]  # (as the submitter does when the task ends)
    finally:
        stop.set()
        thread.join(30)
        sys.setswitchinterval(old)
    carried = [out[i + te.C_TASK] for i in range(0, len(out), te.WIDTH)
               if len(out[i + te.C_TRACE]) == 26 and out[i + te.C_TRACE][25] & 2]
    assert len(carried) == len(set(carried)) == n and traced == []


def test_a_batch_with_spans_names_the_owners_resource(traced, monkeypatch):
    monkeypatch.setattr(te, "_resource_json", '{"service.name": "ember-driver", "process.pid": 11}')
    e, tp = left_task(1)
    te.submitted(e)
    b, _ = te.encode(te.take({}), ME, {})
    assert list(b.trace_parent) == [tp + b"\x02"] and b.span_resource == te._resource_json
    te.submitted(task(2, trace_parent=b"\x02" * 25))
    b, _ = te.encode(te.take({}), ME, {})
    assert not b.span_resource  # no spans: no resource
