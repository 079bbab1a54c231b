"""A task's lazy execute span (tracing.task_span: _spans, _light.TaskSpan) and the OTLP request
bytes (_otlp.encode_request): the lazy span is recorded as the span execute_span makes
(name, parent, kind, attributes, status), gives user spans and nested submissions itself as
parent, keeps what user code sets on it, records nothing when not sampled; the bytes decode,
with the OTLP protobuf classes, to the message the SDK's encoder makes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as sdk_encode
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState
from tracing_child import keep_spans

from ember_common.tracing import _otlp
from ember_common.tracing._records import SpanRecord, to_readable

DRIVER_RES = Resource.create({"service.name": "ember-driver", "process.pid": 1})
WORKER_RES = Resource.create({"service.name": "ember-worker", "process.pid": 2, "ember.node_id": "n1"})
SCOPE = InstrumentationScope("ember", "1.0", "https://schema/x")


def test_request_bytes_decode_to_the_sdk_encoders_message():
    remote = SpanContext(7 << 64, 99, True, TraceFlags(1), TraceState([("vendor", "x")]))
    records = [
        SpanRecord("submit f", (7 << 64) | 1, 11, 1, None, None, SpanKind.PRODUCER, 10, 10,
                   {"ember.task_id": "ab" * 24}, None, ()),
        # a task's execute span: an int parent (remote)
        SpanRecord("execute f", (7 << 64) | 1, 12, 1, None, 11, SpanKind.CONSUMER, 11, 19,
                   {"ember.task_id": "ab" * 24, "ember.job_id": "01000000", "ember.node_id": "n1",
                    "ember.worker_id": "w" * 56, "ember.attempt": 0},
                   Status(StatusCode.ERROR, "ValueError: boom"), ()),
        SpanRecord("execute g", 5 << 64, 77, 1, TraceState([("a", "b")]), remote, SpanKind.CONSUMER, 1, 2,
                   {"l": (1, 2), "f": 1.5, "b": True, "big": 1 << 62, "neg": -3, "k" * 130: "v" * 300},
                   Status(StatusCode.OK), ()),
        SpanRecord("with event", 9, 8, 1, None, None, SpanKind.INTERNAL, 3, 4, {},
                   None, (Event("exception", {"exception.type": "KeyError"}, 15),)),
    ]
    spans = [to_readable(r, DRIVER_RES, SCOPE) for r in records]
    want = sdk_encode(spans)
    got = ExportTraceServiceRequest.FromString(_otlp.encode_request(records, DRIVER_RES, SCOPE))
    assert got == want
    # SDK spans of another resource (another process's) are a group of their own
    other = to_readable(records[1], WORKER_RES, SCOPE)
    got = ExportTraceServiceRequest.FromString(_otlp.encode_request(
        [records[0], other, records[2]], DRIVER_RES, SCOPE))
    assert got == sdk_encode([spans[0], other, spans[2]]) and len(got.resource_spans) == 2
    # SDK spans (users' own) and records in one batch; equal resources are one group
    mixed = [spans[0], records[1], records[0], spans[2]]
    assert ExportTraceServiceRequest.FromString(
        _otlp.encode_request(mixed, DRIVER_RES, SCOPE)) == sdk_encode(
            [spans[0], spans[1], spans[0], spans[2]])
    assert _otlp.encode_request([], DRIVER_RES, SCOPE) == b""


TASK = keep_spans("ember-worker") + textwrap.dedent("""
    import json, os
    from opentelemetry import trace
    from ember_common.proto import common_pb2

    tracer = trace.get_tracer("user")
    calls = []

    def run(lazy, fail=False, touch=False, raises=False):
        spec = common_pb2.TaskSpec(name="f", task_id=os.urandom(24), job_id=b"\\x02" * 4)
        headers = {}
        tracing.submit_span("submit f", headers, **{"ember.task_id": spec.task_id.hex()})

        def attributes():
            calls.append(1)
            return {"ember.task_id": spec.task_id.hex(), "ember.job_id": spec.job_id.hex(),
                    "ember.attempt": 0, "ember.actor_id": None}

        cm = tracing.task_span("execute f", headers, attributes) if lazy else \\
            tracing.execute_span("execute f", headers, **attributes())
        kind = None
        try:
            with cm as sp:
                kind = type(sp).__name__
                built = getattr(sp, "_built", "n/a")
                if touch:
                    trace.get_current_span().set_attribute("user", "v")
                with tracer.start_as_current_span("user child"):
                    pass
                tracing.submit_span("submit g", {})
                if fail:
                    tracing.set_error(sp, "ValueError: boom")
                if raises:
                    raise KeyError("x")
        except KeyError:
            pass
        return {"tp": headers["traceparent"], "kind": kind, "built_before": built}

    out = {"lazy": run(True, fail=True), "sdk": run(False, fail=True), "touched": run(True, touch=True),
           "raised": run(True, raises=True)}
    headers = {}
    tracing.submit_span("submit f", headers)
    n = len(calls)
    with tracing.task_span("execute f", headers, lambda: calls.append(1) or {}) as sp:
        pass
    out["no_child_builds_nothing"] = sp._built is None and len(calls) == n + 1
    tracing.flush()
    from ember_common.tracing._records import RECORD_TYPES, to_readable
    spans = [to_readable(r, tracing._state.resource, None) if type(r) in RECORD_TYPES else r for r in got]
    out["spans"] = [{"name": s.name, "id": s.context.span_id, "trace": s.context.trace_id,
                     "parent": s.parent.span_id if s.parent else None,
                     "remote_parent": bool(s.parent and s.parent.is_remote),
                     "kind": s.kind.name, "attrs": dict(s.attributes), "status": s.status.status_code.name,
                     "error": s.status.description, "events": [e.name for e in s.events],
                     "duration": s.end_time - s.start_time} for s in spans]
    print(json.dumps(out))
""")


def _run(script: str, tmp_path, **env_extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_TRACES_EXPORTER="ember_file", EMBER_TRACE_DIR=str(tmp_path), **env_extra)
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_lazy_execute_span_is_recorded_as_execute_span_records_it(tmp_path):
    out = _run(TASK, tmp_path)
    groups: dict = {}
    for s in out["spans"]:  # per run: its submit span, execute span, user child, nested submit
        groups.setdefault(s["trace"], []).append(s)
    lazy, sdk, touched, raised = (groups[int(out[k]["tp"][3:35], 16)]
                                  for k in ("lazy", "sdk", "touched", "raised"))

    def shape(group):
        by = {s["name"]: s for s in group}
        assert len(by) == len(group) == 4, "one span each, no duplicate"
        sub, ex = by["submit f"], by["execute f"]
        assert ex["parent"] == sub["id"] and ex["remote_parent"] and ex["kind"] == "CONSUMER"
        assert by["user child"]["parent"] == ex["id"] and by["submit g"]["parent"] == ex["id"]
        assert ex["duration"] >= 0
        return sorted(by), {k: ex[k] for k in ("attrs", "status", "error", "events")}

    want = shape(sdk)
    assert shape(lazy)[0] == want[0]
    assert {**shape(lazy)[1], "attrs": None} == {**want[1], "attrs": None}
    assert set(shape(lazy)[1]["attrs"]) == {"ember.task_id", "ember.job_id", "ember.attempt"}
    assert want[1]["status"] == "ERROR" and want[1]["error"] == "ValueError: boom"
    assert out["lazy"]["kind"] == "TaskSpan" and out["lazy"]["built_before"] is None
    assert out["no_child_builds_nothing"]  # no SpanContext built; attributes() once, at the end
    # user code changed the span: kept (the span became a LightSpan), still one execute span
    t = {s["name"]: s for s in touched}["execute f"]
    assert t["attrs"]["user"] == "v" and "ember.task_id" in t["attrs"] and shape(touched)
    # an exception escaping the task: recorded, ERROR
    r = {s["name"]: s for s in raised}["execute f"]
    assert r["status"] == "ERROR" and r["error"] == "KeyError: 'x'" and r["events"] == ["exception"]


NOT_SAMPLED = textwrap.dedent("""
    import json
    from ember_common import tracing
    from ember_common.proto import common_pb2

    assert tracing.setup("ember-worker")
    headers = {}
    tracing.submit_span("submit f", headers)
    calls = []
    with tracing.task_span("execute f", headers, lambda: calls.append(1) or {}) as sp:
        sp.set_attribute("user", "v")
        flags = int(sp.get_span_context().trace_flags)
        recording = sp.is_recording()
    print(json.dumps({"queued": len(tracing._state.buffer._queue), "flags": flags,
                      "calls": len(calls), "recording": recording}))
""")


def test_a_task_not_sampled_records_nothing(tmp_path):
    out = _run(NOT_SAMPLED, tmp_path, OTEL_TRACES_SAMPLER="parentbased_always_off")
    assert out == {"queued": 0, "flags": out["flags"], "calls": 0, "recording": False}
    assert out["flags"] & 1 == 0
