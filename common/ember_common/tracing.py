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

With tracing on, every task makes two spans, so `submit_span` / `execute_span` have fast paths
for the default configuration (see "Per-task fast paths" below) and the OTLP exporters encode
with `otlp_encoding` (same messages as the SDK's encoder, about three times faster). Finished
spans go to a tracing_export.SpanBuffer (the SDK's BatchSpanProcessor's job, with a cheaper way
in: the fast paths queue a plain tuple per span, which the OTLP/gRPC exporter encodes as is).
Sampling is decided before anything is built: with the SDK's default parent-based samplers
(always_on, always_off, traceidratio at the root) the fast paths decide inline, and a task that
is not sampled only propagates the decision (its traceparent), recording nothing.
"""
from __future__ import annotations

import logging
import os
import re
import threading
import time
from typing import Any

from .tracing_files import FileSpanExporter, read_trace, render_tree, span_to_dict  # noqa: F401 (re-exported)

log = logging.getLogger(__name__)

_enabled = False
node_id = ""  # the node of this process (raylet, objmgr), for span attributes
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


def setup(default_service_name: str, node_id: str = "") -> bool:
    """Configures the SDK once per process from the environment. Returns whether tracing is on.
    node_id (raylet, objmgr, workers) becomes the resource attribute `ember.node_id`."""
    global _enabled, _provider, _tracer
    with _lock:
        if node_id:
            globals()["node_id"] = node_id
        if _provider is not None:
            return _enabled
        names = _exporter_names()
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
        exporters = [_make_exporter(name, service) for name in names]
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
        _init_fast_path(provider)
        return True


def _make_exporter(name: str, service: str) -> Any:
    if name == "otlp":
        from . import otlp_encoding

        proto = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                               os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"))
        if proto == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            class FastOTLPSpanExporter(OTLPSpanExporter):
                accepts_records = True  # SpanBuffer's tuples, encoded as they are
                resource: Any = None
                scope: Any = None

                def _translate_data(self, data: Any) -> Any:
                    return otlp_encoding.encode_spans(data, self.resource, self.scope)

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


def shutdown() -> None:
    """Flushes and stops exporting (SIGTERM, exit)."""
    if _enabled and _provider:
        _provider.shutdown()


def flush() -> None:
    if _enabled and _provider:
        _provider.force_flush(5000)


# ---------------------------------------------------------------------------------------------
# Per-task fast paths. A task makes two spans (submit in the caller, execute in the worker), so
# their cost is the tracing overhead of the task hot path. The SDK's generic path (start_span +
# propagator inject/extract + start_as_current_span) costs ~40-50 µs per span; these do the
# same for the common configuration — W3C trace context propagation and a parent-based
# sampler (the SDK default) — in a fraction of it, and fall back to the generic path otherwise
# (another propagator or sampler, baggage, a malformed header).

_fast = False
_sampler: Any = None
_id_gen: Any = None
_processor: Any = None
_resource: Any = None
_scope: Any = None
_random_flag = 0
_otel: Any = None  # namespace of OpenTelemetry names the fast paths use
_root_bound: int | None = None  # a root is sampled iff trace_id's low 64 bits < this (None: ask the sampler)
_buffer: Any = None  # the SpanBuffer, when the fast paths may queue records into it directly
_only_buffer: Any = None  # the provider's processor tuple while the SpanBuffer is its only one


def _init_fast_path(provider: Any) -> None:
    global _fast, _sampler, _id_gen, _processor, _resource, _scope, _random_flag, _otel
    global _buffer, _only_buffer, _LightSpan
    import types

    from opentelemetry import baggage, context, propagate, trace
    from opentelemetry.baggage.propagation import W3CBaggagePropagator
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.sampling import ParentBased
    from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags, TraceState, set_span_in_context
    from opentelemetry.trace import propagation as trace_propagation
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    try:
        sampler, id_gen = provider.sampler, provider.id_generator
        processor, resource = provider._active_span_processor, provider.resource
        scope = _tracer._instrumentation_scope
    except AttributeError:  # another SDK version: the generic path still works
        return
    prop = propagate.get_global_textmap()
    parts = getattr(prop, "_propagators", [prop])
    w3c = all(isinstance(p, (TraceContextTextMapPropagator, W3CBaggagePropagator)) for p in parts)
    w3c = w3c and any(isinstance(p, TraceContextTextMapPropagator) for p in parts)
    _sampler, _id_gen, _processor, _resource, _scope = sampler, id_gen, processor, resource, scope
    _random_flag = int(getattr(TraceFlags, "RANDOM_TRACE_ID", 0)) if id_gen.is_trace_id_random() else 0
    _init_sampling(sampler)
    from .tracing_export import SpanBuffer, to_readable

    procs: Any = getattr(processor, "_span_processors", ())
    if len(procs) == 1 and isinstance(procs[0], SpanBuffer):
        _buffer, _only_buffer = procs[0], procs
    _otel = types.SimpleNamespace(
        baggage=baggage, context=context, ReadableSpan=ReadableSpan,
        NonRecordingSpan=NonRecordingSpan, SpanContext=SpanContext, SpanKind=SpanKind,
        TraceFlags=TraceFlags, TraceState=TraceState, set_span_in_context=set_span_in_context,
        get_current_span=trace.get_current_span, parent_based=isinstance(sampler, ParentBased),
        get_current=context.get_current, to_readable=to_readable,
        span_key=getattr(trace_propagation, "_SPAN_KEY", None),
        baggage_key=getattr(baggage, "_BAGGAGE_KEY", None))
    w3c = w3c and _otel.span_key is not None and _otel.baggage_key is not None
    _fast = w3c
    _LightSpan = _light_span_class()


def _init_sampling(sampler: Any) -> None:
    """_root_bound for the SDK's parent-based samplers whose decision the fast paths can make
    inline: the default children's samplers, and always_on / always_off / traceidratio at the
    root. Any other sampler is asked (its should_sample) for every root span."""
    global _root_bound
    from opentelemetry.sdk.trace import sampling as smp

    _root_bound = None
    if not isinstance(sampler, smp.ParentBased):
        return
    defaults = (getattr(sampler, "_remote_parent_sampled", None) is smp.ALWAYS_ON
                and getattr(sampler, "_remote_parent_not_sampled", None) is smp.ALWAYS_OFF
                and getattr(sampler, "_local_parent_sampled", None) is smp.ALWAYS_ON
                and getattr(sampler, "_local_parent_not_sampled", None) is smp.ALWAYS_OFF)
    root = getattr(sampler, "_root", None)
    if not defaults:
        return
    if root is smp.ALWAYS_ON:
        _root_bound = 1 << 64
    elif root is smp.ALWAYS_OFF:
        _root_bound = 0
    elif type(root) is smp.TraceIdRatioBased:
        _root_bound = root.bound


def _emit(rec: tuple[Any, ...]) -> None:
    """A finished fast-path span (a tracing_export RECORD) to the span processors: queued as is
    while the SpanBuffer is the only one, else as an SDK ReadableSpan."""
    if _buffer is not None and _processor._span_processors is _only_buffer:
        _buffer.add_record(rec)
    else:
        _processor.on_end(_otel.to_readable(rec, _resource, _scope))


_LightSpan: Any = None
_VALUE_TYPES = (str, bool, int, float)


def _light_span_class() -> Any:
    """A recording span with the SDK Span's behaviour for what code does with a current span
    (attributes, events, exceptions, status, name), made without its locks, limits and
    per-span bookkeeping; on end it goes to the span processors as a ReadableSpan. Span
    processors' on_start is not called for it (Ember's own processors do nothing there)."""
    import traceback

    from opentelemetry.sdk.trace import Event
    from opentelemetry.trace import Span, Status, StatusCode

    unset = Status(StatusCode.UNSET)  # immutable: shared by every span until one sets its status

    class LightSpan(Span):
        __slots__ = ("_name", "_ctx", "_parent", "_attrs", "_kind", "_events", "_status",
                     "_start", "_end")

        def __init__(self, name: str, ctx: Any, parent: Any, attributes: dict[str, Any],
                     kind: Any) -> None:
            self._name, self._ctx, self._parent, self._attrs = name, ctx, parent, attributes
            self._events: list[Any] = []
            self._kind, self._status = kind, unset
            self._end: int | None = None
            self._start = time.time_ns()

        def get_span_context(self) -> Any:
            return self._ctx

        def is_recording(self) -> bool:
            return self._end is None

        def set_attribute(self, key: str, value: Any) -> None:
            if self._end is not None or not key or not isinstance(key, str):
                return
            if isinstance(value, _VALUE_TYPES):
                self._attrs[key] = value
            elif isinstance(value, (list, tuple)) and all(isinstance(v, _VALUE_TYPES) for v in value):
                self._attrs[key] = tuple(value)
            else:
                log.warning("invalid span attribute %s=%r (not a str/bool/int/float or a sequence "
                            "of them): dropped", key, value)

        def set_attributes(self, attributes: Any) -> None:
            for k, v in attributes.items():
                self.set_attribute(k, v)

        def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None) -> None:
            if self._end is None:
                self._events.append(Event(name, attributes, timestamp or time.time_ns()))

        def add_link(self, context: Any, attributes: Any = None) -> None:
            log.warning("links can only be added when a span starts: dropped")

        def update_name(self, name: str) -> None:
            if self._end is None:
                self._name = name

        def set_status(self, status: Any, description: str | None = None) -> None:
            if self._end is not None or self._status.status_code is StatusCode.OK:
                return  # OK is final, as in the SDK
            if isinstance(status, Status):
                self._status = status
            elif status is not StatusCode.UNSET:
                self._status = Status(status, description if status is StatusCode.ERROR else None)

        def record_exception(self, exception: BaseException, attributes: Any = None,
                             timestamp: int | None = None, escaped: bool = False) -> None:
            typ = type(exception)
            module = typ.__module__
            attrs = {"exception.type": f"{module}.{typ.__qualname__}"
                     if module and module != "builtins" else typ.__qualname__,
                     "exception.message": str(exception),
                     "exception.stacktrace": "".join(traceback.format_exception(exception)),
                     "exception.escaped": str(escaped)}
            attrs.update(attributes or {})
            self.add_event("exception", attrs, timestamp)

        def end(self, end_time: int | None = None) -> None:
            if self._end is not None:
                return
            self._end = end_time or time.time_ns()
            ctx = self._ctx
            _emit((self._name, ctx.trace_id, ctx.span_id, int(ctx.trace_flags), ctx.trace_state,
                   self._parent, self._kind, self._start, self._end, self._attrs, self._status,
                   tuple(self._events)))

        def __repr__(self) -> str:
            return f"LightSpan(name={self._name!r}, context={self._ctx!r})"

    return LightSpan


def span(name: str, context: Any = None, kind: str = "INTERNAL", **attributes: Any) -> Any:
    """A context manager for a span made current (only call when enabled())."""
    from opentelemetry.trace import SpanKind

    return _tracer.start_as_current_span(name, context=context, kind=getattr(SpanKind, kind),
                                         attributes={k: v for k, v in attributes.items() if v is not None})


def submit_span(name: str, carrier: Any, **attributes: Any) -> None:
    """A zero-length PRODUCER span for a submission, child of the current span; its context is
    written into carrier (the TaskSpec's trace_context) so that the execution span hangs off it.
    Nothing is attached or detached; on the fast path no SDK Span is made either: the finished
    span goes straight to the span processors."""
    o = _otel
    if not _fast:
        _submit_span_generic(name, carrier, attributes)
        return
    current = o.get_current()
    if current.get(o.baggage_key):
        _submit_span_generic(name, carrier, attributes)
        return
    span = current.get(o.span_key)
    parent = span.get_span_context() if span is not None else None
    if parent is not None and parent.is_valid:
        if not o.parent_based:
            _submit_span_generic(name, carrier, attributes)
            return
        trace_id, flags, state = parent.trace_id, int(parent.trace_flags), parent.trace_state
        sampled = flags & 1
        if not sampled:  # propagate the decision; nothing is recorded
            carrier["traceparent"] = f"00-{trace_id:032x}-{parent.span_id:016x}-{flags:02x}"
            if state:
                carrier["tracestate"] = state.to_header()
            return
    else:
        parent = None
        trace_id = _id_gen.generate_trace_id()
        if _root_bound is not None:  # decided inline, before anything is built
            sampled = 1 if trace_id & 0xFFFFFFFFFFFFFFFF < _root_bound else 0
        else:
            result = _sampler.should_sample(None, trace_id, name, o.SpanKind.PRODUCER, attributes)
            if result.trace_state:
                _submit_span_generic(name, carrier, attributes)
                return
            if result.attributes and result.attributes != attributes:  # the sampler added some
                attributes = dict(result.attributes)
            sampled = 1 if result.decision.is_sampled() else 0
        flags, state = sampled | _random_flag, None
    span_id = _id_gen.generate_span_id()
    if sampled:
        now = time.time_ns()
        _emit((name, trace_id, span_id, flags, state, parent, o.SpanKind.PRODUCER, now, now,
               attributes, None, ()))
    carrier["traceparent"] = f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"
    if state:
        carrier["tracestate"] = state.to_header()


def _submit_span_generic(name: str, carrier: Any, attributes: dict[str, Any]) -> None:
    from opentelemetry.trace import SpanKind, set_span_in_context

    sp = _tracer.start_span(name, kind=SpanKind.PRODUCER, attributes=attributes or None)
    inject(carrier, context=set_span_in_context(sp))
    sp.end()


def execute_span(name: str, carrier: Any, **attributes: Any) -> Any:
    """A context manager: the CONSUMER span of a task's execution, child of the submission
    whose context is in carrier, made current for the task's own spans and submissions.
    Exceptions are recorded and set the status to ERROR."""
    parent = _parse_traceparent(carrier) if _fast else None
    if parent is None:
        return span(name, context=extract(carrier), kind="CONSUMER", **attributes)
    return _CurrentSpan(name, parent, {k: v for k, v in attributes.items() if v is not None})


_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


def _parse_traceparent(carrier: Any) -> Any:
    """The remote parent context from a W3C traceparent, or None (use the generic path)."""
    tp = carrier.get("traceparent")
    if not tp or len(carrier) != ("tracestate" in carrier) + 1:
        return None  # none, or baggage / other headers too
    m = _TRACEPARENT.fullmatch(tp)
    if m is None:
        return None
    trace_id, span_id, flags = int(m[1], 16), int(m[2], 16), int(m[3], 16)
    if not trace_id or not span_id:
        return None
    o = _otel
    state = o.TraceState.from_header([carrier["tracestate"]]) if "tracestate" in carrier else None
    return o.SpanContext(trace_id, span_id, True, o.TraceFlags(flags), state)


class _CurrentSpan:
    """start_span + attach, end + detach: what start_as_current_span does, without its
    generator-based context managers."""

    __slots__ = ("name", "parent", "attributes", "span", "token")

    def __init__(self, name: str, parent: Any, attributes: dict[str, Any]) -> None:
        self.name, self.parent, self.attributes = name, parent, attributes

    def __enter__(self) -> Any:
        o, parent = _otel, self.parent
        if not o.parent_based:  # the sampler must decide: the SDK's own span
            ctx = o.set_span_in_context(o.NonRecordingSpan(parent))
            sp = _tracer.start_span(self.name, context=ctx, kind=o.SpanKind.CONSUMER,
                                    attributes=self.attributes)
        else:  # parent-based sampling: the remote parent's flag decides
            ctx = o.SpanContext(parent.trace_id, _id_gen.generate_span_id(), False,
                                parent.trace_flags, parent.trace_state)
            sp = (_LightSpan(self.name, ctx, parent, self.attributes, o.SpanKind.CONSUMER)
                  if parent.trace_flags & 1 else o.NonRecordingSpan(ctx))
        self.span = sp
        self.token = o.context.attach(o.set_span_in_context(sp))
        return sp

    def __exit__(self, typ: Any, exc: Any, tb: Any) -> None:
        sp = self.span
        try:
            if exc is not None and sp.is_recording():
                sp.record_exception(exc)
                set_error(sp, f"{typ.__name__}: {exc}")
        finally:
            sp.end()
            _otel.context.detach(self.token)


def annotate(**attributes: Any) -> None:
    """Adds attributes to the current span (only call when enabled())."""
    from opentelemetry import trace

    trace.get_current_span().set_attributes({k: v for k, v in attributes.items() if v is not None})


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


def server_span(method: str, invocation_metadata: Any) -> Any:
    """A SERVER span for a streaming RPC handler (the interceptor traces unary ones), child of
    the caller's traceparent; a no-op context when tracing is off or the caller sent none."""
    import contextlib

    if not _enabled:
        return contextlib.nullcontext()
    md = {k: v for k, v in (invocation_metadata or ()) if isinstance(v, str)}
    if "traceparent" not in md:
        return contextlib.nullcontext()
    return span(method, context=extract(md), kind="SERVER", **{"rpc.method": method})


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
