"""The dashboard's pure readers on real files in a tmp dir: log listing and tails that never
leave the log directory, Prometheus text parsed for the charts, ember_file spans listed as
traces and laid out as a waterfall."""
from __future__ import annotations

import json
import os

import pytest

from ember_dashboard import readers


def test_logs_listed_and_tailed(tmp_path):
    (tmp_path / "raylet.out").write_text("".join(f"line {i}\n" for i in range(50)))
    (tmp_path / "gcs.err").write_text("boom\n")
    os.utime(tmp_path / "gcs.err", (1, 1))
    (tmp_path / "sub").mkdir()
    files = readers.list_logs(str(tmp_path))
    assert [f["name"] for f in files] == ["raylet.out", "gcs.err"]  # newest first, no directories
    assert readers.tail_log(str(tmp_path), "raylet.out", 3) == "line 47\nline 48\nline 49"
    assert readers.list_logs(str(tmp_path / "missing")) == []


@pytest.mark.parametrize("name, match", [
    ("../etc/passwd", "bad log file name"), ("sub/x", "bad log file name"), ("..", "bad log file name"),
    ("", "bad log file name"), ("nope.log", "no log file"), ("sub", "no log file"),
])
def test_tail_refuses_names_outside_or_missing(tmp_path, name, match):
    (tmp_path / "sub").mkdir()
    with pytest.raises(ValueError, match=match):
        readers.tail_log(str(tmp_path), name)


def test_tail_refuses_a_symlink_out_of_the_directory(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "link.log").symlink_to(secret)
    with pytest.raises(ValueError, match="no log file 'link.log'"):
        readers.tail_log(str(logs), "link.log")
    (logs / "real.log").write_text("ok\n")
    (logs / "inside.log").symlink_to(logs / "real.log")
    assert readers.tail_log(str(logs), "inside.log") == "ok"
    with pytest.raises(ValueError, match="lines must be a positive integer"):
        readers.tail_log(str(logs), "real.log", 0)


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
