"""The per-task spans: fast paths for a task's `submit` and `execute` spans, and the generic
span helpers (`span`, `inject`, `extract`, `set_error`). `setup()` calls `init()`; callers use
these through the package's face.

A task makes two spans (submit in the caller, execute in the worker), so their cost is the
tracing overhead of the task hot path. The SDK's generic path (start_span + propagator
inject/extract + start_as_current_span) does far more per span than a task needs; these do the
same for the common configuration — W3C trace context propagation and a parent-based sampler
(the SDK default) — with less, and fall back to the generic path otherwise (another propagator
or sampler, baggage, a malformed header).

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
import time
from typing import Any, Callable

from . import _state as st
from ._context import parse_ids, parse_trace_parent, traceparent
from ._records import SpanRecord

log = logging.getLogger(__name__)

def init(provider: Any, tracer: Any) -> None:
    """Fills _state once the provider is installed (setup())."""
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

    st.tracer = tracer
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
    st.sampler, st.id_gen, st.processor, st.resource, st.scope = sampler, id_gen, processor, resource, scope
    st.random_flag = int(getattr(TraceFlags, "RANDOM_TRACE_ID", 0)) if id_gen.is_trace_id_random() else 0
    st.root_bound = _root_bound_of(sampler)
    from ._buffer import SpanBuffer

    procs: Any = getattr(processor, "_span_processors", ())
    if len(procs) == 1 and isinstance(procs[0], SpanBuffer):
        st.buffer, st.only_buffer = procs[0], procs
    otel = st.otel = types.SimpleNamespace(
        baggage=baggage, context=context, ReadableSpan=ReadableSpan,
        NonRecordingSpan=NonRecordingSpan, SpanContext=SpanContext, SpanKind=SpanKind,
        TraceFlags=TraceFlags, TraceState=TraceState, set_span_in_context=set_span_in_context,
        Status=Status, StatusCode=StatusCode,
        get_current_span=trace.get_current_span, parent_based=isinstance(sampler, ParentBased),
        get_current=context.get_current, attach=context.attach,
        detach=context.detach, span_key=getattr(trace_propagation, "_SPAN_KEY", None),
        baggage_key=getattr(baggage, "_BAGGAGE_KEY", None))
    st.fast = w3c and otel.span_key is not None and otel.baggage_key is not None
    global _LightSpan, _TaskSpan
    from ._light import LightSpan, TaskSpan

    _LightSpan, _TaskSpan = LightSpan, TaskSpan


_LightSpan: Any = None  # _light's classes, once init() imported them (they subclass OpenTelemetry's)
_TaskSpan: Any = None


def _root_bound_of(sampler: Any) -> int | None:
    """The root bound for the SDK's parent-based samplers whose decision the fast paths can
    make inline: the default children's samplers, and always_on / always_off / traceidratio at
    the root; None (any other sampler is asked, its should_sample, for every root span)."""
    from opentelemetry.sdk.trace import sampling as smp

    if not isinstance(sampler, smp.ParentBased):
        return None
    defaults = (getattr(sampler, "_remote_parent_sampled", None) is smp.ALWAYS_ON
                and getattr(sampler, "_remote_parent_not_sampled", None) is smp.ALWAYS_OFF
                and getattr(sampler, "_local_parent_sampled", None) is smp.ALWAYS_ON
                and getattr(sampler, "_local_parent_not_sampled", None) is smp.ALWAYS_OFF)
    root = getattr(sampler, "_root", None)
    if not defaults:
        return None
    if root is smp.ALWAYS_ON:
        return 1 << 64
    if root is smp.ALWAYS_OFF:
        return 0
    if type(root) is smp.TraceIdRatioBased:
        return int(root.bound)
    return None


def span(name: str, context: Any = None, kind: str = "INTERNAL", **attributes: Any) -> Any:
    """A context manager for a span made current (only call when enabled())."""
    from opentelemetry.trace import SpanKind

    return st.tracer.start_as_current_span(name, context=context, kind=getattr(SpanKind, kind),
                                         attributes={k: v for k, v in attributes.items() if v is not None})


def submit_span(name: str, carrier: Any, **attributes: Any) -> None:
    """A zero-length PRODUCER span for a submission, child of the current span; its context is
    written into carrier (headers, for a TaskSpec: _context.encode) so that the execution span hangs off it.
    Nothing is attached or detached; on the fast path no SDK Span is made either: the finished
    span goes straight to the span processors."""
    o = st.otel
    if not st.fast:
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
        trace_id = st.id_gen.generate_trace_id()
        if st.root_bound is not None:  # decided inline, before anything is built
            sampled = 1 if trace_id & st.M64 < st.root_bound else 0
        else:
            result = st.sampler.should_sample(None, trace_id, name, o.SpanKind.PRODUCER, attributes)
            if result.trace_state:
                _submit_span_generic(name, carrier, attributes)
                return
            if result.attributes and result.attributes != attributes:  # the sampler added some
                attributes = dict(result.attributes)
            sampled = 1 if result.decision.is_sampled() else 0
        flags, state = sampled | st.random_flag, None
    span_id = st.id_gen.generate_span_id()
    if sampled:
        now = time.time_ns()
        st.emit(SpanRecord(name, trace_id, span_id, flags, state, parent, o.SpanKind.PRODUCER, now, now,
                          attributes, None, ()))
    carrier["traceparent"] = f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"
    if state:
        carrier["tracestate"] = state.to_header()


def _submit_span_generic(name: str, carrier: Any, attributes: dict[str, Any]) -> None:
    from opentelemetry.trace import SpanKind, set_span_in_context

    sp = st.tracer.start_span(name, kind=SpanKind.PRODUCER, attributes=attributes or None)
    inject(carrier, context=set_span_in_context(sp))
    sp.end()


def task_span(name: str, carrier: Any, attributes: Callable[[], dict[str, Any]],
              trace_parent: bytes = b"") -> Any:
    """A context manager: a task's CONSUMER execute span, as execute_span(name, carrier,
    **attributes()), made cheaply on the fast path: a lazy span (_light.TaskSpan)
    made current, recorded as one record at the end; attributes() is called only then (None
    values dropped), and not at all when the task is not sampled. trace_parent (the TaskSpec's
    compact context, _context) is taken when given, else carrier (headers)."""
    ids: tuple[int, int, int, str | None] | None = None
    if st.fast and st.otel.parent_based:
        if trace_parent:
            ids = parse_trace_parent(trace_parent)
        else:
            ids = parse_ids(carrier)
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
        o = st.otel
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
            st.otel.detach(self.token)


def execute_span(name: str, carrier: Any, **attributes: Any) -> Any:
    """A context manager: the CONSUMER span of a task's execution, child of the submission
    whose context is in carrier, made current for the task's own spans and submissions.
    Exceptions are recorded and set the status to ERROR."""
    parent = _parse_traceparent(carrier) if st.fast else None
    if parent is None:
        return span(name, context=extract(carrier), kind="CONSUMER", **attributes)
    return _CurrentSpan(name, parent, {k: v for k, v in attributes.items() if v is not None})


def server_span(method: str, md: dict[str, str]) -> Any:
    """A context manager: the SERVER span of an RPC whose metadata md carries a traceparent,
    made current while the handler runs (as span(method, context=extract(md), kind="SERVER",
    **{"rpc.method": method}) makes it), on the fast path a LightSpan (no propagator, no SDK
    span): a raylet makes one per lease request."""
    if st.fast and "baggage" not in md:
        carrier = {"traceparent": md["traceparent"]}
        if "tracestate" in md:
            carrier["tracestate"] = md["tracestate"]
        parent = _parse_traceparent(carrier)
        if parent is not None:
            return _CurrentSpan(method, parent, {"rpc.method": method}, st.otel.SpanKind.SERVER)
    return span(method, context=extract(md), kind="SERVER", **{"rpc.method": method})


def _parse_traceparent(carrier: Any) -> Any:
    """The remote parent context from a W3C traceparent, or None (use the generic path)."""
    ids = parse_ids(carrier)
    if ids is None:
        return None
    trace_id, span_id, flags, state = ids
    o = st.otel
    return o.SpanContext(trace_id, span_id, True, o.TraceFlags(flags),
                         o.TraceState.from_header([state]) if state else None)


class _CurrentSpan(_TaskContext):
    """start_span + attach, end + detach: what start_as_current_span does, without its
    generator-based context managers (ends as _TaskContext does)."""

    __slots__ = ("name", "parent", "attributes", "kind")

    def __init__(self, name: str, parent: Any, attributes: dict[str, Any], kind: Any = None) -> None:
        self.name, self.parent, self.attributes = name, parent, attributes
        self.kind = kind or st.otel.SpanKind.CONSUMER

    def __enter__(self) -> Any:
        o, parent = st.otel, self.parent
        if not o.parent_based:  # the sampler must decide: the SDK's own span
            ctx = o.set_span_in_context(o.NonRecordingSpan(parent))
            sp = st.tracer.start_span(self.name, context=ctx, kind=self.kind, attributes=self.attributes)
        else:  # parent-based sampling: the remote parent's flag decides
            ctx = o.SpanContext(parent.trace_id, st.id_gen.generate_span_id(), False,
                                parent.trace_flags, parent.trace_state)
            sp = (_LightSpan(self.name, ctx, parent, self.attributes, self.kind)
                  if parent.trace_flags & 1 else o.NonRecordingSpan(ctx))
        self.span = sp
        self.token = o.attach(o.set_span_in_context(sp))
        return sp


def set_error(span_obj: Any, message: str) -> None:
    from opentelemetry.trace import Status, StatusCode

    status = Status(StatusCode.ERROR, message[:500])
    if isinstance(span_obj, _TaskSpan):  # a TaskSpan or an _exec.ExecSpan
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
