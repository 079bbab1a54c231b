#!/opt/ember/bin/python
"""The compose file's tracing backend (profile `tracing`): an OTLP receiver on 0.0.0.0:4317
(gRPC) and 0.0.0.0:4318 (HTTP/protobuf) that appends every span as one JSON line
(trace_id, span_id, parent_id, name, service) to --out, on the `traces` volume.

No tracing image can be pulled here, so this reuses ember.testing.otlp_receiver's span
decoding; any OTLP collector or Jaeger can replace it (point OTEL_EXPORTER_OTLP_ENDPOINT there).
Read the spans with `docker compose exec otlp cat /var/lib/ember/traces/spans.jsonl`.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def main() -> None:
    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as pb
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as pbg

    from ember.testing.otlp_receiver import _spans

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", required=True)
    p.add_argument("--port-file", default="")
    p.add_argument("--grpc-port", type=int, default=4317)
    p.add_argument("--http-port", type=int, default=4318)
    ns = p.parse_args()
    os.makedirs(os.path.dirname(ns.out) or ".", exist_ok=True)
    lock = threading.Lock()

    def record(request: Any) -> None:
        with lock, open(ns.out, "a") as f:
            for span in _spans(request):
                f.write(json.dumps(span) + "\n")

    class TraceService(pbg.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:
            record(request)
            return pb.ExportTraceServiceResponse()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            record(pb.ExportTraceServiceRequest.FromString(body))
            payload = pb.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:  # health probe
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = grpc.server(futures.ThreadPoolExecutor(4))
    pbg.add_TraceServiceServicer_to_server(TraceService(), server)
    server.add_insecure_port(f"0.0.0.0:{ns.grpc_port}")
    server.start()
    http = ThreadingHTTPServer(("0.0.0.0", ns.http_port), Handler)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    if ns.port_file:
        with open(ns.port_file, "w") as f:
            f.write(str(ns.http_port))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    http.shutdown()
    server.stop(2).wait()


if __name__ == "__main__":
    main()
