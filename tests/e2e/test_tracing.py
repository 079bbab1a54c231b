"""The tracing backend of the compose file (profile "tracing"): spans exported over OTLP by a
driver in the cluster land, as JSON lines, in the `otlp` service's traces volume, which the
dashboard's Traces page reads."""
from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

from .conftest import Cluster


def test_otlp_sink_receives_driver_spans(cluster: Cluster) -> None:
    cluster.run("--profile tracing up -d --no-deps --no-build otlp")
    cluster.wait_healthy(["otlp"], timeout_s=60)
    r = cluster.run("exec -T -e OTEL_TRACES_EXPORTER=otlp -e OTEL_EXPORTER_OTLP_ENDPOINT=http://otlp:4317 "
                    "-e OTEL_SERVICE_NAME=e2e-driver raylet-head python -c \"import ember; ember.init(); "
                    "f = ember.remote(lambda x: x + 1); print(ember.get(f.remote(1))); ember.shutdown()\"")
    assert r.stdout.strip().splitlines()[-1] == "2"
    deadline = time.monotonic() + 30
    while True:
        out = cluster.run("exec -T otlp cat /var/lib/ember/traces/spans.jsonl", check=False).stdout
        spans = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
        mine = [s for s in spans if s["service"] == "e2e-driver"]
        if mine:
            break
        assert time.monotonic() < deadline, f"no driver span reached the sink: {spans[:5]}"
        time.sleep(0.5)
    assert any(s["name"].startswith("submit") for s in mine), mine


def _dashboard_get(cluster: Cluster, path: str) -> Any:
    req = urllib.request.Request(f"http://127.0.0.1:{cluster.dashboard_port}{path}",
                                 headers={"Authorization": f"Bearer {cluster.token}"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=30) as r:
        return json.loads(r.read())


def test_the_dashboard_traces_page_reads_the_sink(cluster: Cluster) -> None:
    """The dashboard mounts the traces volume read-only: a driver's trace sent to the sink is
    listed by /api/traces and laid out by /api/traces/{id} (what the Traces page shows)."""
    cluster.run("--profile tracing up -d --no-deps --no-build otlp")
    cluster.wait_healthy(["otlp", "dashboard"], timeout_s=60)
    cluster.run("exec -T -e OTEL_TRACES_EXPORTER=otlp -e OTEL_EXPORTER_OTLP_ENDPOINT=http://otlp:4317 "
                "-e OTEL_SERVICE_NAME=e2e-dash-driver raylet-head python -c \"import ember; ember.init(); "
                "f = ember.remote(lambda x: x + 1); print(ember.get(f.remote(1))); ember.shutdown()\"")
    deadline = time.monotonic() + 30
    while True:
        found = _dashboard_get(cluster, "/api/traces?contains=e2e-dash-driver")
        if found["traces"]:
            break
        assert time.monotonic() < deadline, f"no trace of the driver on the dashboard: {found}"
        time.sleep(0.5)
    assert found["dir"] == "/var/lib/ember/traces"
    # The driver's calls are traces of their own (the task's submit and execute spans in one,
    # `get` in another): the task's trace is laid out with its submit span.
    deadline = time.monotonic() + 30
    while True:
        traces = _dashboard_get(cluster, "/api/traces?contains=e2e-dash-driver")["traces"]
        laid_out = {t["trace_id"]: _dashboard_get(cluster, f"/api/traces/{t['trace_id']}")["spans"] for t in traces}
        task = [t for t in traces if any(s["name"].startswith("submit") for s in laid_out[t["trace_id"]])]
        if task:
            break
        assert time.monotonic() < deadline, laid_out
        time.sleep(0.5)
    trace = task[0]
    assert "e2e-dash-driver" in trace["services"] and trace["duration_ms"] >= 0
