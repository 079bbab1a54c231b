"""The span buffer (ember_common/tracing/_buffer.py) and the record path of the per-task fast
paths: batching, flushing, dropping when full, records encoded like the SDK encodes their
spans, and sampling decided before anything is recorded."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanKind, Status, StatusCode, TraceState
from tracing_child import keep_spans

from ember_common.tracing import _otlp
from ember_common.tracing._buffer import SpanBuffer
from ember_common.tracing._records import RECORD_TYPES, SpanRecord, to_readable

RES = Resource.create({"service.name": "unit"})


class Keep:
    """An exporter that keeps what it gets (SDK spans only, like most exporters)."""

    def __init__(self, records: bool = False) -> None:
        self.accepts_records = records
        self.batches: list[list] = []
        self.shut = False
        self.lock = threading.Lock()

    def export(self, batch):
        with self.lock:
            self.batches.append(list(batch))
        return SpanExportResult.SUCCESS

    def shutdown(self):
        self.shut = True


def rec(i: int, parent=None, status=None, events=()):
    return SpanRecord(f"span {i}", (7 << 64) | i, 1000 + i, 1, None, parent, SpanKind.PRODUCER, 10, 20,
                      {"ember.task_id": f"t{i}", "n": i}, status, events)


def test_batches_flush_and_records_become_sdk_spans_for_other_exporters(monkeypatch):
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")
    plain, raw = Keep(), Keep(records=True)
    buf = SpanBuffer([plain, raw], resource=RES)
    try:
        for i in range(8):  # two full batches: exported without waiting for the schedule
            buf.add_record(rec(i))
        deadline = time.monotonic() + 10
        while sum(map(len, raw.batches)) < 8 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [len(b) for b in raw.batches] == [4, 4] and all(type(r) in RECORD_TYPES for b in raw.batches for r in b)
        spans = [s for b in plain.batches for s in b]
        assert [s.name for s in spans] == [f"span {i}" for i in range(8)]
        assert spans[3].context.span_id == 1003 and spans[3].attributes["n"] == 3 and spans[3].resource is RES
        assert spans[3].status.status_code is StatusCode.UNSET
        buf.add_record(rec(8))  # one, under a batch: only a flush (or the schedule) sends it
        assert buf.force_flush(5000)
        assert raw.batches[-1] == [rec(8)]
    finally:
        buf.shutdown()
    assert plain.shut and raw.shut


def test_a_full_queue_drops_the_oldest_and_shutdown_exports_the_rest(monkeypatch, caplog):
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")
    gate = threading.Event()

    class Slow(Keep):
        def export(self, batch):
            gate.wait(10)
            return super().export(batch)

    slow = Slow(records=True)
    buf = SpanBuffer([slow], resource=RES, max_queue_size=10)
    for i in range(25):
        buf.add_record(rec(i))
    gate.set()
    buf.shutdown()
    got = [r[0] for b in slow.batches for r in b]
    assert got[-10:] == [f"span {i}" for i in range(15, 25)]  # the newest 10 survive
    assert buf.dropped >= 5 and "dropping spans" in caplog.text


def test_records_encode_as_the_sdk_encodes_their_spans():
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as sdk_encode
    from opentelemetry.sdk.trace import Event
    from opentelemetry.trace import SpanContext, TraceFlags

    remote = SpanContext(7 << 64, 99, True, TraceFlags(1), TraceState([("vendor", "x")]))
    records = [rec(1), rec(2, parent=remote, status=Status(StatusCode.ERROR, "KeyError: 'x'")),
               rec(3, events=(Event("exception", {"exception.type": "KeyError"}, 15),)),
               SpanRecord("execute g", 5 << 64, 77, 1, TraceState([("a", "b")]), remote, SpanKind.CONSUMER, 1, 2,
                          {"l": (1, 2), "f": 1.5, "b": True}, None, ())]
    spans = [to_readable(r, RES, None) for r in records]
    assert _otlp.encode_spans(records, RES, None) == sdk_encode(spans)
    assert _otlp.encode_spans(spans) == sdk_encode(spans)


SAMPLING = keep_spans("ember-test") + textwrap.dedent("""
    import json

    carriers = []
    for i in range(400):
        c = {}
        tracing.submit_span("submit f", c, **{"i": i})
        carriers.append(c)
    nested = []
    for c in carriers:
        with tracing.execute_span("execute f", c):
            n = {}
            tracing.submit_span("submit g", n)
            nested.append(n)
    tracing.flush()
    limit, bound = (1 << 64) - 1, round(0.25 * (1 << 64))
    want = [int(c["traceparent"][3:35], 16) & limit < bound for c in carriers]
    print(json.dumps({
        "fast": tracing._state.root_bound == bound,
        "flags_follow_ratio": [int(c["traceparent"][-2:], 16) & 1 == w for c, w in zip(carriers, want)],
        "nested_follow_parent": [n["traceparent"][-2:] == c["traceparent"][-2:] and n["traceparent"][3:35] == c["traceparent"][3:35]
                                 for n, c in zip(nested, carriers)],
        "sampled": sum(want),
        "recorded": sorted({r[0] for r in got}),
        "recorded_traces_sampled": all(int(r[3]) & 1 for r in got),
        "count": len(got),
    }))
""")


def test_sampling_is_decided_before_anything_is_recorded(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_TRACES_EXPORTER="ember_file", EMBER_TRACE_DIR=str(tmp_path),
               OTEL_TRACES_SAMPLER="parentbased_traceidratio", OTEL_TRACES_SAMPLER_ARG="0.25")
    r = subprocess.run([sys.executable, "-c", SAMPLING], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["fast"] and all(out["flags_follow_ratio"]) and all(out["nested_follow_parent"])
    assert 40 < out["sampled"] < 160  # about a quarter of 400 roots
    assert out["recorded"] == ["execute f", "submit f", "submit g"] and out["recorded_traces_sampled"]
    assert out["count"] == 3 * out["sampled"]  # nothing at all for the tasks not sampled
