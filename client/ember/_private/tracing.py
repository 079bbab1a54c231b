"""OpenTelemetry tracing for every Ember process, configured by the standard OTEL_* variables.

    OTEL_TRACES_EXPORTER   otlp | console | ember_file | none (comma-separated; unset = none,
                           unless OTEL_EXPORTER_OTLP_ENDPOINT is set, which means otlp)
    OTEL_EXPORTER_OTLP_PROTOCOL  grpc (default) | http/protobuf
    OTEL_EXPORTER_OTLP_ENDPOINT  where the OTLP exporter sends
    OTEL_SERVICE_NAME      defaults per process: ember-driver, ember-worker, ember-gcs, ...
    OTEL_TRACES_SAMPLER / _ARG   read by the SDK
    EMBER_TRACE_DIR        the directory of the ember_file exporter (JSON lines; read by
                           `ember trace show`)

A hand-built TracerProvider does not read OTEL_TRACES_EXPORTER (only auto-instrumentation does),
so `setup()` does. With tracing off, `enabled()` is False and the hot paths skip every tracing
call. The trace context travels as W3C `traceparent` in gRPC metadata and in TaskSpec.trace_context,
so a task's execution span is the child of its submission wherever and whenever it runs.
"""
from __future__ import annotations

import json
import logging
import os
import threading
from typing import Any, Iterator, Sequence

log = logging.getLogger(__name__)

_enabled = False
_provider: Any = None
_tracer: Any = None
_lock = threading.Lock()


def enabled() -> bool:
    return _enabled


def _exporter_names() -> list[str]:
    raw = os.environ.get("OTEL_TRACES_EXPORTER")
    if raw is None:
        return ["otlp"] if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") else []
    return [n.strip().lower() for n in raw.split(",") if n.strip() and n.strip().lower() != "none"]


def setup(default_service_name: str) -> bool:
    """Configures the SDK once per process from the environment. Returns whether tracing is on."""
    global _enabled, _provider, _tracer
    with _lock:
        if _provider is not None:
            return _enabled
        names = _exporter_names()
        if not names:
            _provider = False
            return False
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        service = os.environ.get("OTEL_SERVICE_NAME") or default_service_name
        provider = TracerProvider(resource=Resource.create({"service.name": service,
                                                            "process.pid": os.getpid()}))
        for name in names:
            provider.add_span_processor(BatchSpanProcessor(_make_exporter(name, service)))
        trace.set_tracer_provider(provider)
        import atexit

        atexit.register(provider.shutdown)
        _provider = provider
        _tracer = trace.get_tracer("ember")
        _enabled = True
        return True


def _make_exporter(name: str, service: str) -> Any:
    if name == "otlp":
        proto = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                               os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"))
        if proto == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        elif proto == "http/protobuf":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # type: ignore[assignment]
        else:
            raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL={proto!r} is not supported "
                             "(use grpc or http/protobuf)")
        return OTLPSpanExporter()
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


def shutdown() -> None:
    """Flushes and stops exporting (SIGTERM, exit)."""
    if _enabled and _provider:
        _provider.shutdown()


def flush() -> None:
    if _enabled and _provider:
        _provider.force_flush(5000)


def span(name: str, context: Any = None, kind: str = "INTERNAL", **attributes: Any) -> Any:
    """A context manager for a span made current (only call when enabled())."""
    from opentelemetry.trace import SpanKind

    return _tracer.start_as_current_span(name, context=context, kind=getattr(SpanKind, kind),
                                         attributes={k: v for k, v in attributes.items() if v is not None})


def submit_span(name: str, carrier: Any, **attributes: Any) -> None:
    """A zero-length PRODUCER span for a submission, child of the current span; its context is
    written into carrier (the TaskSpec's trace_context) so that the execution span hangs off it.
    Cheaper than a current-span context manager: nothing is attached or detached."""
    from opentelemetry.trace import SpanKind, set_span_in_context

    sp = _tracer.start_span(name, kind=SpanKind.PRODUCER, attributes=attributes or None)
    inject(carrier, context=set_span_in_context(sp))
    sp.end()


def set_error(span_obj: Any, message: str) -> None:
    from opentelemetry.trace import Status, StatusCode

    span_obj.set_status(Status(StatusCode.ERROR, message[:500]))


class ServerInterceptor:
    """Makes a SERVER span (child of the caller's traceparent) around each traced unary RPC."""

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        import grpc

        handler = await continuation(details)
        if not _enabled or handler is None or handler.unary_unary is None:
            return handler
        md = {k: v for k, v in (details.invocation_metadata or ()) if isinstance(v, str)}
        if "traceparent" not in md:
            return handler
        inner = handler.unary_unary
        method = details.method.lstrip("/")

        async def traced(request: Any, context: Any) -> Any:
            with span(method, context=extract(md), kind="SERVER", **{"rpc.method": method}):
                return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(
            traced, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)


def tracer() -> Any:
    return _tracer


def inject(carrier: dict[str, str] | Any, context: Any = None) -> None:
    """Writes the current (or given) span context into a dict / proto map as traceparent."""
    from opentelemetry import propagate

    propagate.inject(carrier, context=context)


def extract(carrier: Any) -> Any:
    from opentelemetry import propagate

    return propagate.extract(dict(carrier))


def metadata() -> tuple[tuple[str, str], ...] | None:
    """gRPC metadata carrying the current trace context (None when tracing is off)."""
    if not _enabled:
        return None
    carrier: dict[str, str] = {}
    inject(carrier)
    return tuple(carrier.items()) or None


def metadata_from(trace_context: Any) -> tuple[tuple[str, str], ...] | None:
    """gRPC metadata for a task's own trace context (a TaskSpec.trace_context map)."""
    if not _enabled or not trace_context:
        return None
    return tuple(trace_context.items())


class FileSpanExporter:
    """Writes finished spans as JSON lines to <dir>/<service>-<pid>.jsonl (for `ember trace show`)."""

    def __init__(self, directory: str, service: str) -> None:
        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, f"{service}-{os.getpid()}.jsonl")
        self.service = service

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        with open(self.path, "a") as f:
            for s in spans:
                f.write(json.dumps(span_to_dict(s, self.service)) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def span_to_dict(s: Any, service: str) -> dict[str, Any]:
    ctx = s.get_span_context()
    return {
        "trace_id": format(ctx.trace_id, "032x"), "span_id": format(ctx.span_id, "016x"),
        "parent_id": format(s.parent.span_id, "016x") if s.parent is not None else "",
        "name": s.name, "service": service, "start_ns": s.start_time, "end_ns": s.end_time,
        "status": s.status.status_code.name,
        "error": s.status.description or "",
        "attributes": {k: v for k, v in (s.attributes or {}).items()},
    }


def read_trace(directory: str, trace_id: str) -> list[dict[str, Any]]:
    """Every span of one trace found in an ember_file directory."""
    spans = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".jsonl"):
            continue
        with open(os.path.join(directory, name)) as f:
            for line in f:
                try:
                    d = json.loads(line)
                except ValueError:
                    continue
                if d.get("trace_id") == trace_id:
                    spans.append(d)
    return spans


def render_tree(spans: list[dict[str, Any]]) -> Iterator[str]:
    """Lines of an indented tree: service, span name, duration, errors."""
    by_parent: dict[str, list[dict[str, Any]]] = {}
    ids = {s["span_id"] for s in spans}
    for s in spans:
        parent = s["parent_id"] if s["parent_id"] in ids else ""
        by_parent.setdefault(parent, []).append(s)
    for children in by_parent.values():
        children.sort(key=lambda s: s["start_ns"])

    def walk(parent: str, depth: int) -> Iterator[str]:
        for s in by_parent.get(parent, []):
            ms = (s["end_ns"] - s["start_ns"]) / 1e6
            first = (s["error"] or "").splitlines()[:1]
            err = f"  ERROR {first[0] if first else ''}" if s["status"] == "ERROR" else ""
            yield f"{'  ' * depth}{s['service']:16} {s['name']}  {ms:.2f} ms{err}"
            yield from walk(s["span_id"], depth + 1)

    yield from walk("", 0)
