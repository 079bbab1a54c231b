"""The span exporters `tracing.setup()` makes from OTEL_TRACES_EXPORTER (`make_exporter`): the
OTLP/gRPC one sends the request bytes `otlp_encoding` writes (SpanBuffer's records encoded as
they are), halving any request over MAX_REQUEST_BYTES; the OTLP/HTTP one encodes the SDK's
message the same way; console; ember_file (tracing_files). A module of its own so that the
driver's span relay (tracing_relay, a process of its own) makes the same exporter without
importing `tracing`."""
from __future__ import annotations

import os
from typing import Any

from .tracing_files import FileSpanExporter

# An OTLP/gRPC export request over this many bytes is sent as halves: receivers take 4 MiB by
# default (a batch of per-task spans is 300-600 KB unless task names are very long).
MAX_REQUEST_BYTES = 3 << 20


def make_exporter(name: str, service: str) -> Any:
    """The span exporter OTEL_TRACES_EXPORTER's name stands for, configured from the
    environment (service: the process's service name, for the ember_file exporter)."""
    if name == "otlp":
        from . import otlp_encoding

        proto = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                               os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"))
        if proto == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.trace.export import SpanExportResult

            class FastOTLPSpanExporter(OTLPSpanExporter):
                accepts_records = True  # SpanBuffer's tuples, encoded as they are
                resource: Any = None
                scope: Any = None

                def export(self, spans: Any, extra: bytes = b"") -> Any:
                    """Sends spans, encoded here, with extra (request bytes already encoded,
                    e.g. by the driver for its span relay) in one request; one too large for a
                    receiver goes in parts: extra alone, the spans in halves."""
                    data = otlp_encoding.encode_request(spans, self.resource, self.scope) if spans else b""
                    if len(data) + len(extra) > MAX_REQUEST_BYTES and (extra and spans or len(spans) > 1):
                        if extra:
                            parts = [self.export(spans), self.export([], extra)]
                        else:
                            half = len(spans) // 2
                            parts = [self.export(spans[:half]), self.export(spans[half:])]
                        return next((r for r in parts if r != SpanExportResult.SUCCESS), parts[0])
                    self.spans_in_bytes = len(spans)  # (extra's spans are not counted)
                    return self._export(data + extra)  # type: ignore[arg-type]

                spans_in_bytes = 0  # how many spans the bytes given to _export hold

                def _count_data(self, data: Any) -> int:  # the SDK's own export metrics
                    return self.spans_in_bytes if type(data) is bytes else len(data)

                def _translate_data(self, data: Any) -> Any:
                    if type(data) is bytes:  # export() encoded it
                        return data
                    return otlp_encoding.encode_request(data, self.resource, self.scope)

                def _initialize_channel_and_stub(self) -> None:
                    super()._initialize_channel_and_stub()  # type: ignore[no-untyped-call]
                    # The request goes as the bytes encode_request wrote (no serializer).
                    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as pb

                    channel: Any = self._channel
                    self._client = _RawExport(channel.unary_unary(  # type: ignore[assignment]
                        "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                        request_serializer=None,
                        response_deserializer=pb.ExportTraceServiceResponse.FromString))

            return FastOTLPSpanExporter()
        if proto == "http/protobuf":
            from opentelemetry.exporter.otlp.proto.http import trace_exporter as http_exporter

            # The HTTP exporter calls its module's encode_spans; ours makes the same message.
            http_exporter.encode_spans = otlp_encoding.encode_spans  # type: ignore[attr-defined,assignment]
            return http_exporter.OTLPSpanExporter()
        raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL={proto!r} is not supported "
                         "(use grpc or http/protobuf)")
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name == "ember_file":
        directory = os.environ.get("EMBER_TRACE_DIR")
        if not directory:
            raise ValueError("OTEL_TRACES_EXPORTER=ember_file needs EMBER_TRACE_DIR")
        return FileSpanExporter(directory, service)
    raise ValueError(f"OTEL_TRACES_EXPORTER={name!r} is not supported "
                     "(use otlp, console, ember_file or none)")


class _RawExport:
    """A TraceService stub whose Export sends bytes as they are."""

    def __init__(self, call: Any) -> None:
        self.Export = call
