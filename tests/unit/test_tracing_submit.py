"""A task's compact submit span (ember_common/tracing_submit.py): the SUBMIT record encodes to
the message the SDK's encoder makes of the same span; the 25-byte TaskSpec.trace_parent links
the execute span (and what the task submits) to it exactly as the traceparent map did; sampling
is decided before anything is recorded; what the compact form does not cover (a tracestate,
baggage) takes the generic path and the trace_context map."""
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

from ember_common import otlp_encoding, tracing_submit
from ember_common.proto import common_pb2
from ember_common.tracing_export import expand, to_readable

RES = Resource.create({"service.name": "ember-driver", "process.pid": 1})
SCOPE = InstrumentationScope("ember", "1.0")


def test_submit_records_encode_as_the_sdk_encodes_their_spans():
    tp = bytes(range(1, 17)) + bytes(range(20, 28)) + b"\x03"
    task_id = bytes(range(24))
    local = SpanContext(int.from_bytes(tp[:16], "big"), 5, False, TraceFlags(1))
    remote = SpanContext(int.from_bytes(tp[:16], "big"), 6, True, TraceFlags(1))
    records = [("submit f", tp, None, 10, "ember.task_id", task_id),
               ("submit g", tp, local, 11, "ember.task_id", task_id),
               ("submit A.m", tp, remote, 12, "ember.actor_id", b"\xaa" * 16),
               ("x" * 200, tp, None, 13, "k" * 150, b"\x01" * 100),  # multi-byte lengths
               ("submit %s" + "%" * 28, tp, remote, 37, "%d" * 18 + "%", b"%" * 37)]  # '%' = 0x25 = 37
    spans = [to_readable(r, RES, SCOPE) for r in records]
    s = spans[0]
    assert (s.name, s.kind, s.start_time, s.end_time, dict(s.attributes)) == (
        "submit f", SpanKind.PRODUCER, 10, 10, {"ember.task_id": task_id.hex()})
    assert (s.context.trace_id, s.context.span_id, int(s.context.trace_flags), s.parent) == (
        local.trace_id, int.from_bytes(tp[16:24], "big"), 3, None)
    got = ExportTraceServiceRequest.FromString(otlp_encoding.encode_request(records, RES, SCOPE))
    assert got == sdk_encode(spans)
    # execute spans (an int parent, the task id first): encoded from a template per name and
    # the other attributes; twice each, so that the second comes from the cache
    tid = local.trace_id
    execs = [("execute f", tid, 21, 1, None, 11, SpanKind.CONSUMER, 11, 19,
              {"ember.task_id": "ab" * 24, "ember.job_id": "01000000", "ember.node_id": "n1",
               "ember.worker_id": "w" * 56, "ember.attempt": 0}, None, ()),
             ("execute %" + "x" * 28, tid, 22, 1, None, 12, SpanKind.CONSUMER, 1, 2,
              {"ember.task_id": "%" * 37, "%d" * 18 + "%": True, "f": 1.5, "n": -3}, None, ()),
             ("execute g", tid, 23, 1, None, 13, SpanKind.CONSUMER, 1, 2,
              {"ember.task_id": "cd" * 24, "l": (1, 2)}, None, ()),  # a sequence: the SDK encodes it
             ("execute h", tid, 24, 1, None, 14, SpanKind.CONSUMER, 1, 2,
              {"other": "first", "ember.task_id": "ef" * 24}, None, ())]
    execs += [(r[0], r[1], r[2] + 10, *r[3:9], {**r[9], "ember.task_id": "99" * 24}, *r[10:]) for r in execs]
    want = sdk_encode([to_readable(r, RES, SCOPE) for r in execs])
    assert ExportTraceServiceRequest.FromString(otlp_encoding.encode_request(execs, RES, SCOPE)) == want
    # among full RECORDs and SDK spans of the same batch
    full = expand(records[1])
    mixed = [records[0], full, spans[2]]
    assert ExportTraceServiceRequest.FromString(otlp_encoding.encode_request(mixed, RES, SCOPE)) == \
        sdk_encode([spans[0], spans[1], spans[2]])


def test_trace_parent_helpers():
    tp = bytes(range(1, 17)) + bytes(range(20, 28)) + b"\x01"
    spec = common_pb2.TaskSpec(trace_parent=tp)
    assert tracing_submit.traceparent(tp) == f"00-{tp[:16].hex()}-{tp[16:24].hex()}-01"
    assert tracing_submit.parse(tp) == (int.from_bytes(tp[:16], "big"), int.from_bytes(tp[16:24], "big"), 1, None)
    assert tracing_submit.trace_id_hex(spec) == tp[:16].hex()
    assert tracing_submit.carrier(spec) == {"traceparent": tracing_submit.traceparent(tp)}
    for bad in (tp[:24], tp + b"\x00", bytes(16) + tp[16:], tp[:16] + bytes(8) + b"\x01"):
        assert tracing_submit.parse(bad) is None
    old = common_pb2.TaskSpec(trace_context={"traceparent": "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"})
    assert tracing_submit.trace_id_hex(old) == "ab" * 16  # the map is still read
    assert tracing_submit.trace_id_hex(common_pb2.TaskSpec()) == ""


TASK = keep_spans("ember-driver") + textwrap.dedent("""
    import json, os
    from opentelemetry import baggage, context, trace
    from ember_common.proto import common_pb2
    from ember_common.tracing_export import expand, to_readable

    out = {"specs": []}
    for i in range(int(os.environ["N_TASKS"])):
        spec = common_pb2.TaskSpec(name="f", task_id=os.urandom(24))
        tracing.task_submitted(spec, "submit f")
        attrs = lambda: {"ember.task_id": spec.task_id.hex()}
        with tracing.task_span("execute f", spec.trace_context, attrs, spec.trace_parent) as sp:
            nested = common_pb2.TaskSpec(name="g", task_id=os.urandom(24))
            tracing.task_submitted(nested, "submit g")
            md = tracing.metadata_from(spec.trace_context, spec.trace_parent)
        out["specs"].append({"tp": spec.trace_parent.hex(), "map": dict(spec.trace_context),
                             "nested_tp": nested.trace_parent.hex(), "md": md,
                             "trace": tracing.trace_id_hex(spec)})
    # baggage: the generic path, the map
    token = context.attach(baggage.set_baggage("k", "v"))
    spec = common_pb2.TaskSpec(name="b", task_id=os.urandom(24))
    tracing.task_submitted(spec, "submit b")
    context.detach(token)
    out["baggage"] = {"tp": spec.trace_parent.hex(), "map": sorted(spec.trace_context)}
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
    res = tracing.tracing_spans._resource
    spans = [to_readable(x, res, None) if type(x) is tuple else x for x in got]
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
        assert len(tp) == 25 and t["map"] == {} and t["trace"] == t["tp"][:32]
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
    assert out["baggage"]["tp"] == "" and out["baggage"]["map"] == ["baggage", "traceparent"]
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
