"""A task's compact submit span (ember_common/tracing/_submit.py): the SubmitRecord encodes to
the message the SDK's encoder makes of the same span; the 25-byte TaskSpec.trace_parent links
the execute span (and what the task submits) to it exactly as the traceparent map did; sampling
is decided before anything is recorded; what the compact form does not cover (a tracestate,
baggage) takes the generic path and travels in trace_parent as headers (tracing/_context.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as sdk_encode
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
from tracing_child import keep_spans

from ember_common.proto import common_pb2
from ember_common.tracing import _context, _otlp, _submit
from ember_common.tracing._records import SpanRecord, SubmitRecord, to_readable
from ember_common.tracing._records import expand_submit as expand

RES = Resource.create({"service.name": "ember-driver", "process.pid": 1})
SCOPE = InstrumentationScope("ember", "1.0")


def test_submit_records_encode_as_the_sdk_encodes_their_spans():
    tp = bytes(range(1, 17)) + bytes(range(20, 28)) + b"\x03"
    task_id = bytes(range(24))
    local = SpanContext(int.from_bytes(tp[:16], "big"), 5, False, TraceFlags(1))
    remote = SpanContext(int.from_bytes(tp[:16], "big"), 6, True, TraceFlags(1))
    records = [SubmitRecord("submit f", tp, None, 10, "ember.task_id", task_id),
               SubmitRecord("submit g", tp, local, 11, "ember.task_id", task_id),
               SubmitRecord("submit A.m", tp, remote, 12, "ember.actor_id", b"\xaa" * 16),
               SubmitRecord("x" * 200, tp, None, 13, "k" * 150, b"\x01" * 100),  # multi-byte lengths
               SubmitRecord("submit %s" + "%" * 28, tp, remote, 37, "%d" * 18 + "%", b"%" * 37)]  # '%' = 0x25 = 37
    spans = [to_readable(r, RES, SCOPE) for r in records]
    s = spans[0]
    assert (s.name, s.kind, s.start_time, s.end_time, dict(s.attributes)) == (
        "submit f", SpanKind.PRODUCER, 10, 10, {"ember.task_id": task_id.hex()})
    assert (s.context.trace_id, s.context.span_id, int(s.context.trace_flags), s.parent) == (
        local.trace_id, int.from_bytes(tp[16:24], "big"), 3, None)
    got = ExportTraceServiceRequest.FromString(_otlp.encode_request(records, RES, SCOPE))
    assert got == sdk_encode(spans)
    # execute spans (an int parent, the task id first): encoded from a template per name and
    # the other attributes; twice each, so that the second comes from the cache
    tid = local.trace_id
    execs = [SpanRecord("execute f", tid, 21, 1, None, 11, SpanKind.CONSUMER, 11, 19,
              {"ember.task_id": "ab" * 24, "ember.job_id": "01000000", "ember.node_id": "n1",
               "ember.worker_id": "w" * 56, "ember.attempt": 0}, None, ()),
             SpanRecord("execute %" + "x" * 28, tid, 22, 1, None, 12, SpanKind.CONSUMER, 1, 2,
              {"ember.task_id": "%" * 37, "%d" * 18 + "%": True, "f": 1.5, "n": -3}, None, ()),
             SpanRecord("execute g", tid, 23, 1, None, 13, SpanKind.CONSUMER, 1, 2,
              {"ember.task_id": "cd" * 24, "l": (1, 2)}, None, ()),  # a sequence: the SDK encodes it
             SpanRecord("execute h", tid, 24, 1, None, 14, SpanKind.CONSUMER, 1, 2,
              {"other": "first", "ember.task_id": "ef" * 24}, None, ())]
    execs += [r._replace(span_id=r.span_id + 10, attributes={**r.attributes, "ember.task_id": "99" * 24}) for r in execs]
    want = sdk_encode([to_readable(r, RES, SCOPE) for r in execs])
    assert ExportTraceServiceRequest.FromString(_otlp.encode_request(execs, RES, SCOPE)) == want
    # among full RECORDs and SDK spans of the same batch
    full = expand(records[1])
    mixed = [records[0], full, spans[2]]
    assert ExportTraceServiceRequest.FromString(_otlp.encode_request(mixed, RES, SCOPE)) == \
        sdk_encode([spans[0], spans[1], spans[2]])


def test_trace_parent_helpers():
    tp = bytes(range(1, 17)) + bytes(range(20, 28)) + b"\x01"
    spec = common_pb2.TaskSpec(trace_parent=tp)
    assert _context.traceparent(tp) == f"00-{tp[:16].hex()}-{tp[16:24].hex()}-01"
    assert _context.parse_trace_parent(tp) == (int.from_bytes(tp[:16], "big"), int.from_bytes(tp[16:24], "big"), 1, None)
    assert _submit.trace_id_hex(spec) == tp[:16].hex()
    assert _submit.carrier(spec) == {"traceparent": _context.traceparent(tp)}
    for bad in (tp[:24], tp + b"\x00", bytes(16) + tp[16:], tp[:16] + bytes(8) + b"\x01"):
        assert _context.parse_trace_parent(bad) is None
    headers = {"traceparent": "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01", "tracestate": "k=v"}
    generic = common_pb2.TaskSpec(trace_parent=_context.encode(headers))
    assert len(generic.trace_parent) != 25 and _submit.carrier(generic) == headers
    assert _submit.trace_id_hex(generic) == "ab" * 16  # the header form is read too
    lone = {"traceparent": headers["traceparent"]}  # the generic path's: read back the generic way
    assert len(_context.encode(lone)) != 25 and _context.carrier(_context.encode(lone)) == lone
    short = {"baggage": "k=" + "v" * 14}  # 25 bytes as a line: padded, never taken for the compact form
    assert len(_context.encode(short)) == 26 and _context.carrier(_context.encode(short)) == short
    assert _context.encode({}) == b"" and _submit.carrier(common_pb2.TaskSpec()) == {}
    assert _submit.trace_id_hex(common_pb2.TaskSpec()) == ""


TASK = keep_spans("ember-driver") + textwrap.dedent("""
    import json, os
    from opentelemetry import baggage, context, trace
    from ember_common.proto import common_pb2
    from ember_common.tracing._records import expand_submit as expand
    from ember_common.tracing._records import to_readable

    out = {"specs": []}
    for i in range(int(os.environ["N_TASKS"])):
        spec = common_pb2.TaskSpec(name="f", task_id=os.urandom(24))
        tracing.task_submitted(spec, "submit f")
        attrs = lambda: {"ember.task_id": spec.task_id.hex()}
        with tracing.task_span("execute f", {}, attrs, spec.trace_parent) as sp:
            nested = common_pb2.TaskSpec(name="g", task_id=os.urandom(24))
            tracing.task_submitted(nested, "submit g")
            md = tracing.metadata_from(spec.trace_parent)
        out["specs"].append({"tp": spec.trace_parent.hex(),
                             "nested_tp": nested.trace_parent.hex(), "md": md,
                             "trace": tracing.trace_id_hex(spec)})
    # baggage: the generic path, its headers in trace_parent
    token = context.attach(baggage.set_baggage("k", "v"))
    spec = common_pb2.TaskSpec(name="b", task_id=os.urandom(24))
    tracing.task_submitted(spec, "submit b")
    context.detach(token)
    from ember_common.tracing import _context
    out["baggage"] = {"len": len(spec.trace_parent), "map": sorted(_context.carrier(spec.trace_parent)),
                      "md": sorted(k for k, _ in tracing.metadata_from(spec.trace_parent))}
    # a forked child draws ids of its own
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        s = common_pb2.TaskSpec(name="c")
        tracing.task_submitted(s, "submit c")
        os.write(w, s.trace_parent)
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(r, 25)
    s = common_pb2.TaskSpec(name="c")
    tracing.task_submitted(s, "submit c")
    out["fork_differs"] = child[:24] != s.trace_parent[:24]
    tracing.flush()
    res = tracing._state.resource
    from ember_common.tracing._records import RECORD_TYPES
    spans = [to_readable(x, res, None) if type(x) in RECORD_TYPES else x for x in got]
    out["spans"] = [{"name": s.name, "id": s.context.span_id, "trace": s.context.trace_id,
                     "flags": int(s.context.trace_flags),
                     "parent": s.parent.span_id if s.parent else None, "kind": s.kind.name,
                     "attrs": dict(s.attributes)} for s in spans]
    print(json.dumps(out))
""")


def _run(tmp_path, n: int = 3, **env_extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_TRACES_EXPORTER="ember_file", EMBER_TRACE_DIR=str(tmp_path), N_TASKS=str(n), **env_extra)
    r = subprocess.run([sys.executable, "-c", TASK], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_compact_context_links_submit_execute_and_nested_submit(tmp_path):
    out = _run(tmp_path)
    spans = out["spans"]
    for t in out["specs"]:
        tp = bytes.fromhex(t["tp"])
        assert len(tp) == 25 and t["trace"] == t["tp"][:32]
        assert t["md"] == [["traceparent", f"00-{t['tp'][:32]}-{t['tp'][32:48]}-{t['tp'][48:]}"]]
        trace_id, span_id = int.from_bytes(tp[:16], "big"), int.from_bytes(tp[16:24], "big")
        mine = {s["name"]: s for s in spans if s["trace"] == trace_id}
        assert sorted(mine) == ["execute f", "submit f", "submit g"]
        sub, ex, nested = mine["submit f"], mine["execute f"], mine["submit g"]
        assert sub["id"] == span_id and sub["parent"] is None and sub["kind"] == "PRODUCER"
        assert sub["attrs"] == ex["attrs"] and len(sub["attrs"]["ember.task_id"]) == 48
        assert ex["parent"] == span_id and ex["kind"] == "CONSUMER" and ex["flags"] & 1
        assert nested["parent"] == ex["id"] and nested["kind"] == "PRODUCER"
        assert t["nested_tp"][:32] == t["tp"][:32] and int(t["nested_tp"][32:48], 16) == nested["id"]
    assert len({t["tp"][32:48] for t in out["specs"]}) == len(out["specs"])  # fresh span ids
    assert out["baggage"]["len"] != 25 and out["baggage"]["map"] == out["baggage"]["md"] == ["baggage", "traceparent"]
    assert out["fork_differs"]


def test_sampling_is_decided_before_anything_is_recorded(tmp_path):
    off = _run(tmp_path / "off", OTEL_TRACES_SAMPLER="parentbased_always_off")
    assert all(int(t["tp"][48:], 16) & 1 == 0 and int(t["nested_tp"][48:], 16) & 1 == 0
               and t["nested_tp"][:32] == t["tp"][:32] for t in off["specs"])  # the decision travels
    assert off["spans"] == []
    ratio = _run(tmp_path / "ratio", n=200, OTEL_TRACES_SAMPLER="parentbased_traceidratio",
                 OTEL_TRACES_SAMPLER_ARG="0.25")
    bound = round(0.25 * (1 << 64))
    recorded = {s["trace"] for s in ratio["spans"] if s["name"] == "submit f"}
    for t in ratio["specs"]:
        low = int(t["tp"][16:32], 16)
        sampled = int(t["tp"][48:], 16) & 1
        assert sampled == (low < bound) and (int(t["tp"][:32], 16) in recorded) == bool(sampled)
    assert 10 < len(recorded) < 110
