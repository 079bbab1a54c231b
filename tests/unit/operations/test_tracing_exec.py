"""A task's execute span in its cheapest form (ember_common/tracing/_exec.py, the worker's
`tracing.task_executing`) and the span buffer exporting full batches only: the EXEC record
encodes as the SDK encodes the span it stands for; the span is recorded as the lazy
`tracing.task_span` records it (name, parent, kind, attributes, status), is the parent of user
spans and nested submissions, keeps what user code sets on it, records nothing when not
sampled, and so is the executor's cheaper way for a thread's task (`tracing.exec_begin`: the
thread's CurrentExec, idle between tasks); a partial batch waits for more spans, the schedule or a flush."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as sdk_encode
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Status, StatusCode
from tracing_child import keep_spans

from ember_common.tracing import _otlp
from ember_common.tracing._buffer import SpanBuffer
from ember_common.tracing._records import (
    ExecRecord,
    SubmitRecord,
    expand_exec,
    to_readable,
)

RES = Resource.create({"service.name": "ember-worker", "process.pid": 2, "ember.node_id": "n1"})
SCOPE = InstrumentationScope("ember", "1.0", "https://schema/x")
TP = bytes(range(1, 17)) + bytes(range(17, 25)) + b"\x01"  # trace id, parent span id, sampled


def exec_rec(i: int, actor: bytes = b"", status=None, attempt: int = 0, name: str = "execute f"):
    return ExecRecord(name, TP, bytes((0, 0, 0, 0, 0, 0, 1, i)), 100 + i, 200 + i,
                      bytes((i,)) * 24, b"\x01\x00\x00\x00", attempt, actor, "n" * 56, "w" * 56, status)


def test_exec_records_encode_as_the_sdk_encodes_their_spans():
    records = [exec_rec(1), exec_rec(2), exec_rec(3, actor=b"\xaa" * 16), exec_rec(4, attempt=3),
               exec_rec(5, status=Status(StatusCode.ERROR, "ValueError: boom")),
               exec_rec(6, name="execute A.m%s")]  # a % in the name: the template escapes it
    want = sdk_encode([to_readable(r, RES, SCOPE) for r in records])
    got = ExportTraceServiceRequest.FromString(_otlp.encode_request(records, RES, SCOPE))
    assert got == want
    span = got.resource_spans[0].scope_spans[0].spans[2]
    assert span.parent_span_id == TP[16:24] and span.trace_id == TP[:16] and span.span_id[-1] == 3
    attrs = {a.key: a.value for a in span.attributes}
    assert attrs["ember.actor_id"].string_value == "aa" * 16 and attrs["ember.task_id"].string_value == "03" * 24
    assert "ember.actor_id" not in {a.key for a in got.resource_spans[0].scope_spans[0].spans[0].attributes}
    # the same bytes as the RECORD it expands to (the template and the field-by-field path agree)
    for r in records:
        assert _otlp.encode_request([r], RES, SCOPE) == _otlp.encode_request(
            [expand_exec(r)], RES, SCOPE)


def test_runs_of_one_template_encode_as_the_sdk_encodes_them():
    """A batch is mostly runs of records of one template (one function's tasks): the encoder
    keeps the run's template; a record of another template (another job, attempt, name, id
    length, a submit with a parent) in the middle of a run, and the run again after it, are
    each encoded as the SDK encodes them, in the batch's order."""
    from opentelemetry.trace import SpanContext, TraceFlags

    parent = SpanContext(int.from_bytes(TP[:16], "big"), 9, True, TraceFlags(1))
    sub = [SubmitRecord("submit f", TP[:16] + bytes((0, 0, 0, 0, 0, 0, 2, i)) + b"\x01", None, 300 + i, "ember.task_id",
            bytes((i,)) * 24) for i in range(6)]
    records = [*[exec_rec(i) for i in range(1, 4)], exec_rec(4, attempt=1), exec_rec(5), sub[0], sub[1],
               exec_rec(6, actor=b"\xaa" * 16), sub[2], sub[3]._replace(name="submit g"), sub[4],
               sub[5]._replace(name="submit f", parent=parent), sub[5],
               exec_rec(7)._replace(task_id=b"\x07" * 16),  # a shorter task id
               exec_rec(8), exec_rec(9, name="execute g"), exec_rec(10)]
    want = sdk_encode([to_readable(r, RES, SCOPE) for r in records])
    got = ExportTraceServiceRequest.FromString(_otlp.encode_request(records, RES, SCOPE))
    assert got == want
    assert len(got.resource_spans[0].scope_spans[0].spans) == len(records)


def test_the_default_batch_is_2048_and_sdk_spans_go_512_at_a_time(monkeypatch):
    """Per-task spans are exported 1024 to a request (a fixed cost per export, spread over
    more spans); a batch holding more than 512 other spans (the SDK's, users' own) goes in
    requests of 512, as the SDK's processor sends them, unless OTEL_BSP_MAX_EXPORT_BATCH_SIZE
    says otherwise."""
    from opentelemetry.sdk.trace import TracerProvider

    monkeypatch.delenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", raising=False)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")
    keep = Keep()
    buf = SpanBuffer([keep], resource=RES)
    sdk_span = TracerProvider().get_tracer("t").start_span("user")
    sdk_span.end()
    try:
        assert (buf.batch, buf.sdk_batch) == (2048, 512)
        for i in range(2048):
            buf.add_record(exec_rec(i % 256))
        assert _wait(lambda: keep.batches == [2048])  # a full batch goes at once
        buf.add_record(sdk_span)  # a few SDK spans among records: one request
        for i in range(1000):
            buf.add_record(exec_rec(i % 256))
        assert buf.force_flush(5000) and keep.batches == [2048, 1001]
        for i in range(400):  # more than 512 SDK spans: 512 to a request
            buf.add_record(sdk_span if i % 2 else exec_rec(i % 256))
            buf.add_record(sdk_span)
        assert buf.force_flush(5000) and keep.batches == [2048, 1001, 512, 288]
    finally:
        buf.shutdown()
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1000")
    buf = SpanBuffer([keep], resource=RES)
    try:
        assert (buf.batch, buf.sdk_batch) == (1000, 1000)
    finally:
        buf.shutdown()


def test_the_wake_never_blocks_and_is_taken_once():
    from ember_common.tracing._buffer import Wake as _Wake

    w = _Wake()
    assert w.wait(0.01) is False  # not set: the timeout
    w.set()
    w.set()  # set twice: still one wake
    assert w.wait(0.01) is True and w.wait(0.01) is False
    woken = []
    t = threading.Thread(target=lambda: woken.append(w.wait(10)))
    t.start()
    time.sleep(0.05)
    w.set()
    t.join(5)
    assert woken == [True]


CHILD = keep_spans("ember-worker") + textwrap.dedent("""
    import contextlib, json, os, time
    from opentelemetry import trace
    from ember_common.tracing import _exec
    from ember_common.tracing._records import task_attributes
    from ember_common.proto import common_pb2

    tracer = trace.get_tracer("user")

    @contextlib.contextmanager
    def begun(spec, errors):
        # the executor's way for a thread's synchronous task (tracing.exec_begin / exec_finish)
        p = tracing.exec_begin("execute f", spec, "n1", "w1", spec.trace_parent, time.time_ns())
        try:
            yield p
        except BaseException as e:
            tracing.exec_finish(p, None, e)
            raise
        tracing.exec_finish(p, errors[0] if errors else None)

    def run(fast, fail=False, touch=False, raises=False, actor=b""):
        spec = common_pb2.TaskSpec(name="f", task_id=os.urandom(24), job_id=b"\\x02" * 4, attempt=1,
                                   actor_id=actor)
        tracing.task_submitted(spec, "submit f")
        values = (spec.task_id, spec.job_id, spec.attempt, spec.actor_id, "n1", "w1")
        errors = []
        cm = (begun(spec, errors) if fast == "begin" else
              tracing.task_executing("execute f", spec, "n1", "w1") if fast else
              tracing.task_span("execute f", {}, lambda: task_attributes(*values), spec.trace_parent))
        before = trace.get_current_span()
        kind = None
        inner = None
        try:
            with cm as sp:
                kind = type(sp).__name__
                current = trace.get_current_span() is sp
                if fast == "begin":  # busy: a second task on this thread takes the general way
                    inner = tracing.exec_begin("execute f", spec, "n1", "w1", spec.trace_parent, 1)
                if touch:
                    trace.get_current_span().set_attribute("user", "v")
                with tracer.start_as_current_span("user child"):
                    pass
                nested = common_pb2.TaskSpec(task_id=b"n" * 24)
                tracing.task_submitted(nested, "submit g")
                # a child span and a nested submission ask only for the context: no span made
                made = sp.span is not None if fast == "begin" else None
                if fail:
                    if fast == "begin":
                        errors.append("ValueError: boom")
                    else:
                        tracing.set_error(sp, "ValueError: boom")
                if raises:
                    raise KeyError("x")
        except KeyError:
            pass
        kept = sp.get_span_context()
        return {"tp": spec.trace_parent.hex(), "nested_tp": nested.trace_parent.hex(), "kind": kind, "made": made,
                "current": current, "restored": trace.get_current_span() is before, "inner": inner,
                "kept_id": kept.span_id, "kept_trace": kept.trace_id, "kept_recording": sp.is_recording()}

    def kept_context():
        # a context copied in one task and used after the thread ran another: its child span
        # names the first task's execute span
        import contextvars
        specs, kept = [], []
        for _ in range(2):
            spec = common_pb2.TaskSpec(name="f", task_id=os.urandom(24))
            tracing.task_submitted(spec, "submit f")
            p = tracing.exec_begin("execute f", spec, "n1", "w1", spec.trace_parent, time.time_ns())
            kept.append(contextvars.copy_context())
            tracing.exec_finish(p)
            specs.append(spec)
        kept[0].run(lambda: tracer.start_span("late child").end())
        return [s.trace_parent.hex() for s in specs]

    out = {}
    for label, kw in {"plain": {}, "fail": {"fail": True}, "touched": {"touch": True},
                      "raised": {"raises": True}, "actor": {"actor": b"\\xab" * 16}}.items():
        out[label] = {"fast": run(True, **kw), "lazy": run(False, **kw), "begin": run("begin", **kw)}
    out["kept_context"] = kept_context()
    # a context already current (a user's span around the task): the general way
    with tracer.start_as_current_span("around"):
        spec = common_pb2.TaskSpec(name="f", task_id=os.urandom(24))
        tracing.task_submitted(spec, "submit f")
        out["begin_under_a_span"] = tracing.exec_begin("execute f", spec, "n1", "w1", spec.trace_parent, 1)
    # not sampled: nothing recorded, the decision propagates to a nested submission
    spec = common_pb2.TaskSpec(name="f", task_id=os.urandom(24))
    spec.trace_parent = os.urandom(24) + b"\\x00"
    n = len(got)
    with tracing.task_executing("execute f", spec, "n1", "w1") as sp:
        nested = common_pb2.TaskSpec(task_id=b"n" * 24)
        tracing.task_submitted(nested, "submit g")
    out["unsampled"] = {"recorded": len(got) - n, "nested_tp": nested.trace_parent.hex(),
                        "tp": spec.trace_parent.hex(), "kind": type(sp).__name__}
    # a malformed context (a zero trace id): the generic path, a root span of its own
    spec = common_pb2.TaskSpec(name="f", task_id=os.urandom(24))
    spec.trace_parent = bytes(16) + os.urandom(8) + b"\\x01"
    with tracing.task_executing("execute f", spec, "n1", "w1") as sp:
        pass
    out["malformed_kind"] = type(sp).__name__
    tracing.flush()
    from ember_common.tracing._records import RECORD_TYPES, to_readable
    spans = [to_readable(r, tracing._state.resource, None) if type(r) in RECORD_TYPES else r for r in got]
    out["spans"] = [{"name": s.name, "id": s.context.span_id, "trace": s.context.trace_id,
                     "parent": s.parent.span_id if s.parent else None,
                     "remote_parent": bool(s.parent and s.parent.is_remote),
                     "kind": s.kind.name, "attrs": dict(s.attributes), "status": s.status.status_code.name,
                     "error": s.status.description, "events": [e.name for e in s.events]} for s in spans]
    print(json.dumps(out))
""")


def _child(tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_TRACES_EXPORTER="ember_file", EMBER_TRACE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-3000:]
    result: dict = json.loads(out.stdout.splitlines()[-1])
    return result


def test_the_exec_span_is_recorded_as_the_lazy_task_span_records_it(tmp_path):
    out = _child(tmp_path)
    spans = out["spans"]
    by_id = {s["id"]: s for s in spans}

    def tree(case: dict) -> dict:
        """The spans of one run: the execute span (child of the submit span) and its children."""
        tp = bytes.fromhex(case["tp"])
        execute = next(s for s in spans if s["name"] == "execute f"
                       and s["parent"] == int.from_bytes(tp[16:24], "big"))
        children = sorted((s for s in spans if s["parent"] == execute["id"]), key=lambda s: s["name"])
        nested = bytes.fromhex(case["nested_tp"])
        assert by_id[int.from_bytes(nested[16:24], "big")]["parent"] == execute["id"]  # the nested submit's
        assert execute["trace"] == int.from_bytes(tp[:16], "big") and execute["remote_parent"]
        strip = ("id", "parent", "trace")
        assert len(execute["attrs"]["ember.task_id"]) == 48  # the run's own (random) task id
        execute = {**execute, "attrs": {k: v for k, v in execute["attrs"].items() if k != "ember.task_id"}}
        return {"execute": {k: v for k, v in execute.items() if k not in strip},
                "children": [{k: v for k, v in c.items() if k not in strip} for c in children]}

    for label in ("plain", "fail", "touched", "raised", "actor"):
        fast, lazy, begun = out[label]["fast"], out[label]["lazy"], out[label]["begin"]
        assert fast["kind"] == "ExecSpan" and lazy["kind"] == "TaskSpan" and begun["kind"] == "CurrentExec"
        assert fast["current"] and fast["restored"] and lazy["restored"]
        assert begun["current"] and begun["restored"] and begun["inner"] is None
        assert begun["made"] is (label == "touched"), label  # made only when code changed the span
        for case in (fast, begun):  # kept past its task: still that task's span, not recording
            assert not case["kept_recording"], label
        assert begun["kept_trace"] == int.from_bytes(bytes.fromhex(begun["tp"])[:16], "big")
        assert by_id[begun["kept_id"]]["name"] == "execute f"
        assert by_id[begun["kept_id"]]["parent"] == int.from_bytes(bytes.fromhex(begun["tp"])[16:24], "big")
        assert tree(fast) == tree(lazy), label
        assert tree(begun) == tree(lazy), label
    assert out["begin_under_a_span"] is None
    first, second = (bytes.fromhex(tp) for tp in out["kept_context"])
    late = next(s for s in spans if s["name"] == "late child")
    first_exec = next(s for s in spans if s["name"] == "execute f" and s["parent"] == int.from_bytes(first[16:24], "big"))
    assert late["parent"] == first_exec["id"] and late["trace"] == int.from_bytes(first[:16], "big")
    assert any(s["parent"] == int.from_bytes(second[16:24], "big") for s in spans)  # the second ran too
    plain = tree(out["plain"]["fast"])
    assert plain["execute"]["kind"] == "CONSUMER" and plain["execute"]["status"] == "UNSET"
    assert plain["execute"]["attrs"] == {"ember.job_id": "02020202", "ember.node_id": "n1",
                                         "ember.worker_id": "w1", "ember.attempt": 1}
    assert [c["name"] for c in plain["children"]] == ["submit g", "user child"]
    failed = tree(out["fail"]["fast"])["execute"]
    assert failed["status"] == "ERROR" and failed["error"] == "ValueError: boom"
    raised = tree(out["raised"]["fast"])["execute"]
    assert raised["status"] == "ERROR" and raised["events"] == ["exception"]
    assert tree(out["touched"]["fast"])["execute"]["attrs"]["user"] == "v"
    assert tree(out["actor"]["fast"])["execute"]["attrs"]["ember.actor_id"] == "ab" * 16
    unsampled = out["unsampled"]
    assert unsampled["recorded"] == 0 and unsampled["kind"] == "ExecSpan"
    assert unsampled["nested_tp"][:32] == unsampled["tp"][:32] and unsampled["nested_tp"].endswith("00")
    assert out["malformed_kind"] != "ExecSpan"


class Keep:
    accepts_records = True

    def __init__(self) -> None:
        self.batches: list[int] = []
        self.lock = threading.Lock()

    def export(self, batch):
        with self.lock:
            self.batches.append(len(batch))
        return SpanExportResult.SUCCESS

    def shutdown(self):
        pass


def _wait(cond, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.01)
    return bool(cond())


def test_only_full_batches_go_until_the_schedule_or_a_flush(monkeypatch):
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")
    keep = Keep()
    buf = SpanBuffer([keep], resource=RES)
    try:
        for i in range(6):
            buf.add_record(exec_rec(i))
        assert _wait(lambda: keep.batches == [4])
        time.sleep(0.3)  # the 2 left wait: an export per partial batch would cost its fixed part again
        assert keep.batches == [4] and len(buf._queue) == 2
        for i in range(2):
            buf.add_record(exec_rec(i))
        assert _wait(lambda: keep.batches == [4, 4])
        buf.add_record(exec_rec(9))
        assert buf.force_flush(5000) and keep.batches == [4, 4, 1]
    finally:
        buf.shutdown()
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")
    keep = Keep()
    buf = SpanBuffer([keep], resource=RES)
    try:
        for i in range(3):
            buf.add_record(exec_rec(i))
        assert _wait(lambda: keep.batches == [3], 5.0)  # the schedule sends a partial batch
    finally:
        buf.shutdown()


SERVER = keep_spans("ember-raylet") + textwrap.dedent("""
    import json, os
    from ember_common.tracing import _spans

    def run(fast, raises=False, extra=()):
        tp = f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01"
        md = (("traceparent", tp), ("user-agent", "grpc-python"), *extra)
        cm = (tracing.server_span("ember.Raylet/RequestWorkerLease", md) if fast else
              tracing.span("ember.Raylet/RequestWorkerLease", context=tracing.extract(dict(md)), kind="SERVER",
                           **{"rpc.method": "ember.Raylet/RequestWorkerLease"}))
        try:
            with cm as sp:
                kind = type(sp).__name__
                if raises:
                    raise KeyError("x")
        except KeyError:
            pass
        return tp, kind

    out = {}
    for label, kw in {"plain": {}, "raised": {"raises": True},
                      "baggage": {"extra": (("baggage", "k=v"),)}}.items():
        out[label] = {"fast": run(True, **kw), "sdk": run(False, **kw)}
    tracing.flush()
    from ember_common.tracing._records import RECORD_TYPES, to_readable
    spans = [to_readable(r, tracing._state.resource, None) if type(r) in RECORD_TYPES else r for r in got]
    out["spans"] = {f"{s.context.trace_id:032x}": {
        "name": s.name, "parent": f"{s.parent.span_id:016x}", "remote_parent": s.parent.is_remote,
        "kind": s.kind.name, "attrs": dict(s.attributes), "status": s.status.status_code.name,
        "error": s.status.description, "events": [e.name for e in s.events]} for s in spans}
    print(json.dumps(out))
""")


def test_a_server_span_on_the_fast_path_is_the_sdks_span(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_TRACES_EXPORTER="ember_file", EMBER_TRACE_DIR=str(tmp_path))
    res = subprocess.run([sys.executable, "-c", SERVER], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.splitlines()[-1])
    spans = out["spans"]

    def of(run: list) -> dict:
        tp, _ = run
        span = spans[tp.split("-")[1]]
        assert span["parent"] == tp.split("-")[2] and span["remote_parent"]
        return {k: v for k, v in span.items() if k != "parent"}

    assert out["plain"]["fast"][1] == "LightSpan" and out["baggage"]["fast"][1] != "LightSpan"
    for label in ("plain", "raised", "baggage"):
        assert of(out[label]["fast"]) == of(out[label]["sdk"]), label
    method = "ember.Raylet/RequestWorkerLease"
    assert of(out["plain"]["fast"]) == {"name": method, "remote_parent": True, "kind": "SERVER",
                                        "attrs": {"rpc.method": method}, "status": "UNSET", "error": None,
                                        "events": []}
    raised = of(out["raised"]["fast"])
    assert raised["status"] == "ERROR" and raised["error"] == "KeyError: 'x'" and raised["events"] == ["exception"]


def test_an_otlp_request_over_the_limit_goes_as_halves(monkeypatch):
    """The OTLP/gRPC exporter sends a batch whose request would exceed MAX_REQUEST_BYTES (long
    task names) as smaller requests, each under it, every span once, to a real gRPC receiver."""
    from concurrent import futures

    import grpc

    from ember_common.tracing import _exporters, _otlp_grpc

    got: list[bytes] = []

    def export(request, context):
        got.append(request)
        return b""

    server = grpc.server(futures.ThreadPoolExecutor(1))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "opentelemetry.proto.collector.trace.v1.TraceService",
        {"Export": grpc.unary_unary_rpc_method_handler(export)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setattr(_otlp_grpc, "MAX_REQUEST_BYTES", 20_000)
    exporter = _exporters.make_exporter("otlp", "ember-worker")
    exporter.resource, exporter.scope = RES, SCOPE
    try:
        small = [exec_rec(i) for i in range(10)]
        assert exporter.export(small) == SpanExportResult.SUCCESS
        assert len(got) == 1  # under the limit: one request
        long = [exec_rec(i, name="execute " + "f" * 2000) for i in range(40)]  # ~2.4 KB each
        assert exporter.export(long) == SpanExportResult.SUCCESS
        requests = [ExportTraceServiceRequest.FromString(r) for r in got[1:]]
        assert len(requests) > 4 and all(len(r) <= 20_000 for r in got[1:])
        spans = [s for r in requests for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]
        assert sorted(s.start_time_unix_nano for s in spans) == [100 + i for i in range(40)]
        # bytes encoded elsewhere (the driver's span relay) go with the spans in one request,
        # or alone when together they would be over the limit
        extra = _otlp.encode_request(long[:1], RES, SCOPE)
        n = len(got)
        assert exporter.export(small, extra) == SpanExportResult.SUCCESS and len(got) == n + 1
        assert len(ExportTraceServiceRequest.FromString(got[-1]).resource_spans) == 2
        extra = _otlp.encode_request(long[:9], RES, SCOPE)  # ~22 KB
        assert exporter.export(small, extra) == SpanExportResult.SUCCESS and len(got) == n + 3
        assert got[-1] == extra
    finally:
        exporter.shutdown()
        server.stop(0)
