"""Spans made from task events (ember_common/tracing/_derived.py, _derived_export.py): the execute span id both the
worker and the GCS derive, the owner's batch marking the spans left to its records
(task_events.encode), and the GCS's export of them, execute spans under each worker's resource
and submit spans under the owner's, which must be what the worker or the owner would have
recorded (the SDK's encoding of the same span)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as sdk_encode
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanKind
from tracing_child import keep_spans

from ember._private.telemetry import task_events
from ember_common.proto import gcs_task_pb2
from ember_common.tracing import _derived, _derived_export
from ember_common.tracing._records import ExecRecord, to_readable

SCOPE = InstrumentationScope("ember", "1.0")
TA = gcs_task_pb2.TaskAttempt


def test_the_span_id_is_the_task_ids_tail_per_attempt():
    task_id = os.urandom(16)
    ids = [_derived.span_id(task_id, a) for a in range(50)]
    assert ids[0] == task_id[-8:]  # attempt 0: the random tail itself
    assert len(set(ids)) == 50 and all(len(i) == 8 for i in ids)  # every attempt its own
    assert _derived.span_id(task_id, 3) == _derived.span_id(task_id, 3)  # both sides agree
    assert _derived.span_id(bytes(16), 0) == (1).to_bytes(8, "big")  # never the invalid zero id


def _flat(i: int, tp: bytes, left: int, where: str | None = "10.0.0.1:7000", error=None,
          actor: bytes = b"", attempt: int = 0) -> list:
    """One closed record as task_events.replied writes it (left: the spans it carries,
    task_events.EXEC_LEFT | SUBMIT_LEFT)."""
    kind = TA.ACTOR_TASK if actor else TA.NORMAL_TASK
    t = 1_000_000 * i
    return [bytes((i,)) * 16, attempt, b"\x01\x00\x00\x00", f"f{i}", actor, kind,
            tp + task_events._FLAGS[int(left)] if left else tp, t + 1, t + 2, t + 3, t + 10, t + 20, 0, where, error]


def _batch(records: list) -> bytes:
    workers = {"10.0.0.1:7000": ("node-a", "worker-a", 41), "10.0.0.2:7000": ("node-b", "worker-b", 42)}
    b, _ = task_events.encode(records, ("node-d", "driver", 7), workers)
    return b.SerializeToString()


def _tp(i: int) -> bytes:
    return bytes((0xA0 + i,)) * 16 + bytes((0xB0 + i,)) * 8 + b"\x01"


def test_the_batch_marks_the_spans_left_to_it_and_the_gcs_reads_them_back():
    records = [*_flat(1, _tp(1), True), *_flat(2, _tp(2), False),  # 2: the worker recorded it
               *_flat(3, _tp(3), True, where="10.0.0.2:7000", actor=b"\xaa" * 16, attempt=2),
               *_flat(4, _tp(4), True)]
    b = gcs_task_pb2.TaskEventBatch.FromString(_batch(records))
    assert list(b.trace_parent) == [_tp(1) + b"\x01", _tp(2), _tp(3) + b"\x01", _tp(4) + b"\x01"]
    assert task_events.spans_in(records) == 3
    groups = dict(_derived.records(_batch(records)))
    assert set(groups) == {("worker", "node-a", 41), ("worker", "node-b", 42)}
    first, fourth = groups[("worker", "node-a", 41)]
    assert first == ExecRecord("execute f1", _tp(1), (b"\x01" * 16)[-8:], 1_000_010, 1_000_020,
                               b"\x01" * 16, b"\x01\x00\x00\x00", 0, b"", "node-a", "worker-a", None)
    assert fourth.name == "execute f4"
    (third,) = groups[("worker", "node-b", 42)]
    assert third.span_id == _derived.span_id(b"\x03" * 16, 2)
    assert third[5:11] == (b"\x03" * 16, b"\x01\x00\x00\x00", 2, b"\xaa" * 16, "node-b", "worker-b")
    # nothing left to the GCS: no columns, nothing to read
    none = gcs_task_pb2.TaskEventBatch.FromString(_batch(_flat(5, _tp(5), False)))
    assert list(none.trace_parent) == [_tp(5)] and _derived.records(none.SerializeToString()) == []


def test_a_malformed_batch_is_refused_by_name():
    b = gcs_task_pb2.TaskEventBatch.FromString(_batch(_flat(1, _tp(1), True)))
    b.trace_parent.append(_tp(2) + b"\x01")  # more trace parents than records
    with pytest.raises(ValueError, match="trace parents"):
        _derived.records(b.SerializeToString())


class Requests:
    """An exporter that takes records (as the OTLP/gRPC one does) and keeps the request bytes."""

    accepts_records = True

    def __init__(self) -> None:
        self.requests: list[bytes] = []

    def export(self, spans, extra: bytes = b"") -> SpanExportResult:
        assert not spans
        self.requests.append(extra)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def test_the_gcs_exports_each_span_under_its_workers_resource(monkeypatch):
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")  # only a flush or a full batch exports
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "3")
    sdk, raw = InMemorySpanExporter(), Requests()
    derived = _derived_export.DerivedSpans([sdk, raw], SCOPE)
    try:
        records = [*_flat(1, _tp(1), True), *_flat(2, _tp(2), True, where="10.0.0.2:7000"),
                   *_flat(3, _tp(3), False)]
        derived.add(_batch(records), 2)
        assert derived.force_flush(10)
        spans = sorted(sdk.get_finished_spans(), key=lambda s: s.name)
        assert [s.name for s in spans] == ["execute f1", "execute f2"]
        s = spans[0]
        assert s.kind == SpanKind.CONSUMER and s.parent.span_id == int.from_bytes(_tp(1)[16:24], "big")
        assert s.context.span_id == int.from_bytes((b"\x01" * 16)[-8:], "big")
        assert s.context.trace_id == int.from_bytes(_tp(1)[:16], "big") and s.parent.is_remote
        assert (s.start_time, s.end_time) == (1_000_010, 1_000_020)
        assert dict(s.attributes) == {"ember.task_id": "01" * 16, "ember.job_id": "01000000",
                                      "ember.node_id": "node-a", "ember.worker_id": "worker-a", "ember.attempt": 0}
        res = {sp.name: dict(sp.resource.attributes) for sp in spans}
        assert res["execute f1"]["service.name"] == "ember-worker" and res["execute f1"]["process.pid"] == 41
        assert res["execute f2"]["ember.node_id"] == "node-b" and res["execute f2"]["process.pid"] == 42
        # the OTLP bytes: the SDK's encoding of the same spans, one request per worker's resource
        assert len(raw.requests) == 2
        for request, span in zip(raw.requests, spans, strict=True):
            assert ExportTraceServiceRequest.FromString(request) == sdk_encode([span])
        # a full batch (3 spans waiting) goes without a flush
        derived.add(_batch([*_flat(4, _tp(4), True), *_flat(5, _tp(5), True)]), 2)
        derived.add(_batch(_flat(6, _tp(6), True)), 1)
        from ember.testing import wait_for

        wait_for(lambda: len(sdk.get_finished_spans()) == 5, timeout_s=10, what="a full batch's export")
        assert derived.exported == 5 and derived.dropped == 0
    finally:
        derived.shutdown()


def test_a_queue_past_its_bound_drops_the_oldest_batches_and_counts_them(monkeypatch):
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "4")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "100")
    sdk = InMemorySpanExporter()
    derived = _derived_export.DerivedSpans([sdk], SCOPE)
    try:
        for i in range(1, 4):  # 3 batches of 2 spans: the first one goes
            derived.add(_batch([*_flat(2 * i, _tp(i), True), *_flat(2 * i + 1, _tp(i), True)]), 2)
        # and then the second; this one is unreadable, and its claim of 1,000 spans is held
        # to what its 45 bytes could carry (1)
        derived.add(b"\xff\xff not a batch" + bytes(30), 1000)
        assert derived.force_flush(10)
        assert derived.dropped == 4 and derived.bad_batches == 1
        assert sorted(s.name for s in sdk.get_finished_spans()) == ["execute f6", "execute f7"]
    finally:
        derived.shutdown()


def test_a_derived_span_is_the_span_the_worker_records():
    """The GCS's span and the worker's EXEC record of the same task (its span id given) make
    the same SDK span, so the same OTLP bytes."""
    from opentelemetry.sdk.resources import Resource

    res = Resource.create({"service.name": "ember-worker", "process.pid": 41, "ember.node_id": "node-a"})
    ((key, (derived,)),) = _derived.records(_batch(_flat(1, _tp(1), True)))
    worker = ExecRecord("execute f1", _tp(1), _derived.span_id(b"\x01" * 16, 0), 1_000_010, 1_000_020,
                        b"\x01" * 16, b"\x01\x00\x00\x00", 0, b"", "node-a", "worker-a", None)
    assert derived == worker and key == ("worker", "node-a", 41)
    assert sdk_encode([to_readable(derived, res, SCOPE)]) == sdk_encode([to_readable(worker, res, SCOPE)])


def test_the_gcs_exports_a_submit_span_under_the_owners_resource(monkeypatch):
    """A record carrying its submit span gives the SUBMIT record the owner would have queued
    (PRODUCER, root, at PENDING_ARGS_AVAIL), exported under the resource the owner sent, with
    OTLP bytes equal to the SDK's encoding of that span; its execute span, when it carries it
    too, goes under the worker's resource. With no resource sent, the batch's process stands."""
    import json

    from opentelemetry.sdk.resources import Resource

    monkeypatch.setattr(task_events, "_resource_json", json.dumps(
        {"service.name": "my-driver", "process.pid": 7, "deployment": "test", "tags": ["a", "b"]}))
    records = [*_flat(1, _tp(1), task_events.SUBMIT_LEFT | task_events.EXEC_LEFT),
               *_flat(2, _tp(2), task_events.SUBMIT_LEFT, where=None)]  # still pending
    groups = dict(_derived.records(_batch(records)))
    owner = ("owner", task_events._resource_json, ("node-d", 7))
    assert set(groups) == {owner, ("worker", "node-a", 41)}
    assert groups[owner] == [("submit f1", _tp(1), None, 1_000_001, "ember.task_id", b"\x01" * 16),
                             ("submit f2", _tp(2), None, 2_000_001, "ember.task_id", b"\x02" * 16)]
    assert [r[0] for r in groups[("worker", "node-a", 41)]] == ["execute f1"]
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")
    sdk, raw = InMemorySpanExporter(), Requests()
    derived = _derived_export.DerivedSpans([sdk, raw], SCOPE)
    try:
        derived.add(_batch(records), 2)
        assert derived.force_flush(10)
        spans = {sp.name: sp for sp in sdk.get_finished_spans()}
        assert set(spans) == {"submit f1", "submit f2", "execute f1"}
        sub = spans["submit f1"]
        assert sub.kind == SpanKind.PRODUCER and sub.parent is None
        assert sub.context.span_id == int.from_bytes(_tp(1)[16:24], "big")  # the id the task carries
        assert spans["execute f1"].parent.span_id == sub.context.span_id
        assert sub.start_time == sub.end_time == 1_000_001 and dict(sub.attributes) == {"ember.task_id": "01" * 16}
        assert dict(sub.resource.attributes) == {"service.name": "my-driver", "process.pid": 7,
                                                 "deployment": "test", "tags": ("a", "b")}
        assert spans["execute f1"].resource.attributes["service.name"] == "ember-worker"
        owner_res = Resource({"service.name": "my-driver", "process.pid": 7, "deployment": "test",
                              "tags": ("a", "b")})
        expected = sdk_encode([to_readable(r, owner_res, SCOPE) for r in groups[owner]])
        assert ExportTraceServiceRequest.FromString(raw.requests[0]) == expected
    finally:
        derived.shutdown()
    monkeypatch.setattr(task_events, "_resource_json", "")
    ((who, _),) = _derived.records(_batch(_flat(3, _tp(3), task_events.SUBMIT_LEFT)))
    fallback = _derived_export.DerivedSpans([], SCOPE)
    try:
        assert dict(fallback._resource(who).attributes) == {"service.name": "ember-driver", "process.pid": 7,
                                                            "ember.node_id": "node-d"}
    finally:
        fallback.shutdown()


def test_a_process_leaves_spans_only_to_a_gcs_that_sends_them_where_it_would(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    here = _derived.announcement(["otlp"])
    assert here.startswith(b"1:") and here == _derived.announcement(["otlp"])
    assert here != _derived.announcement(["console"])
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://10.0.0.9:4317")
    assert _derived.announcement(["otlp"]) != here
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    monkeypatch.setenv("EMBER_TRACE_DIR", "/tmp/elsewhere")
    assert _derived.announcement(["otlp"]) != here


WORKER = keep_spans("ember-worker") + textwrap.dedent("""
    import json, os, time
    from opentelemetry import trace
    from ember_common.tracing import _derived, _exec
    from ember_common.proto import common_pb2
    from ember_common.tracing._records import RECORD_TYPES, to_readable

    def run(case):
        spec = common_pb2.TaskSpec(name="f", task_id=os.urandom(16), job_id=b"\\x02" * 4, attempt=1)
        _derived.state.on = case != "gcs_exports_none"
        tracing.task_submitted(spec, "submit f")
        n = len(got)
        p = tracing.exec_begin("execute f", spec, "n1", "w1", spec.trace_parent, time.time_ns())
        nested = common_pb2.TaskSpec(task_id=b"n" * 16)
        tracing.task_submitted(nested, "submit g")  # asks the CurrentExec for its context only
        if case == "touched":
            trace.get_current_span().set_attribute("user", "v")
        left = tracing.exec_finish(p, "ValueError: boom" if case == "failed" else None)
        if case == "cancelled_after_all":
            _exec.record_left(left)
        tracing.flush()
        spans = [to_readable(r, None, None) if type(r) in RECORD_TYPES else r for r in got[n:]]
        mine = [s for s in spans if s.name == "execute f"]
        return {"left": left is not None,
                "derived": _derived.span_id(spec.task_id, 1).hex(),
                "nested_parent": next(format(r[2].span_id, "016x") for r in got[n:]
                                      if type(r) in RECORD_TYPES and r[0] == "submit g"),
                "recorded": [{"sid": format(s.context.span_id, "016x"), "status": s.status.status_code.name == "ERROR",
                              "tp": s.parent.span_id == int.from_bytes(spec.trace_parent[16:24], "big")}
                             for s in mine]}

    print(json.dumps({c: run(c) for c in ("plain", "touched", "failed", "cancelled_after_all", "gcs_exports_none")}))
""")


def test_the_worker_leaves_an_untouched_span_and_records_any_other_under_the_same_id():
    """When its GCS exports execute spans (_derived.state.on) the worker's span has the
    derived id (a nested submission names it); ended without error and untouched, it is left
    (nothing recorded); touched, failed or taken back (record_left), the worker records it,
    under that same id; when the GCS exports none it records its own span with a random id, as
    before."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_TRACES_EXPORTER="console")
    r = subprocess.run([sys.executable, "-c", WORKER], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    for case in ("plain", "touched", "failed", "cancelled_after_all"):
        c = out[case]
        assert c["nested_parent"] == c["derived"], case
    assert out["plain"]["left"] and out["plain"]["recorded"] == []
    for case, error in (("touched", False), ("failed", True), ("cancelled_after_all", False)):
        c = out[case]
        assert c["left"] is (case == "cancelled_after_all"), case
        assert [(x["sid"], x["status"], x["tp"]) for x in c["recorded"]] == [(c["derived"], error, True)], case
    c = out["gcs_exports_none"]
    assert not c["left"]
    assert len(c["recorded"]) == 1 and c["recorded"][0]["sid"] == c["nested_parent"] != c["derived"]
