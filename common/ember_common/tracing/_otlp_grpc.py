"""The OTLP/gRPC span exporter `make_exporter("otlp")` makes: the SDK's, sending the request
bytes _otlp writes (SpanBuffer's records encoded as they are, no message object), halving any
request over MAX_REQUEST_BYTES. Imported only when such an exporter is made."""
from __future__ import annotations

from typing import Any

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from . import _otlp

# An OTLP/gRPC export request over this many bytes is sent as halves: receivers take 4 MiB by
# default (a batch of per-task spans is a few hundred KB unless task names are very long).
MAX_REQUEST_BYTES = 3 << 20


class FastOTLPSpanExporter(OTLPSpanExporter):
    """The SDK's OTLP/gRPC exporter, taking records and sending pre-encoded bytes."""

    accepts_records = True  # SpanBuffer's tuples, encoded as they are
    resource: Any = None
    scope: Any = None

    def export(self, spans: Any, extra: bytes = b"") -> Any:
        """Sends spans, encoded here, with extra (request bytes already encoded,
        e.g. by the driver for its span relay) in one request; one too large for a
        receiver goes in parts: extra alone, the spans in halves."""
        data = _otlp.encode_request(spans, self.resource, self.scope) if spans else b""
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
        return _otlp.encode_request(data, self.resource, self.scope)

    def _initialize_channel_and_stub(self) -> None:
        super()._initialize_channel_and_stub()  # type: ignore[no-untyped-call]
        # The request goes as the bytes encode_request wrote (no serializer).
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as pb

        channel: Any = self._channel
        self._client = _RawExport(channel.unary_unary(  # type: ignore[assignment]
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            request_serializer=None,
            response_deserializer=pb.ExportTraceServiceResponse.FromString))


class _RawExport:
    """A TraceService stub whose Export sends bytes as they are."""

    def __init__(self, call: Any) -> None:
        self.Export = call
