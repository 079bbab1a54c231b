"""The tracing backend of the compose file (profile "tracing"): spans exported over OTLP by a
driver in the cluster land, as JSON lines, in the `otlp` service's traces volume."""
from __future__ import annotations

import json
import time

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
