"""The tracer provider of this process: `setup()` configures OpenTelemetry's SDK from the
OTEL_* variables (see the package README), installs SpanBuffer with the exporters, and turns
the fast paths on; the helpers that need the provider (flush, shutdown, the gRPC interceptor,
metadata for outgoing calls) live here too.

A hand-built TracerProvider does not read OTEL_TRACES_EXPORTER (only auto-instrumentation
does), so `setup()` does. With tracing off, `_state.on` is False and the hot paths skip every
tracing call.
"""
from __future__ import annotations

import functools
import logging
import os
import threading
from typing import Any

from . import _context, _spans
from . import _state as st
from ._exporters import make_exporter

log = logging.getLogger(__name__)

_provider: Any = None
_lock = threading.Lock()


def exporter_names() -> list[str]:
    """The exporters OTEL_TRACES_EXPORTER names (none: tracing off)."""
    raw = os.environ.get("OTEL_TRACES_EXPORTER")
    if raw is None:
        return ["otlp"] if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") else []
    return [n.strip().lower() for n in raw.split(",") if n.strip() and n.strip().lower() != "none"]


def setup(default_service_name: str, node_id: str = "") -> bool:
    """Configures the SDK once per process from the environment. Returns whether tracing is on.
    node_id (raylet, objmgr, workers) becomes the resource attribute `ember.node_id`."""
    global _provider
    with _lock:
        if node_id:
            st.node_id = node_id
        if _provider is not None:
            return st.on
        names = exporter_names()
        if not names:
            _provider = False
            return False
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider

        from ._buffer import SpanBuffer

        service = os.environ.get("OTEL_SERVICE_NAME") or default_service_name
        attrs: dict[str, Any] = {"service.name": service, "process.pid": os.getpid()}
        if node_id:
            attrs["ember.node_id"] = node_id
        provider = TracerProvider(resource=Resource.create(attrs))
        exporters = [make_exporter(name, service) for name in names]
        if default_service_name == "ember-driver":
            from . import _relay

            if _relay.enabled():  # the driver's OTLP export in a child process
                exporters = [_relay.RelayExporter(service, functools.partial(make_exporter, name, service))
                             if getattr(exp, "accepts_records", False) else exp
                             for exp, name in zip(exporters, names, strict=True)]
        # A task makes two spans: the SDK's default queue (2048) would drop spans at a few
        # thousand tasks a second, so SpanBuffer's default is larger (OTEL_BSP_MAX_QUEUE_SIZE wins).
        buffer = SpanBuffer(exporters, resource=provider.resource)
        provider.add_span_processor(buffer)
        trace.set_tracer_provider(provider)
        import atexit

        atexit.register(provider.shutdown)
        _provider = provider
        tracer = trace.get_tracer("ember")
        buffer.scope = getattr(tracer, "_instrumentation_scope", None)
        for exp in exporters:
            if getattr(exp, "accepts_records", False):
                exp.resource, exp.scope = provider.resource, buffer.scope
        _spans.init(provider, tracer)
        from . import _exec, _submit

        _submit.init()
        _exec.init()
        st.on = True
        return True


def add_span_processor(processor: Any) -> None:
    """Adds a span processor beside SpanBuffer (tests; tracing on)."""
    _provider.add_span_processor(processor)


def shutdown() -> None:
    """Flushes and stops exporting (SIGTERM, exit)."""
    if st.on and _provider:
        _provider.shutdown()


def flush() -> None:
    """Exports every span finished so far (waits up to 5 s)."""
    if st.on and _provider:
        _provider.force_flush(5000)


def annotate(**attributes: Any) -> None:
    """Adds attributes to the current span (only call when enabled())."""
    from opentelemetry import trace

    trace.get_current_span().set_attributes({k: v for k, v in attributes.items() if v is not None})


class ServerInterceptor:
    """Makes a SERVER span (child of the caller's traceparent) around each traced unary RPC."""

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        import grpc

        handler = await continuation(details)
        if not st.on or handler is None or handler.unary_unary is None:
            return handler
        md = {k: v for k, v in (details.invocation_metadata or ()) if isinstance(v, str)}
        if "traceparent" not in md:
            return handler
        inner = handler.unary_unary
        method = details.method.lstrip("/")

        async def traced(request: Any, context: Any) -> Any:
            with _spans.server_span(method, md):
                return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(
            traced, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)


def server_span(method: str, invocation_metadata: Any) -> Any:
    """A SERVER span for a streaming RPC handler (the interceptor traces unary ones), child of
    the caller's traceparent; a no-op context when tracing is off or the caller sent none."""
    import contextlib

    if not st.on:
        return contextlib.nullcontext()
    md = {k: v for k, v in (invocation_metadata or ()) if isinstance(v, str)}
    if "traceparent" not in md:
        return contextlib.nullcontext()
    return _spans.server_span(method, md)


def tracer() -> Any:
    """The SDK tracer (None while tracing is off)."""
    return st.tracer


def metadata() -> tuple[tuple[str, str], ...] | None:
    """gRPC metadata carrying the current trace context (None when tracing is off)."""
    if not st.on:
        return None
    carrier: dict[str, str] = {}
    _spans.inject(carrier)
    return tuple(carrier.items()) or None


def metadata_from(trace_parent: bytes) -> tuple[tuple[str, str], ...] | None:
    """gRPC metadata for a task's own trace context (its TaskSpec's trace_parent)."""
    if not st.on or not trace_parent:
        return None
    if len(trace_parent) == _context.COMPACT_LEN:
        return (("traceparent", _context.traceparent(trace_parent)),) if _context.parse_trace_parent(trace_parent) else None
    return tuple(_context.carrier(trace_parent).items()) or None
