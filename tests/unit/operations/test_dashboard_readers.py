"""The dashboard's pure readers on real files in a tmp dir: Prometheus text parsed for the
charts, ember_file spans listed as traces and laid out as a waterfall (log files are read through
each raylet: tests/unit/operations/test_log_files.py, tests/integration/operations/test_logs_service.py)."""
from __future__ import annotations

import json

import pytest

from ember_dashboard import readers


def test_prometheus_text_parsed_without_buckets():
    text = ("# HELP ember_tasks_running Tasks running\n# TYPE ember_tasks_running gauge\n"
            'ember_tasks_running{node="n1"} 3.0\n'
            "# HELP lat Latency\n# TYPE lat histogram\n"
            'lat_bucket{le="0.1"} 1.0\nlat_bucket{le="+Inf"} 2.0\nlat_sum 0.5\nlat_count 2.0\n')
    samples = readers.parse_prometheus(text)
    assert {"name": "ember_tasks_running", "labels": {"node": "n1"}, "value": 3.0} in samples
    assert {s["name"] for s in samples} == {"ember_tasks_running", "lat_sum", "lat_count"}


def _span(trace, span, parent, name, service, start, end, status="UNSET"):
    return {"trace_id": trace, "span_id": span, "parent_id": parent, "name": name, "service": service,
            "start_ns": start, "end_ns": end, "status": status, "error": "", "attributes": {}}


def test_traces_listed_and_laid_out(tmp_path):
    spans = [_span("t1", "a", "", "proxy GET /hello", "ember-serve-proxy", 1_000_000, 5_000_000),
             _span("t1", "c", "b", "execute f", "ember-worker", 2_500_000, 3_500_000, "ERROR"),
             _span("t1", "b", "a", "submit f", "ember-serve-proxy", 2_000_000, 2_000_000),
             _span("t2", "x", "", "submit g", "ember-driver", 9_000_000, 9_500_000)]
    (tmp_path / "ember-worker-1.jsonl").write_text("".join(json.dumps(s) + "\n" for s in spans[1:2]) + "not json\n")
    (tmp_path / "rest-2.jsonl").write_text("".join(json.dumps(s) + "\n" for s in spans[:1] + spans[2:]))
    listed = readers.list_traces(str(tmp_path))
    assert [t["trace_id"] for t in listed] == ["t2", "t1"]  # newest first
    t1 = listed[1]
    assert t1["root"] == "proxy GET /hello" and t1["spans"] == 3 and t1["error"] is True
    assert t1["services"] == ["ember-serve-proxy", "ember-worker"] and t1["duration_ms"] == pytest.approx(4.0)
    assert [t["trace_id"] for t in readers.list_traces(str(tmp_path), contains="GET /HELLO")] == ["t1"]
    assert [t["trace_id"] for t in readers.list_traces(str(tmp_path), since_ns=5_000_000)] == ["t2"]
    wf = readers.waterfall(str(tmp_path), "t1")
    assert [(s["name"], s["depth"]) for s in wf] == [("proxy GET /hello", 0), ("submit f", 1), ("execute f", 2)]
    assert wf[2]["offset_ms"] == pytest.approx(1.5) and wf[2]["duration_ms"] == pytest.approx(1.0)
    assert readers.waterfall(str(tmp_path), "nope") == []



def test_the_trace_sinks_file_reads_as_traces(tmp_path):
    """What the compose trace sink (ember.testing.otlp_receiver) writes for an OTLP export is
    what the Traces page reads: listed as a trace, laid out as a waterfall."""
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as pb
    from opentelemetry.proto.common.v1 import common_pb2
    from opentelemetry.proto.trace.v1 import trace_pb2

    from ember.testing import otlp_receiver

    tid = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")
    root = trace_pb2.Span(trace_id=tid, span_id=b"\x01" * 8, name="submit f",
                          start_time_unix_nano=1_000_000_000, end_time_unix_nano=1_004_000_000)
    child = trace_pb2.Span(trace_id=tid, span_id=b"\x02" * 8, parent_span_id=b"\x01" * 8, name="execute f",
                           start_time_unix_nano=1_001_000_000, end_time_unix_nano=1_003_000_000,
                           status=trace_pb2.Status(code=2, message="boom"),
                           attributes=[common_pb2.KeyValue(key="ember.task_id",
                                                           value=common_pb2.AnyValue(string_value="ab"))])
    service = common_pb2.KeyValue(key="service.name", value=common_pb2.AnyValue(string_value="ember-worker"))
    req = pb.ExportTraceServiceRequest(resource_spans=[trace_pb2.ResourceSpans(
        resource={"attributes": [service]}, scope_spans=[trace_pb2.ScopeSpans(spans=[root, child])])])
    with open(tmp_path / "spans.jsonl", "w") as f:
        for span in otlp_receiver._spans(req):
            f.write(json.dumps(span) + "\n")
    [t] = readers.list_traces(str(tmp_path))
    assert t["trace_id"] == tid.hex() and t["root"] == "submit f" and t["spans"] == 2 and t["error"]
    assert t["duration_ms"] == pytest.approx(4.0)
    wf = readers.waterfall(str(tmp_path), tid.hex())
    assert [(s["name"], s["depth"]) for s in wf] == [("submit f", 0), ("execute f", 1)]
    assert wf[1]["status"] == "ERROR" and wf[1]["error"] == "boom"
    assert wf[1]["attributes"] == {"ember.task_id": "ab"} and wf[1]["offset_ms"] == pytest.approx(1.0)
