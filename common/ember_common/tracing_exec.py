"""A task's execute span in its cheapest form, for the worker's hot path (`task_executing`).

The execute span is the largest direct tracing cost of a task, and in a cluster it costs two to
three times what it costs in a tight loop (the code runs cold between tasks), so the worker does
as little Python per task as it can: one object that is both the span and its context manager
(an ExecSpan: tracing_light.TaskSpan's lazy span, holding `TaskSpec.trace_parent`'s 25 bytes as
they are and a span id sliced from one random draw per 512 spans), made current by one
ContextVar set and reset (what OpenTelemetry's attach/detach do, without their layers), and
queued at the end as an EXEC record, `(name, trace_parent, span_id, start_ns, end_ns, values,
status)` with values = (task_id, job_id, attempt, actor_id, node_id, worker_id) as the spec and
the worker hold them: no attribute dict, no hex, no int conversion. The exporter writes its OTLP
bytes (`otlp_templates.exec_entry`: a template per name and repeating values, the task id's hex
filled in) or expands it into a RECORD (`expand`) for exporters that take SDK spans.

Ids become ints, and the attributes a dict, only when code asks for the span's context (a
nested submission, a child span, `get_current_span()`) or changes the span (it then becomes a
LightSpan, as a TaskSpan does). A trace context in `trace_context` (a tracestate, the generic
path) takes `tracing_spans.task_span`.

`begin` / `finish` (the executor's way for a thread's synchronous task) go further: in a
cluster the span's Python runs cold, at two to three times its tight-loop cost, and making an
ExecSpan, entering and leaving it was most of the worker task thread's tracing cost. `begin`
makes a CurrentExec without its __init__ (the task's span as a tuple: trace_parent, span id,
name, values, start) and makes a one-entry Context holding it current by one ContextVar set;
`finish` resets it and queues the EXEC record. An ExecSpan (same id and start) is made only when
code asks the CurrentExec for anything during the task (its context for a nested submission or a
child span, an attribute, an error), and then records the span as task_executing's does. A
CurrentExec kept past its task (a copied context used later, `get_current_span()` stored away)
stays that task's: a non-recording span with the task's context.

When this process's GCS exports execute spans from task events (`tracing_derived.on`), `begin`
gives the span the id the GCS derives from the task id and attempt, and `finish` records
nothing for a task that ended without error and whose span no code asked for: it returns the
CurrentExec, and the executor answers `exec_span_left` (or records it after all with
`record_left`: an actor's creation, a reply that became an error).
"""
from __future__ import annotations

import logging
import os
import random
import time
from typing import Any

from . import tracing_derived as _derived
from . import tracing_spans as ts
from .tracing_derived import span_id as derived_id
from .tracing_export import exec_attributes as attributes_of
from .tracing_export import expand_exec as expand  # noqa: F401 (the module's record, expanded)

log = logging.getLogger(__name__)

_IDS_PER_DRAW = 512
# The SDK's RandomIdGenerator draws from `random` too; os.urandom would release the GIL (a
# syscall) on the hot path, handing the thread's turn to another one every draw.
# An instance of its own (seeded from os.urandom: a user's random.seed() does not repeat ids),
# reseeded after fork.
_rng = random.Random()
_randbytes = _rng.randbytes
_ZERO8 = bytes(8)
_ids: Any = iter(())  # 8-byte span ids from one draw
_ExecSpan: Any = None  # the class, built by init() (it subclasses OpenTelemetry's)
_on = False  # the fast path may be used (set by init)
_begin: Any = None  # begin's and finish's bodies, built by init()
_finish: Any = None


def _after_fork() -> None:
    global _ids
    _ids = iter(())  # a child must not reuse the parent's ids
    _rng.seed()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _draw() -> bytes:
    """8 fresh random bytes (a span id); refills the bulk supply."""
    global _ids
    while True:
        buf = _randbytes(8 * _IDS_PER_DRAW)
        if _ZERO8 not in buf:  # an all-zero id is invalid (redrawn, not checked per id)
            break
    _ids = iter([buf[i:i + 8] for i in range(8, len(buf), 8)])
    return buf[:8]


def init() -> None:
    """Builds the ExecSpan class (tracing.setup, after tracing_spans.init)."""
    global _ExecSpan, _on
    from opentelemetry.context import _RUNTIME_CONTEXT
    from opentelemetry.context.context import Context
    from opentelemetry.trace import Span, SpanContext, TraceFlags

    cv: Any = getattr(_RUNTIME_CONTEXT, "_current_context", None)
    _on = False
    otel, emit = ts._otel, ts.emit
    if not ts._fast or cv is None or otel.span_key is None or ts._TaskSpan is None:  # another context implementation: the generic path
        return
    span_key = otel.span_key

    base: Any = ts._TaskSpan

    class ExecSpan(base):  # type: ignore[misc]
        """A TaskSpan that keeps the trace_parent bytes and its span id as bytes, is its own
        context manager, and records an EXEC record. (No __slots__: OpenTelemetry's span
        classes have none, so an instance has a __dict__ anyway.)"""

        # Defaults read until a method sets them (fewer stores per task than in __init__; the
        # instance's own values then shadow these, TaskSpan's slots stay unused).
        _built = _light = _status = _span_id = None
        _ended = False

        def __init__(self, tp: bytes, name: str, values: tuple[Any, ...]) -> None:
            self._tp, self._sid, self._name, self._values = tp, next(_ids, None) or _draw(), name, values
            self._flags = tp[24]
            self._start = time.time_ns()

        def _ints(self) -> None:
            """The TaskSpan fields its other methods read, made when first needed."""
            if self._span_id is None:
                tp = self._tp
                self._trace_id, self._parent_id = int.from_bytes(tp[:16], "big"), int.from_bytes(tp[16:24], "big")
                self._state, self._span_id = None, int.from_bytes(self._sid, "big")
                values = self._values
                self._attributes = lambda: attributes_of(values)

        def get_span_context(self) -> Any:
            if self._built is None:
                self._ints()
            return super().get_span_context()

        def _upgrade(self) -> Any:
            self._ints()
            return super()._upgrade()

        def __enter__(self) -> Any:
            current = cv.get()
            self._token = cv.set(Context({**current, span_key: self} if current else {span_key: self}))
            return self

        def __exit__(self, typ: Any, exc: Any, tb: Any) -> None:
            try:
                if exc is not None and self.is_recording():
                    self.record_exception(exc)
                    ts.set_error(self, f"{typ.__name__}: {exc}")
            finally:
                self.end()
                try:
                    cv.reset(self._token)
                except Exception:  # as OpenTelemetry's detach
                    log.exception("Failed to detach context")

        def end(self, end_time: int | None = None) -> None:
            if self._light is not None:
                self._light.end(end_time)
                return
            if self._ended:
                return
            self._ended = True
            if self._flags & 1:
                rec = (self._name, self._tp, self._sid, self._start, end_time or time.time_ns(),
                       self._values, self._status)
                buf = ts._buffer
                if buf is not None and ts._processor._span_processors is ts._only_buffer:
                    buf.add_record(rec)  # what emit() does, one call fewer
                else:
                    emit(rec)

        def __repr__(self) -> str:
            return f"ExecSpan(name={self._name!r}, span_id={self._sid.hex()})"

    def made(tp: bytes, sid: bytes, name: str, values: tuple[Any, ...], start: int) -> Any:
        """An ExecSpan with the given id and start (a CurrentExec's task, made when asked for)."""
        sp = ExecSpan.__new__(ExecSpan)
        sp._tp, sp._sid, sp._name, sp._values, sp._flags, sp._start = tp, sid, name, values, tp[24], start
        return sp

    new = object.__new__
    time_ns = time.time_ns

    class CurrentExec:
        """The current span of one synchronous task on a thread (`begin`): made without its
        __init__ (a few slot stores, no instance dict), current by one ContextVar set of a
        one-entry Context, holding the task's span as its fields; it makes an ExecSpan (same
        id and start) only when code asks for it (a nested submission, a child span, an
        attribute). Kept past its task (a copied context, `get_current_span()` stored away),
        it stays that task's: a non-recording span with the task's context, so later children
        still name the right parent. A Span by registration (isinstance), not by inheritance:
        OpenTelemetry's span classes have no __slots__."""

        __slots__ = ("_tp", "_sid", "_name", "_spec", "_node", "_worker", "_start", "_tok", "_span", "_done",
                     "_left")
        _tp: bytes  # the task's trace_parent
        _sid: bytes  # its execute span's id
        _name: str
        _spec: Any  # the task's spec, node id and worker id: its span's values, read when needed
        _node: str
        _worker: str
        _start: int
        _tok: Any  # the ContextVar token of begin's set
        _span: Any  # the ExecSpan (or, after the task, its context as a span), once made
        _done: bool
        _left: bool  # the owner's task events may carry the span (tracing_derived.on at begin)

        def _task_values(self) -> tuple[Any, ...]:
            """(task_id, job_id, attempt, actor_id, node_id, worker_id): the span's values."""
            spec = self._spec
            return (spec.task_id, spec.job_id, spec.attempt, spec.actor_id, self._node, self._worker)

        def _real(self) -> Any:
            sp = self._span
            if sp is None:
                tp = self._tp
                if self._done:  # the task ended without anyone asking: its context only
                    sp = otel.NonRecordingSpan(SpanContext(int.from_bytes(tp[:16], "big"),
                                                           int.from_bytes(self._sid, "big"), False,
                                                           TraceFlags(tp[24])))
                else:
                    sp = made(tp, self._sid, self._name, self._task_values(), self._start)
                self._span = sp
            return sp

        def get_span_context(self) -> Any:
            sp = self._span
            if sp is None:  # its context only (a nested submission, a child span): no span made,
                tp = self._tp  # the task's end still queues one EXEC record
                return SpanContext(int.from_bytes(tp[:16], "big"), int.from_bytes(self._sid, "big"), False,
                                   TraceFlags(tp[24]))
            return sp.get_span_context()

        def is_recording(self) -> bool:
            if self._span is None and not self._done:
                return bool(self._tp[24] & 1)
            return bool(self._real().is_recording())

        def set_attribute(self, key: str, value: Any) -> None:
            self._real().set_attribute(key, value)

        def set_attributes(self, attributes: Any) -> None:
            self._real().set_attributes(attributes)

        def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None) -> None:
            self._real().add_event(name, attributes, timestamp)

        def add_link(self, context: Any, attributes: Any = None) -> None:
            self._real().add_link(context, attributes)

        def update_name(self, name: str) -> None:
            self._real().update_name(name)

        def set_status(self, status: Any, description: str | None = None) -> None:
            self._real().set_status(status, description)

        def record_exception(self, exception: BaseException, attributes: Any = None,
                             timestamp: int | None = None, escaped: bool = False) -> None:
            self._real().record_exception(exception, attributes, timestamp, escaped)

        def end(self, end_time: int | None = None) -> None:
            self._real().end(end_time)

        def __enter__(self) -> Any:  # as a Span: `with span:` ends it
            return self

        def __exit__(self, typ: Any, exc: Any, tb: Any) -> None:
            self.end()

        def __repr__(self) -> str:
            return f"CurrentExec({self._real()!r})"

    Span.register(CurrentExec)

    def begin(name: str, spec: Any, node_id: str, worker_id: str, tp: bytes, start: int) -> Any:
        # (find, not `in`: bytes' `in` tries the needle as an int first, at the cost of an exception)
        if len(tp) != 25 or tp.find(_ZERO8) >= 0 or cv.get():  # a context is current: the general way
            return None
        p = new(CurrentExec)
        if _derived.on:  # the GCS may export the span: the id it derives too (tracing_derived)
            sid = spec.task_id[-8:]
            attempt = spec.attempt
            if attempt or sid == _ZERO8 or len(sid) != 8:  # (attempt 0's id inlined: derived_id)
                sid = derived_id(spec.task_id, attempt)
            p._tp, p._sid, p._left = tp, sid, True
        else:
            p._tp, p._sid, p._left = tp, next(_ids, None) or _draw(), False
        p._name, p._start, p._span, p._done = name, start, None, False
        p._spec, p._node, p._worker = spec, node_id, worker_id
        p._tok = cv.set(Context({span_key: p}))
        return p

    def finish(p: Any, error: str | None = None, exc: BaseException | None = None) -> Any:
        try:
            cv.reset(p._tok)
        except Exception:  # as OpenTelemetry's detach
            log.exception("Failed to detach context")
        p._done = True
        sp = p._span
        if sp is None:
            if error is None and exc is None:  # the usual end: one record, no span object
                tp = p._tp
                if tp[24] & 1:
                    if p._left:  # the owner's task events carry it (the caller says so)
                        return p
                    rec = (p._name, tp, p._sid, p._start, time_ns(), p._task_values(), None)
                    buf = ts._buffer
                    if buf is not None and ts._processor._span_processors is ts._only_buffer:
                        buf.add_record(rec)
                    else:
                        emit(rec)
                return None
            sp = p._span = made(p._tp, p._sid, p._name, p._task_values(), p._start)
        if exc is not None and sp.is_recording():
            sp.record_exception(exc)
            ts.set_error(sp, f"{type(exc).__name__}: {exc}")
        elif error is not None:
            ts.set_error(sp, error)
        sp.end()
        return None

    global _begin, _finish
    _begin, _finish = begin, finish
    _ExecSpan = ExecSpan
    _on = bool(otel.parent_based)


def begin(name: str, spec: Any, node_id: str, worker_id: str, tp: bytes, start: int) -> Any:
    """The execute span of a synchronous task on this thread, the cheapest way (as
    `task_executing`'s, made current while the task runs): returns the thread's CurrentExec
    holding the task's span, to pass to `finish` when the task ends; None when the general way
    (`task_executing`) must be used (the fast paths are off, the context is not a plain
    sampled 25-byte one, a context is already current on this thread, or the thread's
    CurrentExec is busy). tp: spec.trace_parent; start: the task's start (time.time_ns())."""
    if _on:
        return _begin(name, spec, node_id, worker_id, tp, start)
    return None


def finish(p: Any, error: str | None = None, exc: BaseException | None = None) -> Any:
    """Ends the span `begin` started: queued as one EXEC record (ERROR with the text error, or
    with the exception exc recorded, as task_executing's on an exception). Returns p, not
    recorded, when the owner's task events may carry the span instead (this process's GCS
    exports execute spans: tracing_derived.on; no error; nothing asked for the span): the
    caller sets its reply's exec_span_left, or, if the reply turns out an error after all or
    the task is an actor creation (whose owner, the GCS, reports no task events), records it
    with `record_left(p)`; else None."""
    return _finish(p, error, exc)


def record_left(p: Any) -> None:
    """Records the span `finish` left to the owner after all (ended now)."""
    ts.emit((p._name, p._tp, p._sid, p._start, time.time_ns(), p._task_values(), None))


def task_executing(name: str, spec: Any, node_id: str, worker_id: str, tp: bytes | None = None) -> Any:
    """A context manager: the task's CONSUMER execute span (as `tracing_spans.task_span(name,
    spec.trace_context, attributes, spec.trace_parent)` with the executor's attributes), made
    current while the task runs. The caller checks tracing is on and the spec carries a
    context; tp: spec.trace_parent when the caller has read it (one protobuf read fewer)."""
    if tp is None:
        tp = spec.trace_parent
    # No 8 zero bytes in a row: neither id is zero (a random context has such a run with
    # probability ~2^-61; it would take the generic path, which checks the ids exactly).
    if _on and len(tp) == 25 and tp.find(_ZERO8) < 0:
        return _ExecSpan(tp, name, (spec.task_id, spec.job_id, spec.attempt, spec.actor_id, node_id, worker_id))
    values = (spec.task_id, spec.job_id, spec.attempt, spec.actor_id, node_id, worker_id)
    return ts.task_span(name, spec.trace_context, lambda: attributes_of(values), tp)

