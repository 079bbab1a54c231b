"""The reporter side of task events (ember._private.task_events): hooks append to a bounded
buffer, drops are counted per job, a batch is built as columns, and the flag turns it all off.
No cluster: the module's buffer is used directly (the reporter thread is not started)."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from ember._private import task_events as te
from ember_common.config import Config
from ember_common.proto import common_pb2, core_worker_pb2, gcs_task_pb2

TA = gcs_task_pb2.TaskAttempt


@pytest.fixture()
def buffer(monkeypatch):
    """The hooks on, an empty buffer of 5 events, no reporter."""
    monkeypatch.setattr(te, "on", True)
    monkeypatch.setattr(te, "_max_events", 5)
    monkeypatch.setattr(te, "_events", type(te._events)())
    monkeypatch.setattr(te, "_infos", type(te._infos)())
    monkeypatch.setattr(te, "_dropped", {})
    return te


def spec(i: int, job: bytes = b"\x01\x00\x00\x00", **kw) -> common_pb2.TaskSpec:
    return common_pb2.TaskSpec(task_id=i.to_bytes(16, "big"), job_id=job, name=f"f{i}", **kw)


CORE = SimpleNamespace(worker_id="w1", node_id="n1", job_id=b"\x01\x00\x00\x00")


def test_hooks_append_transitions_and_the_batch_is_columnar(buffer):
    s = spec(1, trace_context={"traceparent": "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"})
    te.submitted(s)
    te.record(s, te.PENDING_NODE_ASSIGNMENT)
    s.attempt = 1  # a retry: the next events belong to attempt 1
    te.failed(s, TimeoutError("slow"))
    te.executed(spec(2), core_worker_pb2.PushTaskReply(is_application_error=True, error_message="ValueError: x"))
    items = [te._events.popleft() for _ in range(len(te._events))]
    infos = [te._infos.popleft() for _ in range(len(te._infos))]
    b = te._batch(CORE, items, infos, {})
    assert list(b.attempt) == [0, 0, 1, 0]
    assert list(b.state) == [TA.PENDING_ARGS_AVAIL, TA.PENDING_NODE_ASSIGNMENT, TA.FAILED, TA.FAILED]
    assert list(b.error_index) == [2, 3]
    assert list(b.error_type) == ["TimeoutError", "TASK_EXECUTION_EXCEPTION"]
    assert list(b.info_name) == ["f1"] and list(b.info_trace_id) == ["ab" * 16]
    assert b.time_ns[0] <= b.time_ns[1] and (b.worker_id, b.node_id) == ("w1", "n1")


def test_owner_failures_get_rays_error_type_names(buffer):
    from ember import exceptions as exc

    te.failed(spec(1), exc.TaskCancelledError("t"))
    te.failed(spec(2), exc.WorkerCrashedError())
    assert [e[4][0] for e in te._events] == ["TASK_CANCELLED", "WORKER_DIED"]


def test_past_the_bound_events_are_dropped_and_counted_per_job(buffer):
    for i in range(8):
        te.record(spec(i, job=b"\x01" if i % 2 else b"\x02"), te.RUNNING)
    te.submitted(spec(9, job=b"\x03"))
    assert len(te._events) == 5 and len(te._infos) == 0
    assert te._dropped == {"01": 2, "02": 1, "03": 1}
    b = te._batch(CORE, [], [], dict(te._dropped))
    assert dict(b.dropped_by_job) == {"01": 2, "02": 1, "03": 1}


def test_actor_creation_describes_itself_when_it_starts(buffer):
    creation = spec(1, actor_id=b"\x09" * 16, actor_creation=common_pb2.ActorCreationSpec(class_name="A"))
    te.started(creation)
    te.started(spec(2))  # a plain task's owner has described it already
    b = te._batch(CORE, list(te._events), list(te._infos), {})
    assert list(b.info_type) == [TA.ACTOR_CREATION_TASK] and list(b.state) == [TA.RUNNING, TA.RUNNING]


def test_off_means_nothing_is_kept(buffer, monkeypatch):
    monkeypatch.setattr(te, "on", False)
    te.submitted(spec(1))
    te.record(spec(1), te.RUNNING)
    assert not te._events and not te._dropped


def test_start_honours_the_flag_and_checks_its_settings(monkeypatch):
    monkeypatch.setattr(te, "on", False)
    off = SimpleNamespace(config=dataclasses.replace(Config(), task_events_enabled=False))
    te.start(off)  # type: ignore[arg-type]
    assert te.on is False and te._reporter is None
    bad = SimpleNamespace(config=dataclasses.replace(Config(), task_events_report_interval_s=0.0))
    with pytest.raises(ValueError, match="EMBER_TASK_EVENTS_REPORT_INTERVAL_S"):
        te.start(bad)  # type: ignore[arg-type]
