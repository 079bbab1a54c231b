"""A minimal OTLP trace receiver for tests: a separate process that accepts OTLP/gRPC and
OTLP/HTTP (protobuf) exports on loopback and appends every span it receives as one JSON line
to an output file, in the ember_file exporter's shape (trace_id, span_id, parent_id, name,
service, start_ns, end_ns, status, error, attributes): the dashboard's traces page reads the
directory of that file as it reads an ember_file directory (the compose trace sink uses it).

    python -m ember.testing.otlp_receiver --out spans.jsonl --port-file ports.json

`OtlpReceiver` runs it from a test and reads the spans back.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}  # OTLP's Status.StatusCode


def _value(v: Any) -> Any:
    """An OTLP AnyValue as a plain JSON value."""
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind in ("kvlist_value", None):
        return None if kind is None else {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, kind)


def _spans(request: Any) -> list[dict[str, Any]]:
    """Each span as the ember_file exporter writes it (tracing._files.span_to_dict), so the
    dashboard's traces page reads the sink's file as it reads an ember_file directory."""
    out = []
    for rs in request.resource_spans:
        service = next((a.value.string_value for a in rs.resource.attributes
                        if a.key == "service.name"), "")
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append({"trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
                            "parent_id": s.parent_span_id.hex(), "name": s.name, "service": service,
                            "start_ns": s.start_time_unix_nano, "end_ns": s.end_time_unix_nano,
                            "status": _STATUS.get(s.status.code, "UNSET"), "error": s.status.message,
                            "attributes": {a.key: _value(a.value) for a in s.attributes}})
    return out


def start(out_path: str, host: str = "127.0.0.1", grpc_port: int = 0,
          http_port: int = 0) -> tuple[Any, ThreadingHTTPServer, int, int]:
    """Starts the gRPC and HTTP receivers (threads), appending spans to out_path; returns
    (grpc_server, http_server, grpc_port, http_port). The compose trace sink uses it too."""
    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as pb
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as pbg

    lock = threading.Lock()

    def record(request: Any) -> None:
        with lock, open(out_path, "a") as f:
            for span in _spans(request):
                f.write(json.dumps(span) + "\n")

    class TraceService(pbg.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:
            record(request)
            return pb.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(4))
    pbg.add_TraceServiceServicer_to_server(TraceService(), server)  # type: ignore[no-untyped-call]  # generated code
    bound_grpc = server.add_insecure_port(f"{host}:{grpc_port}")
    server.start()

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

    http = ThreadingHTTPServer((host, http_port), Handler)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    return server, http, bound_grpc, http.server_address[1]


def serve(out_path: str, port_file: str) -> None:
    server, _, grpc_port, http_port = start(out_path)
    tmp = port_file + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"grpc": grpc_port, "http": http_port}, f)
    os.replace(tmp, port_file)
    server.wait_for_termination()


class OtlpReceiver:
    """Runs the receiver as a subprocess on loopback; `spans()` reads what it got so far."""

    def __init__(self, directory: str) -> None:
        self.out = os.path.join(directory, "otlp-spans.jsonl")
        port_file = os.path.join(directory, "otlp-ports.json")
        self.proc = subprocess.Popen([sys.executable, "-m", "ember.testing.otlp_receiver",
                                      "--out", self.out, "--port-file", port_file])
        deadline = time.monotonic() + 20
        while not os.path.exists(port_file):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the OTLP receiver did not start")
            time.sleep(0.05)
        with open(port_file) as f:
            ports = json.load(f)
        self.grpc_endpoint = f"http://127.0.0.1:{ports['grpc']}"
        self.http_endpoint = f"http://127.0.0.1:{ports['http']}"

    def spans(self) -> list[dict[str, Any]]:
        if not os.path.exists(self.out):
            return []
        with open(self.out) as f:
            return [json.loads(line) for line in f if line.strip()]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def __enter__(self) -> OtlpReceiver:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", required=True)
    p.add_argument("--port-file", required=True)
    ns = p.parse_args()
    serve(ns.out, ns.port_file)
