"""Execute spans recorded by the owner (ember_common/tracing_owner.py) and the OTLP request
bytes (otlp_encoding.encode_request): the owner's span is the one the worker made before (name,
parent, kind, attributes, status, the worker's resource), the worker's lazy context gives user
spans and nested submissions that span as parent, and the bytes decode, with the OTLP protobuf
classes, to the message the SDK's encoder makes."""
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

from ember_common import otlp_encoding
from ember_common.tracing_export import to_readable
from ember_common.tracing_light import execute_span_id

DRIVER_RES = Resource.create({"service.name": "ember-driver", "process.pid": 1})
WORKER_RES = Resource.create({"service.name": "ember-worker", "process.pid": 2, "ember.node_id": "n1"})
SCOPE = InstrumentationScope("ember", "1.0", "https://schema/x")


def test_request_bytes_decode_to_the_sdk_encoders_message():
    remote = SpanContext(7 << 64, 99, True, TraceFlags(1), TraceState([("vendor", "x")]))
    records = [
        ("submit f", (7 << 64) | 1, 11, 1, None, None, SpanKind.PRODUCER, 10, 10,
         {"ember.task_id": "ab" * 24}, None, ()),
        # an owner-recorded execute span: int parent (remote), the worker's resource
        ("execute f", (7 << 64) | 1, 12, 1, None, 11, SpanKind.CONSUMER, 11, 19,
         {"ember.task_id": "ab" * 24, "ember.job_id": "01000000", "ember.node_id": "n1",
          "ember.worker_id": "w" * 56, "ember.attempt": 0},
         Status(StatusCode.ERROR, "ValueError: boom"), (), WORKER_RES),
        ("execute g", 5 << 64, 77, 1, TraceState([("a", "b")]), remote, SpanKind.CONSUMER, 1, 2,
         {"l": (1, 2), "f": 1.5, "b": True, "big": 1 << 62, "neg": -3, "k" * 130: "v" * 300},
         Status(StatusCode.OK), ()),
        ("with event", 9, 8, 1, None, None, SpanKind.INTERNAL, 3, 4, {},
         None, (Event("exception", {"exception.type": "KeyError"}, 15),)),
    ]
    spans = [to_readable(r, DRIVER_RES, SCOPE) for r in records]
    want = sdk_encode(spans)
    got = ExportTraceServiceRequest.FromString(otlp_encoding.encode_request(records, DRIVER_RES, SCOPE))
    assert got == want
    assert len(got.resource_spans) == 2  # the driver's spans and the worker's execute span
    worker = [rs for rs in got.resource_spans
              if any(a.key == "service.name" and a.value.string_value == "ember-worker"
                     for a in rs.resource.attributes)]
    assert [s.name for rs in worker for ss in rs.scope_spans for s in ss.spans] == ["execute f"]
    # SDK spans (users' own) and records in one batch; equal resources are one group
    mixed = [spans[0], records[1], records[0], spans[2]]
    assert ExportTraceServiceRequest.FromString(
        otlp_encoding.encode_request(mixed, DRIVER_RES, SCOPE)) == sdk_encode(
            [spans[0], spans[1], spans[0], spans[2]])
    assert otlp_encoding.encode_request([], DRIVER_RES, SCOPE) == b""


def test_execute_span_ids_differ_per_attempt_and_are_never_zero():
    ids = {execute_span_id(0x1234, a) for a in range(1000)}
    assert len(ids) == 1000 and 0 not in ids and all(0 < i < 1 << 64 for i in ids)
    assert execute_span_id(0x1234, 0) == execute_span_id(0x1234, 0) != execute_span_id(0x1235, 0)


OWNER = textwrap.dedent("""
    import json, os, time
    from opentelemetry import trace
    from opentelemetry.sdk.trace.export import SpanExportResult
    from ember_common import tracing
    from ember_common.proto import common_pb2, core_worker_pb2

    assert tracing.setup("ember-driver")
    got = []

    class Keep:
        accepts_records = True
        def export(self, batch):
            got.extend(batch)
            return SpanExportResult.SUCCESS
        def shutdown(self):
            pass

    tracing.tracing_spans._buffer.exporters = [Keep()]
    tracer = trace.get_tracer("user")

    def run(by_owner, fail, attempt=0, touch=False):
        spec = common_pb2.TaskSpec(name="f", task_id=b"\\x01" * 24, job_id=b"\\x02" * 4, attempt=attempt)
        (tracing.submit_task_span if by_owner else tracing.submit_span)(
            "submit f", spec.trace_context, **{"ember.task_id": spec.task_id.hex()})
        start = time.time_ns()
        attrs = {"ember.task_id": spec.task_id.hex(), "ember.job_id": spec.job_id.hex(),
                 "ember.node_id": "n1", "ember.worker_id": "w1", "ember.attempt": attempt,
                 "ember.actor_id": None}
        cm = tracing.owner_context(spec.trace_context, spec.attempt, "execute f", lambda: dict(attrs)) \\
            if by_owner else tracing.execute_span("execute f", spec.trace_context, **attrs)
        with cm as sp:
            lazy = getattr(sp, "_built", "n/a")
            if touch:
                trace.get_current_span().set_attribute("user", "v")
            with tracer.start_as_current_span("user child"):
                pass
            nested = common_pb2.TaskSpec()
            tracing.submit_task_span("submit g", nested.trace_context)
            if fail:
                tracing.set_error(sp, "ValueError: boom")
        reply = core_worker_pb2.PushTaskReply(start_time_ns=start, end_time_ns=time.time_ns(),
                                              is_application_error=fail,
                                              error_message="ValueError: boom" if fail else "")
        tracing.mark_reply(sp, reply)
        if by_owner:
            tracing.task_replied(spec, reply, "127.0.0.1:7")
        out_flags.append(reply.execute_span_recorded)
        return dict(spec.trace_context), lazy, dict(nested.trace_context)

    tracing.worker_leased("127.0.0.1:7", "n1", "w1", 4242)
    out_flags = []
    out = {"owner": run(True, True), "worker": run(False, True), "retry": run(True, False, attempt=1),
           "touched": run(True, True, touch=True)}
    out["recorded_flags"] = out_flags
    with tracing.owner_context(out["owner"][0], 0, "execute f", dict) as sp:
        out["lazy_unused"] = sp._built is None
    out["metadata"] = [k for k, _ in tracing.metadata_from(out["owner"][0])]
    tracing.flush()
    from ember_common.tracing_export import to_readable
    spans = [to_readable(r, tracing.tracing_spans._resource, None)
             if type(r) is tuple else r for r in got]
    out["spans"] = [{"name": s.name, "id": s.context.span_id, "trace": s.context.trace_id,
                     "parent": s.parent.span_id if s.parent else None,
                     "remote_parent": bool(s.parent and s.parent.is_remote),
                     "kind": s.kind.name, "attrs": dict(s.attributes), "status": s.status.status_code.name,
                     "error": s.status.description, "service": s.resource.attributes["service.name"],
                     "pid": s.resource.attributes.get("process.pid"),
                     "node": s.resource.attributes.get("ember.node_id"),
                     "duration": s.end_time - s.start_time} for s in spans]
    print(json.dumps(out))
""")


def _run(script: str, tmp_path, **env_extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_TRACES_EXPORTER="ember_file", EMBER_TRACE_DIR=str(tmp_path), **env_extra)
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_owners_execute_span_is_the_one_the_worker_made(tmp_path):
    out = _run(OWNER, tmp_path)
    spans = out["spans"]
    groups = {}
    for s in spans:  # per run: its submit span, execute span, user child, nested submit
        groups.setdefault(s["trace"], []).append(s)
    owner, worker, retry, touched = (groups[int(out[k][0]["traceparent"][3:35], 16)]
                                     for k in ("owner", "worker", "retry", "touched"))

    def shape(group):
        by = {s["name"]: s for s in group}
        sub, ex = by["submit f"], by["execute f"]
        assert ex["parent"] == sub["id"] and ex["remote_parent"] and ex["kind"] == "CONSUMER"
        assert by["user child"]["parent"] == ex["id"] and by["submit g"]["parent"] == ex["id"]
        assert ex["duration"] >= 0
        return sorted(by), {k: ex[k] for k in ("attrs", "status", "error")}

    assert shape(owner) == shape(worker)  # same names, links, attributes, status
    ex = next(s for s in owner if s["name"] == "execute f")
    assert ex["service"] == "ember-worker" and ex["pid"] == 4242 and ex["node"] == "n1"
    assert ex["status"] == "ERROR" and ex["error"] == "ValueError: boom"
    # the worker's span id is the one both sides derive; a retry gets another one
    submit_id = int(out["owner"][0]["traceparent"][36:52], 16)
    assert ex["id"] == execute_span_id(submit_id, 0)
    rex = next(s for s in retry if s["name"] == "execute f")
    assert rex["attrs"]["ember.attempt"] == 1 and rex["status"] == "UNSET"
    assert rex["id"] == execute_span_id(int(out["retry"][0]["traceparent"][36:52], 16), 1)
    # the owner's carrier is marked, the worker's context is built only when asked for
    assert out["owner"][0]["ember-owner-span"] == "1" and "ember-owner-span" not in out["worker"][0]
    assert out["owner"][1] is None and out["lazy_unused"]
    assert out["owner"][2]["ember-owner-span"] == "1"  # nested submissions are the owner's too
    assert out["metadata"] == ["traceparent"]  # the mark does not travel as gRPC metadata
    # The user's code changed the current span: the worker recorded it (one span, same id,
    # Ember's attributes and the user's, the error status), and the reply said so.
    assert out["recorded_flags"] == [False, False, False, True]
    tex = [s for s in touched if s["name"] == "execute f"]
    assert len(tex) == 1 and tex[0]["attrs"] == {**ex["attrs"], "user": "v"}
    assert tex[0]["id"] == execute_span_id(int(out["touched"][0]["traceparent"][36:52], 16), 0)
    assert tex[0]["status"] == "ERROR" and tex[0]["error"] == "ValueError: boom"
    assert shape(touched)[0] == shape(owner)[0]


NOT_SAMPLED = textwrap.dedent("""
    import json, time
    from ember_common import tracing
    from ember_common.proto import common_pb2, core_worker_pb2

    assert tracing.setup("ember-driver")
    tracing.worker_leased("127.0.0.1:7", "n1", "w1", 1)
    spec = common_pb2.TaskSpec(name="f")
    tracing.submit_task_span("submit f", spec.trace_context)
    with tracing.owner_context(spec.trace_context, 0, "execute f", dict) as sp:
        sp.set_attribute("user", "v")  # not sampled: still nothing recorded
        flags = int(sp.get_span_context().trace_flags)
    tracing.task_replied(spec, core_worker_pb2.PushTaskReply(start_time_ns=1, end_time_ns=2), "127.0.0.1:7")
    print(json.dumps({"queued": len(tracing.tracing_spans._buffer._queue), "flags": flags,
                      "tp": spec.trace_context["traceparent"]}))
""")


def test_a_task_not_sampled_records_nothing_on_either_side(tmp_path):
    out = _run(NOT_SAMPLED, tmp_path, OTEL_TRACES_SAMPLER="parentbased_always_off")
    assert out["queued"] == 0 and out["flags"] & 1 == 0 and int(out["tp"][-2:], 16) & 1 == 0
