"""OpenTelemetry tracing for every Ember process, configured by the standard OTEL_* variables.

    OTEL_TRACES_EXPORTER   otlp | console | ember_file | none (comma-separated; unset = none,
                           unless OTEL_EXPORTER_OTLP_ENDPOINT is set, which means otlp)
    OTEL_EXPORTER_OTLP_PROTOCOL  grpc (default) | http/protobuf
    OTEL_EXPORTER_OTLP_ENDPOINT  where the OTLP exporter sends
    OTEL_SERVICE_NAME      defaults per process: ember-driver, ember-worker, ember-gcs, ...
    OTEL_TRACES_SAMPLER / _ARG   read by the SDK
    EMBER_TRACE_DIR        the directory of the ember_file exporter (JSON lines; read by
                           `ember trace show`)
    EMBER_TRACE_RELAY      0: a driver exports its spans itself (default: through a child
                           process, tracing_relay, off the driver's GIL)

A hand-built TracerProvider does not read OTEL_TRACES_EXPORTER (only auto-instrumentation does),
so `setup()` does. With tracing off, `enabled()` is False and the hot paths skip every tracing
call. The trace context travels as W3C `traceparent` in gRPC metadata and with a task in
TaskSpec.trace_parent (25 raw bytes, tracing_submit) or TaskSpec.trace_context (the generic
path's headers), so a task's execution span is the child of its submission wherever and
whenever it runs.

With tracing on, every task makes two spans, so `submit_span` / `execute_span` / `task_span`
have fast paths for the default configuration (tracing_spans, tracing_light: a task's execute
span is a lazy span recorded as one record), and the OTLP/gRPC exporter sends the request bytes
`otlp_encoding` writes (the SDK encoder's message, written directly). Finished spans go to a
tracing_export.SpanBuffer (the SDK's BatchSpanProcessor's job, with a cheaper way in: the fast
paths queue a plain tuple per span, which the OTLP/gRPC exporter encodes as is). Sampling is
decided before anything is built: with the SDK's default parent-based samplers (always_on,
always_off, traceidratio at the root) the fast paths decide inline, and a task that is not
sampled only propagates the decision (its traceparent), recording nothing. A task's execute
span that ends cleanly and untouched is left to the owner's task events, and the GCS exports it
(tracing_derived).
"""
from __future__ import annotations

import functools
import logging
import os
import threading
from typing import Any, Callable

from . import tracing_spans
from .tracing_exporters import make_exporter
from .tracing_files import FileSpanExporter, read_trace, render_tree, span_to_dict  # noqa: F401 (re-exported)
from .tracing_spans import execute_span as execute_span  # the API callers use, re-exported
from .tracing_spans import extract as extract
from .tracing_spans import inject as inject
from .tracing_spans import parse_trace_parent as parse_trace_parent
from .tracing_spans import set_error as set_error
from .tracing_spans import span as span
from .tracing_spans import submit_span as submit_span
from .tracing_spans import task_span as task_span
from .tracing_spans import traceparent as traceparent
from .tracing_submit import task_submitted as task_submitted
from .tracing_submit import trace_id_hex as trace_id_hex

log = logging.getLogger(__name__)

_enabled = False
node_id = ""  # the node of this process (raylet, objmgr), for span attributes
_provider: Any = None
_tracer: Any = None
_lock = threading.Lock()


def enabled() -> bool:
    return _enabled


def exporter_names() -> list[str]:
    """The exporters OTEL_TRACES_EXPORTER names (none: tracing off)."""
    raw = os.environ.get("OTEL_TRACES_EXPORTER")
    if raw is None:
        return ["otlp"] if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") else []
    return [n.strip().lower() for n in raw.split(",") if n.strip() and n.strip().lower() != "none"]


def _task_executing_unset(name: str, spec: Any, node_id: str, worker_id: str, tp: bytes | None = None) -> Any:
    from .tracing_exec import task_executing as f

    return f(name, spec, node_id, worker_id, tp)


# The worker's execute span (tracing_exec.task_executing; callers check tracing is on). Bound
# by setup(): tracing_exec is imported only when tracing is on, because a forked worker that
# never traces otherwise pays ~0.7 MB of private memory for it (measured: the idle actors of
# test_fork_server, PSS 15.6 -> 16.4 MB with the module in the fork server's template).
task_executing: Callable[..., Any] = _task_executing_unset


def _exec_begin_unset(*args: Any) -> Any:
    from .tracing_exec import begin as f

    return f(*args)


def _exec_finish_unset(*args: Any) -> Any:
    from .tracing_exec import finish as f

    return f(*args)


# A thread's synchronous task's execute span, the cheapest way (tracing_exec.begin / finish:
# None from exec_begin means task_executing's way); bound by setup() as task_executing is.
exec_begin: Callable[..., Any] = _exec_begin_unset
exec_finish: Callable[..., Any] = _exec_finish_unset


def setup(default_service_name: str, node_id: str = "") -> bool:
    """Configures the SDK once per process from the environment. Returns whether tracing is on.
    node_id (raylet, objmgr, workers) becomes the resource attribute `ember.node_id`."""
    global _enabled, _provider, _tracer, task_executing, exec_begin, exec_finish
    with _lock:
        if node_id:
            globals()["node_id"] = node_id
        if _provider is not None:
            return _enabled
        names = exporter_names()
        if not names:
            _provider = False
            return False
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider

        from .tracing_export import SpanBuffer

        service = os.environ.get("OTEL_SERVICE_NAME") or default_service_name
        attrs: dict[str, Any] = {"service.name": service, "process.pid": os.getpid()}
        if node_id:
            attrs["ember.node_id"] = node_id
        provider = TracerProvider(resource=Resource.create(attrs))
        exporters = [make_exporter(name, service) for name in names]
        if default_service_name == "ember-driver":
            from . import tracing_relay

            if tracing_relay.enabled():  # the driver's OTLP export in a child process
                exporters = [tracing_relay.RelayExporter(service, functools.partial(make_exporter, name, service))
                             if getattr(exp, "accepts_records", False) else exp
                             for exp, name in zip(exporters, names, strict=True)]
        # A task makes two spans; the SDK's default queue (2048) would drop spans at a few
        # thousand tasks a second, so the default here is 16384 (OTEL_BSP_MAX_QUEUE_SIZE wins).
        buffer = SpanBuffer(exporters, resource=provider.resource)
        provider.add_span_processor(buffer)
        trace.set_tracer_provider(provider)
        import atexit

        atexit.register(provider.shutdown)
        _provider = provider
        _tracer = trace.get_tracer("ember")
        buffer.scope = getattr(_tracer, "_instrumentation_scope", None)
        for exp in exporters:
            if getattr(exp, "accepts_records", False):
                exp.resource, exp.scope = provider.resource, buffer.scope
        _enabled = True
        tracing_spans.init(provider, _tracer)
        from . import tracing_exec, tracing_submit

        task_executing = tracing_exec.task_executing

        tracing_submit.init()
        tracing_exec.init()
        # begin's and finish's bodies themselves when the fast paths are on (a call fewer each)
        exec_begin = tracing_exec._begin if tracing_exec._on else tracing_exec.begin
        exec_finish = tracing_exec._finish if tracing_exec._on else tracing_exec.finish
        return True


def shutdown() -> None:
    """Flushes and stops exporting (SIGTERM, exit)."""
    if _enabled and _provider:
        _provider.shutdown()


def flush() -> None:
    if _enabled and _provider:
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
        if not _enabled or handler is None or handler.unary_unary is None:
            return handler
        md = {k: v for k, v in (details.invocation_metadata or ()) if isinstance(v, str)}
        if "traceparent" not in md:
            return handler
        inner = handler.unary_unary
        method = details.method.lstrip("/")

        async def traced(request: Any, context: Any) -> Any:
            with tracing_spans.server_span(method, md):
                return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(
            traced, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)


def server_span(method: str, invocation_metadata: Any) -> Any:
    """A SERVER span for a streaming RPC handler (the interceptor traces unary ones), child of
    the caller's traceparent; a no-op context when tracing is off or the caller sent none."""
    import contextlib

    if not _enabled:
        return contextlib.nullcontext()
    md = {k: v for k, v in (invocation_metadata or ()) if isinstance(v, str)}
    if "traceparent" not in md:
        return contextlib.nullcontext()
    return tracing_spans.server_span(method, md)


def tracer() -> Any:
    return _tracer


def metadata() -> tuple[tuple[str, str], ...] | None:
    """gRPC metadata carrying the current trace context (None when tracing is off)."""
    if not _enabled:
        return None
    carrier: dict[str, str] = {}
    inject(carrier)
    return tuple(carrier.items()) or None


def metadata_from(trace_context: Any, trace_parent: bytes = b"") -> tuple[tuple[str, str], ...] | None:
    """gRPC metadata for a task's own trace context (a TaskSpec's trace_parent when given, else
    its trace_context map)."""
    if not _enabled:
        return None
    if trace_parent:
        return (("traceparent", traceparent(trace_parent)),) if parse_trace_parent(trace_parent) else None
    if not trace_context:
        return None
    return tuple(trace_context.items())
