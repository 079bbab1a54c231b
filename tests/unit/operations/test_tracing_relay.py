"""The driver's span export through a relay process (ember_common/tracing/_relay.py): per-task
records go marshal'd and everything else as request bytes to a real child process, which
exports them over OTLP/gRPC to a real receiver on loopback with the driver's resource; a flush
returns once the relay has exported; a relay killed mid-run leaves the driver exporting in its
own process, losing nothing it had not yet handed over; a driver set up by tracing.setup uses
the relay, and EMBER_TRACE_RELAY=0 turns it off."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from concurrent import futures

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from ember_common.tracing import _exporters, _relay
from ember_common.tracing._records import ExecRecord, SubmitRecord

TP = bytes(range(1, 17)) + bytes(range(17, 25)) + b"\x01"  # trace id, parent span id, sampled
RES = Resource({"service.name": "ember-driver", "process.pid": os.getpid(), "host.tags": ("a", "b")})
SCOPE = InstrumentationScope("ember", "1.0")


class Receiver:
    """An OTLP/gRPC trace receiver on loopback: every span of every request, with the
    resource attributes it came with."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, dict]] = []
        self.cv = threading.Condition()
        self.server = grpc.server(futures.ThreadPoolExecutor(2))
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "opentelemetry.proto.collector.trace.v1.TraceService",
            {"Export": grpc.unary_unary_rpc_method_handler(self._export)}),))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def _export(self, request: bytes, context: object) -> bytes:
        req = ExportTraceServiceRequest.FromString(request)
        with self.cv:
            for rs in req.resource_spans:
                attrs = {a.key: a.value for a in rs.resource.attributes}
                for ss in rs.scope_spans:
                    self.spans += [(s.name, attrs) for s in ss.spans]
            self.cv.notify_all()
        return b""

    def names(self) -> list[str]:
        with self.cv:
            return sorted(n for n, _ in self.spans)


@pytest.fixture
def receiver(monkeypatch):
    rx = Receiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{rx.port}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.delenv("EMBER_TRACE_RELAY", raising=False)
    yield rx
    rx.server.stop(0)


def relay_exporter() -> _relay.RelayExporter:
    exp = _relay.RelayExporter("ember-driver", lambda: _exporters.make_exporter("otlp", "ember-driver"))
    exp.resource, exp.scope = RES, SCOPE
    return exp


def batch(tag: str) -> list:
    sdk = TracerProvider(resource=RES).get_tracer("t").start_span(f"user {tag}")
    sdk.end()
    exec_rec = ExecRecord(f"execute {tag}", TP, bytes(7) + b"\x01", 100, 200,
                          bytes(24), b"\x01\x00\x00\x00", 0, b"", "n" * 56, "w" * 16, None)
    return [SubmitRecord(f"submit {tag}", TP, None, 100, "ember.task_id", bytes(24)), exec_rec, sdk]


def test_records_and_other_spans_go_through_the_relay_with_the_drivers_resource(receiver):
    exp = relay_exporter()
    try:
        assert exp.export(batch("a")) == exp.export(batch("b")[:2]) == tracing_relay_success()
        assert exp._proc is not None and exp._proc.poll() is None and exp._proc.pid != os.getpid()
        assert exp.force_flush(10_000)  # exported by the relay before the flush returns
        assert receiver.names() == ["execute a", "execute b", "submit a", "submit b", "user a"]
        for _, attrs in receiver.spans:  # the driver's resource, not the relay's own
            assert attrs["service.name"].string_value == "ember-driver"
            assert attrs["process.pid"].int_value == os.getpid()
            assert [v.string_value for v in attrs["host.tags"].array_value.values] == ["a", "b"]
    finally:
        exp.shutdown()
    assert exp._proc.returncode == 0  # the pipe closed: the relay exported and exited


def test_a_killed_relay_leaves_the_driver_exporting_itself(receiver, caplog):
    exp = relay_exporter()
    try:
        exp.export(batch("a"))
        assert exp.force_flush(10_000) and len(receiver.names()) == 3
        os.kill(exp._proc.pid, signal.SIGKILL)
        exp._proc.wait(10)
        exp.export(batch("b"))  # the write finds the pipe closed: exported here instead
        exp.export(batch("c"))
        assert exp.force_flush(10_000)
        assert receiver.names() == sorted(f"{k} {t}" for t in "abc" for k in ("execute", "submit", "user"))
        assert "span relay is gone" in caplog.text
    finally:
        exp.shutdown()


def tracing_relay_success():
    from opentelemetry.sdk.trace.export import SpanExportResult

    return SpanExportResult.SUCCESS


@pytest.mark.parametrize("relay", ["1", "0"])
def test_a_driver_exports_through_the_relay_unless_turned_off(receiver, relay):
    # A driver's setup in a fresh process: its spans reach the receiver either way, through a
    # child process only when the relay is on.
    code = textwrap.dedent("""
        import os, psutil
        from ember_common import tracing
        assert tracing.setup("ember-driver")
        with tracing.span("driver work"):
            pass
        tracing.flush()
        print("CHILDREN", [" ".join(p.cmdline()) for p in psutil.Process().children()])
    """)
    env = dict(os.environ, OTEL_TRACES_EXPORTER="otlp", EMBER_TRACE_RELAY=relay)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    children = next(line for line in out.stdout.splitlines() if line.startswith("CHILDREN"))
    assert ("ember_common.tracing._relay" in children) == (relay == "1")
    assert receiver.names() == ["driver work"]


def test_a_relay_that_cannot_start_leaves_the_driver_exporting_itself(receiver, monkeypatch, caplog):
    monkeypatch.setattr(sys, "executable", "/bin/false")  # the relay's interpreter exits at once
    exp = relay_exporter()
    try:
        assert exp.export(batch("a")) == tracing_relay_success()
        assert exp.force_flush(10_000)
        assert receiver.names() == ["execute a", "submit a", "user a"]  # nothing lost
        assert exp._proc is None and "span relay is gone" in caplog.text
    finally:
        exp.shutdown()


def test_a_forked_child_starts_its_own_relay(receiver):
    # Frames from a child written into its parent's pipe would interleave with the parent's,
    # and a child holding that pipe would keep the relay from ever seeing its end.
    code = textwrap.dedent("""
        import os, sys
        from opentelemetry.sdk.resources import Resource
        from ember_common.tracing import _exporters, _relay
        from ember_common.tracing._records import SubmitRecord
        TP = bytes(range(1, 17)) + bytes(range(17, 25)) + b"\\x01"
        exp = _relay.RelayExporter("ember-driver", lambda: _exporters.make_exporter("otlp", "ember-driver"))
        exp.resource = Resource({"service.name": "ember-driver"})
        rec = lambda tag: [SubmitRecord(f"submit {tag}", TP, None, 100, "ember.task_id", bytes(24))]
        exp.export(rec("parent-1"))
        assert exp.force_flush(10000)
        parent_relay = exp._proc.pid
        pid = os.fork()
        if pid == 0:
            exp.export(rec("child"))
            ok = exp.force_flush(10000) and exp._proc.pid != parent_relay
            exp.shutdown()
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        exp.export(rec("parent-2"))
        assert exp.force_flush(10000) and exp._proc.pid == parent_relay
        exp.shutdown()
        sys.exit(os.waitstatus_to_exitcode(status))
    """)
    env = dict(os.environ, OTEL_TRACES_EXPORTER="otlp")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert receiver.names() == ["submit child", "submit parent-1", "submit parent-2"]
