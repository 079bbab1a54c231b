"""The per-task spans: fast paths for a task's `submit` and `execute` spans, and the generic
span helpers (`span`, `inject`, `extract`, `set_error`). `tracing.setup()` calls `init()`;
callers use these through `ember_common.tracing`, which re-exports them.

A task makes two spans (submit in the caller, execute in the worker), so their cost is the
tracing overhead of the task hot path. The SDK's generic path (start_span + propagator
inject/extract + start_as_current_span) costs ~40-50 µs per span; these do the same for the
common configuration — W3C trace context propagation and a parent-based sampler (the SDK
default) — in a fraction of it, and fall back to the generic path otherwise (another
propagator or sampler, baggage, a malformed header).

Sampling is decided before anything is built: with the SDK's default parent-based samplers
(always_on, always_off, traceidratio at the root) the decision is inline, and a task that is
not sampled only propagates it (its traceparent), recording nothing.

A task's execute span (`task_span`, the executor's) is lazy: while the task runs, the current
span only holds the traceparent's ids; its SpanContext is built when code asks for it (a child
span, a nested submission), and at the end it is queued as one record (attributes computed
then). Only when the user's code changes the current span (attributes, events, status, ...)
does it become a LightSpan, recorded the same way.
"""
from __future__ import annotations

import logging
import re
import time
from typing import Any, Callable

log = logging.getLogger(__name__)

_M64 = (1 << 64) - 1  # the low 64 bits of a trace id

_tracer: Any = None
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
_LightSpan: Any = None
_TaskSpan: Any = None


def init(provider: Any, tracer: Any) -> None:
    """Called by tracing.setup() once the provider is installed."""
    global _tracer, _fast, _sampler, _id_gen, _processor, _resource, _scope, _random_flag, _otel
    global _buffer, _only_buffer, _LightSpan, _TaskSpan
    import types

    from opentelemetry import baggage, context, propagate, trace
    from opentelemetry.baggage.propagation import W3CBaggagePropagator
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.sampling import ParentBased
    from opentelemetry.trace import (
        NonRecordingSpan,
        SpanContext,
        SpanKind,
        Status,
        StatusCode,
        TraceFlags,
        TraceState,
        set_span_in_context,
    )
    from opentelemetry.trace import propagation as trace_propagation
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    _tracer = tracer
    try:
        sampler, id_gen = provider.sampler, provider.id_generator
        processor, resource = provider._active_span_processor, provider.resource
        scope = tracer._instrumentation_scope
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
    from .tracing_light import light_span_class, task_span_class

    procs: Any = getattr(processor, "_span_processors", ())
    if len(procs) == 1 and isinstance(procs[0], SpanBuffer):
        _buffer, _only_buffer = procs[0], procs
    _otel = types.SimpleNamespace(
        baggage=baggage, context=context, ReadableSpan=ReadableSpan,
        NonRecordingSpan=NonRecordingSpan, SpanContext=SpanContext, SpanKind=SpanKind,
        TraceFlags=TraceFlags, TraceState=TraceState, set_span_in_context=set_span_in_context,
        Status=Status, StatusCode=StatusCode,
        get_current_span=trace.get_current_span, parent_based=isinstance(sampler, ParentBased),
        get_current=context.get_current, to_readable=to_readable, attach=context.attach,
        detach=context.detach, span_key=getattr(trace_propagation, "_SPAN_KEY", None),
        baggage_key=getattr(baggage, "_BAGGAGE_KEY", None))
    w3c = w3c and _otel.span_key is not None and _otel.baggage_key is not None
    _fast = w3c
    _LightSpan = light_span_class(_emit)
    _TaskSpan = task_span_class(_otel, _LightSpan, emit, id_gen.generate_span_id)


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


def emit(rec: tuple[Any, ...]) -> None:
    """A finished fast-path span (a tracing_export RECORD) to the span processors: queued as is
    while the SpanBuffer is the only one, else as an SDK ReadableSpan."""
    if _buffer is not None and _processor._span_processors is _only_buffer:
        _buffer.add_record(rec)
    else:
        _processor.on_end(_otel.to_readable(rec, _resource, _scope))


_emit = emit


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
            sampled = 1 if trace_id & _M64 < _root_bound else 0
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


def task_span(name: str, carrier: Any, attributes: Callable[[], dict[str, Any]],
              trace_parent: bytes = b"") -> Any:
    """A context manager: a task's CONSUMER execute span, as execute_span(name, carrier,
    **attributes()), made cheaply on the fast path: a lazy span (tracing_light.task_span_class)
    made current, recorded as one record at the end; attributes() is called only then (None
    values dropped), and not at all when the task is not sampled. trace_parent (the TaskSpec's
    compact context, tracing_submit) is taken when given, else carrier (trace_context)."""
    ids: tuple[int, int, int, str | None] | None = None
    if _fast and _otel.parent_based:
        if trace_parent:
            ids = parse_trace_parent(trace_parent)
        else:
            ids = _parse_ids(carrier)
    if ids is None:
        if trace_parent:
            carrier = {"traceparent": traceparent(trace_parent)} if parse_trace_parent(trace_parent) else {}
        return execute_span(name, carrier, **attributes())
    return _TaskContext(_TaskSpan(*ids, name, attributes))


class _TaskContext:
    __slots__ = ("span", "token")

    def __init__(self, span: Any) -> None:
        self.span = span

    def __enter__(self) -> Any:
        o = _otel
        self.token = o.attach(o.set_span_in_context(self.span))
        return self.span

    def __exit__(self, typ: Any, exc: Any, tb: Any) -> None:
        sp = self.span
        try:
            if exc is not None and sp.is_recording():
                sp.record_exception(exc)
                set_error(sp, f"{typ.__name__}: {exc}")
        finally:
            sp.end()
            _otel.detach(self.token)


def execute_span(name: str, carrier: Any, **attributes: Any) -> Any:
    """A context manager: the CONSUMER span of a task's execution, child of the submission
    whose context is in carrier, made current for the task's own spans and submissions.
    Exceptions are recorded and set the status to ERROR."""
    parent = _parse_traceparent(carrier) if _fast else None
    if parent is None:
        return span(name, context=extract(carrier), kind="CONSUMER", **attributes)
    return _CurrentSpan(name, parent, {k: v for k, v in attributes.items() if v is not None})


def server_span(method: str, md: dict[str, str]) -> Any:
    """A context manager: the SERVER span of an RPC whose metadata md carries a traceparent,
    made current while the handler runs (as span(method, context=extract(md), kind="SERVER",
    **{"rpc.method": method}) makes it), on the fast path a LightSpan (no propagator, no SDK
    span): a raylet makes one per lease request."""
    if _fast and "baggage" not in md:
        carrier = {"traceparent": md["traceparent"]}
        if "tracestate" in md:
            carrier["tracestate"] = md["tracestate"]
        parent = _parse_traceparent(carrier)
        if parent is not None:
            return _CurrentSpan(method, parent, {"rpc.method": method}, _otel.SpanKind.SERVER)
    return span(method, context=extract(md), kind="SERVER", **{"rpc.method": method})


def parse_trace_parent(tp: bytes) -> tuple[int, int, int, None] | None:
    """(trace id, parent span id, flags, no tracestate) from a TaskSpec.trace_parent (25 bytes:
    trace id, span id, flags; tracing_submit), or None when it is malformed (a wrong length, a
    zero id)."""
    if len(tp) != 25:
        return None
    trace_id, span_id = int.from_bytes(tp[:16], "big"), int.from_bytes(tp[16:24], "big")
    if not trace_id or not span_id:
        return None
    return trace_id, span_id, tp[24], None


def traceparent(tp: bytes) -> str:
    """The W3C traceparent header of a TaskSpec.trace_parent."""
    return f"00-{tp[:16].hex()}-{tp[16:24].hex()}-{tp[24]:02x}"


_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


def _parse_ids(carrier: Any) -> tuple[int, int, int, str | None] | None:
    """(trace id, parent span id, flags, tracestate header) from a W3C traceparent, or None
    (use the generic path)."""
    tp = carrier.get("traceparent")
    if not tp or len(carrier) != ("tracestate" in carrier) + 1:
        return None  # none, or baggage / other headers too
    m = _TRACEPARENT.fullmatch(tp)
    if m is None:
        return None
    trace_id, span_id = int(m[1], 16), int(m[2], 16)
    if not trace_id or not span_id:
        return None
    return trace_id, span_id, int(m[3], 16), carrier.get("tracestate") or None


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


class _CurrentSpan(_TaskContext):
    """start_span + attach, end + detach: what start_as_current_span does, without its
    generator-based context managers (ends as _TaskContext does)."""

    __slots__ = ("name", "parent", "attributes", "kind")

    def __init__(self, name: str, parent: Any, attributes: dict[str, Any], kind: Any = None) -> None:
        self.name, self.parent, self.attributes = name, parent, attributes
        self.kind = kind or _otel.SpanKind.CONSUMER

    def __enter__(self) -> Any:
        o, parent = _otel, self.parent
        if not o.parent_based:  # the sampler must decide: the SDK's own span
            ctx = o.set_span_in_context(o.NonRecordingSpan(parent))
            sp = _tracer.start_span(self.name, context=ctx, kind=self.kind, attributes=self.attributes)
        else:  # parent-based sampling: the remote parent's flag decides
            ctx = o.SpanContext(parent.trace_id, _id_gen.generate_span_id(), False,
                                parent.trace_flags, parent.trace_state)
            sp = (_LightSpan(self.name, ctx, parent, self.attributes, self.kind)
                  if parent.trace_flags & 1 else o.NonRecordingSpan(ctx))
        self.span = sp
        self.token = o.attach(o.set_span_in_context(sp))
        return sp


def set_error(span_obj: Any, message: str) -> None:
    from opentelemetry.trace import Status, StatusCode

    status = Status(StatusCode.ERROR, message[:500])
    if isinstance(span_obj, _TaskSpan):  # a TaskSpan or a tracing_exec.ExecSpan
        span_obj.keep_status(status)  # Ember's own: the span stays a light record
    else:
        span_obj.set_status(status)


def inject(carrier: dict[str, str] | Any, context: Any = None) -> None:
    """Writes the current (or given) span context into a dict / proto map as traceparent."""
    from opentelemetry import propagate

    propagate.inject(carrier, context=context)


def extract(carrier: Any) -> Any:
    from opentelemetry import propagate

    return propagate.extract(dict(carrier))
