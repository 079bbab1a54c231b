"""The node span exporter (ember_common/tracing_node.py): its queue policy (pure, clock passed
in), the datagrams a sender packs, the OTLP request it writes (the same bytes the in-process
exporter writes for those spans), and the real unix socket between a SpanBuffer and a
NodeSpanExporter: full batches sent without a thread, flush answered once exported, malformed
messages ignored, nothing lost when the exporter stops or goes away."""
from __future__ import annotations

import marshal
import os
import socket
import threading
import time
import uuid

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from ember_common import otlp_encoding, tracing_node
from ember_common.tracing_export import SpanBuffer
from ember_common.tracing_node import NodeLink, NodeSpanExporter, Pending

RES = Resource.create({"service.name": "ember-worker", "process.pid": 42})
SCOPE = InstrumentationScope("ember")
H = tracing_node.header_of(RES, SCOPE)


def submit(i: int, parent=None) -> tuple:
    tp = (i + 1).to_bytes(16, "big") + (i + 7).to_bytes(8, "big") + b"\x01"
    return (f"submit f{i % 3}", tp, parent, 1_000 + i, "ember.task_id", os.urandom(24))


def execute(i: int, status=None) -> tuple:
    tp = (i + 1).to_bytes(16, "big") + (i + 7).to_bytes(8, "big") + b"\x01"
    values = (os.urandom(24), b"\x01\x00\x00\x00", 0, b"", "n" * 56, "w" * 56)
    return (f"execute f{i % 3}", tp, (i + 99).to_bytes(8, "big"), 2_000 + i, 3_000 + i, values, status)


def sdk_span(i: int) -> ReadableSpan:
    ctx = SpanContext(5, 100 + i, False, TraceFlags(1))
    return ReadableSpan(name=f"user {i}", context=ctx, resource=RES, attributes={"k": i},
                        kind=SpanKind.INTERNAL, start_time=1, end_time=2,
                        instrumentation_scope=InstrumentationScope("user"))


# ------------------------------------------------------------------ the queue policy (pure)
def test_pending_is_due_at_a_full_batch_or_after_the_delay():
    p = Pending(batch=4, delay_s=1.0, max_queue=100)
    assert not p.due(0.0) and p.timeout(0.0) == 1.0
    p.add(H, [1, 2, 3], now=10.0)
    assert not p.due(10.5) and p.timeout(10.25) == pytest.approx(0.75)
    assert p.due(11.0)  # the oldest waited delay_s
    p.add(H, [4], now=10.6)
    assert p.due(10.6)  # a full batch
    assert p.take() == [(H, [1, 2, 3, 4])] and p.count == 0 and p.since is None


def test_pending_takes_oldest_groups_first_and_drops_the_oldest_past_its_bound():
    other = (b"r2", "", b"s", "")
    p = Pending(batch=3, delay_s=5.0, max_queue=5)
    p.add(H, [1, 2], now=0.0)
    p.add(other, [10, 11, 12], now=0.0)
    assert p.take() == [(H, [1, 2]), (other, [10])] and p.count == 2
    p.add(H, [3, 4, 5, 6], now=1.0)  # 6 > 5: the oldest (11) goes
    assert p.dropped == 1 and p.count == 5
    assert p.take(everything=True) == [(other, [12]), (H, [3, 4, 5, 6])]
    p.senders_dropped["a"] = 7
    assert p.total_dropped() == 8


# ------------------------------------------------------------------ datagrams and encoding
def test_pack_splits_big_batches_under_the_datagram_limit_in_order():
    items = [execute(i) for i in range(3000)]
    grams = tracing_node.pack([(H, items)], dropped=3)
    assert len(grams) > 1 and all(len(g) <= tracing_node.MAX_DATAGRAM for g in grams)
    back = [marshal.loads(g) for g in grams]
    assert {m[0] for m in back} == {tracing_node.BATCH} and {m[1] for m in back} == {3}
    assert [x for m in back for _, xs in m[2] for x in xs] == items


def test_node_request_is_the_in_process_request():
    """The node exporter writes, for the records a sender sent as they are and the spans it
    encoded itself, the bytes encode_request writes in the sender's process."""
    parent = SpanContext(9, 77, True, TraceFlags(1))
    spans = [submit(0), execute(1), submit(2, parent), execute(3, Status(StatusCode.ERROR, "boom")), sdk_span(4),
             submit(5), execute(6)]
    groups = tracing_node.marshalable(spans, RES, SCOPE)
    raw = groups[0][1]
    assert [type(x) for x in raw] == [tuple, tuple, bytes, bytes, tuple, tuple]  # the odd ones encoded
    groups = [(h, marshal.loads(marshal.dumps(xs))) for h, xs in groups]  # through the socket
    request, bad = tracing_node.encode(groups)
    assert bad == 0
    want = ExportTraceServiceRequest.FromString(otlp_encoding.encode_request(spans[:4] + spans[5:], RES, SCOPE))
    got = ExportTraceServiceRequest.FromString(request)
    mine = [rs for rs in got.resource_spans[0].scope_spans if rs.scope.name == "ember"]
    assert got.resource_spans[0].resource == want.resource_spans[0].resource
    assert mine[0] == want.resource_spans[0].scope_spans[0]
    user = [rs for rs in got.resource_spans[0].scope_spans if rs.scope.name == "user"]
    assert [s.name for s in user[0].spans] == ["user 4"]


def test_malformed_items_are_counted_not_exported():
    request, bad = tracing_node.encode([(H, [submit(0), ("x",), 5, execute(1)])])
    assert bad == 2
    names = [s.name for rs in ExportTraceServiceRequest.FromString(request).resource_spans
             for ss in rs.scope_spans for s in ss.spans]
    assert names == ["submit f0", "execute f1"]


# ------------------------------------------------------------------ the socket, end to end
class Requests:
    """The node exporter's export callback: keeps the decoded requests."""

    def __init__(self) -> None:
        self.spans: list = []
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, request: bytes, n: int) -> None:
        msg = ExportTraceServiceRequest.FromString(request)
        with self.lock:
            self.calls += 1
            for rs in msg.resource_spans:
                svc = {a.key: a.value.string_value for a in rs.resource.attributes}["service.name"]
                self.spans += [(svc, s.name) for ss in rs.scope_spans for s in ss.spans]


class Direct:
    """The sender's own exporter (used when no node exporter is there)."""

    accepts_records = True

    def __init__(self) -> None:
        self.spans: list = []

    def export(self, batch):
        self.spans += batch

    def shutdown(self):
        pass


@pytest.fixture()
def address():
    return f"unit-{uuid.uuid4().hex[:12]}:1"


def test_buffer_sends_full_batches_without_a_thread_and_flush_waits_for_the_export(address, monkeypatch):
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "64")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")
    got = Requests()
    node = NodeSpanExporter(address, got, delay_s=60.0, batch=100)
    direct = Direct()
    buf = SpanBuffer([direct], resource=RES, scope=SCOPE)
    try:
        buf.attach(NodeLink(address))
        for i in range(128):  # two full batches: sent by this thread, exported at 100 by the node
            buf.add_record(submit(i) if i % 2 else execute(i))
        deadline = time.monotonic() + 10
        while got.calls < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert got.calls == 1 and len(got.spans) == 100 and not buf._queue
        buf.add_record(submit(1000))
        assert buf.force_flush(10_000)  # the rest, exported before the answer
        assert len(got.spans) == 129 and {svc for svc, _ in got.spans} == {"ember-worker"}
        assert direct.spans == []
    finally:
        buf.shutdown()
        node.stop()


def test_hello_refused_when_the_node_exports_elsewhere(address, monkeypatch):
    node = NodeSpanExporter(address, Requests())
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://elsewhere:4317")
        with pytest.raises(OSError, match="exports elsewhere"):
            NodeLink(address)
        with pytest.raises(OSError):
            NodeLink("nobody-" + address)  # no exporter at all
    finally:
        node.stop()


def test_malformed_datagrams_are_ignored(address):
    got = Requests()
    node = NodeSpanExporter(address, got, delay_s=60.0)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            for junk in (b"\x00garbage", marshal.dumps((tracing_node.BATCH, 0, [(("bad",), [1])])),
                         marshal.dumps((99,))):
                s.sendto(junk, tracing_node.socket_name(address))
        link = NodeLink(address)
        link.send(tracing_node.pack([(H, [submit(1)])], 0)[0])
        assert link.flush(10) and [n for _, n in got.spans] == ["submit f1"]
        link.close()
    finally:
        node.stop()


def test_stop_exports_what_the_socket_still_holds_and_senders_fall_back(address, monkeypatch):
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "8")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")
    got = Requests()
    node = NodeSpanExporter(address, got, delay_s=60.0, batch=1000)
    direct = Direct()
    buf = SpanBuffer([direct], resource=RES, scope=SCOPE)
    try:
        buf.attach(NodeLink(address))
        for i in range(16):  # sent, waiting in the node's queue (its batch is 1000)
            buf.add_record(submit(i))
        node.stop()  # a raylet stopping after its workers: exports what it holds
        assert len(got.spans) == 16
        for i in range(20):  # the exporter is gone: this process exports its spans itself
            buf.add_record(submit(100 + i))
        assert buf.force_flush(10_000)
        assert buf._link is None and len(direct.spans) >= 4
        assert len(got.spans) + len(direct.spans) == 36
    finally:
        buf.shutdown()


def test_drops_add_up_what_senders_report_and_the_node_queue_dropped(address):
    got = Requests()
    node = NodeSpanExporter(address, got, delay_s=60.0, batch=1000, max_queue=4)
    try:
        a, b = NodeLink(address), NodeLink(address)
        a.send(tracing_node.pack([(H, [submit(i) for i in range(3)])], dropped=5)[0])
        a.send(tracing_node.pack([(H, [submit(i) for i in range(3)])], dropped=7)[0])  # a running total
        b.send(tracing_node.pack([(H, [submit(9)])], dropped=1)[0])
        assert a.flush(10) and b.flush(10)
        assert node.pending.dropped == 3  # 7 spans into a queue of 4
        assert node.dropped == 3 + 7 + 1 and len(got.spans) == 4
        a.close()
        b.close()
    finally:
        node.stop()
