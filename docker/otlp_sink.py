#!/opt/ember/bin/python
"""The compose file's tracing backend (profile `tracing`): an OTLP receiver on 0.0.0.0:4317
(gRPC) and 0.0.0.0:4318 (HTTP/protobuf) that appends every span as one JSON line
(trace_id, span_id, parent_id, name, service) to --out, on the `traces` volume.

No tracing image can be pulled here, so this runs ember.testing.otlp_receiver's receivers; any OTLP collector or Jaeger can replace it (point OTEL_EXPORTER_OTLP_ENDPOINT there).
Read the spans with `docker compose exec otlp cat /var/lib/ember/traces/spans.jsonl`.
"""
from __future__ import annotations

import argparse
import os
import signal
import threading


def main() -> None:
    from ember.testing.otlp_receiver import start

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", required=True)
    p.add_argument("--port-file", default="")
    p.add_argument("--grpc-port", type=int, default=4317)
    p.add_argument("--http-port", type=int, default=4318)
    ns = p.parse_args()
    os.makedirs(os.path.dirname(ns.out) or ".", exist_ok=True)
    server, http, _, http_port = start(ns.out, "0.0.0.0", ns.grpc_port, ns.http_port)
    if ns.port_file:
        with open(ns.port_file, "w") as f:
            f.write(str(http_port))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    http.shutdown()
    server.stop(2).wait()


if __name__ == "__main__":
    main()
