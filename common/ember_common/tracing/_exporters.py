"""The span exporters `setup()` makes from OTEL_TRACES_EXPORTER (`make_exporter`): the
OTLP/gRPC one (_otlp_grpc) sends the request bytes _otlp writes (SpanBuffer's records encoded
as they are), halving any request over MAX_REQUEST_BYTES; the OTLP/HTTP one encodes the SDK's
message the same way; console; ember_file (_files). A module of its own so that the driver's
span relay (_relay, a process of its own) makes the same exporter as the driver would."""
from __future__ import annotations

import os
from typing import Any

from .. import envvars
from ._files import FileSpanExporter


def make_exporter(name: str, service: str) -> Any:
    """The span exporter OTEL_TRACES_EXPORTER's name stands for, configured from the
    environment (service: the process's service name, for the ember_file exporter)."""
    if name == "otlp":
        from . import _otlp

        proto = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                               os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"))
        if proto == "grpc":
            from ._otlp_grpc import FastOTLPSpanExporter

            return FastOTLPSpanExporter()
        if proto == "http/protobuf":
            from opentelemetry.exporter.otlp.proto.http import trace_exporter as http_exporter

            # The HTTP exporter calls its module's encode_spans; ours makes the same message.
            http_exporter.encode_spans = _otlp.encode_spans  # type: ignore[attr-defined,assignment]
            return http_exporter.OTLPSpanExporter()
        raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL={proto!r} is not supported "
                         "(use grpc or http/protobuf)")
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name == "ember_file":
        directory = envvars.get("EMBER_TRACE_DIR")
        if not directory:
            raise ValueError("OTEL_TRACES_EXPORTER=ember_file needs EMBER_TRACE_DIR")
        return FileSpanExporter(directory, service)
    raise ValueError(f"OTEL_TRACES_EXPORTER={name!r} is not supported "
                     "(use otlp, console, ember_file or none)")

