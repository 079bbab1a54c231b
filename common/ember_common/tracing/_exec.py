"""A task's execute span in its cheapest form, for the worker's hot path (`task_executing`,
`begin` / `finish`). Imported only when tracing is on (setup()): its classes subclass
OpenTelemetry's, and a forked worker that never traces should not carry them.

The execute span is the largest direct tracing cost of a task, and in a cluster the code runs
cold between tasks, so the worker does as little Python per task as it can: one object that is
both the span and its context manager (an ExecSpan: _light.TaskSpan's lazy span, holding
`TaskSpec.trace_parent`'s 25 bytes as they are and a span id sliced from one random draw per
512 spans), made current by one ContextVar set and reset (what OpenTelemetry's attach/detach
do, without their layers), and queued at the end as an ExecRecord with the task's ids as the
spec and the worker hold them: no attribute dict, no hex, no int conversion. The exporter
writes its OTLP bytes (_otlp_templates.exec_entry) or expands it (_records.expand_exec) for
exporters that take SDK spans.

Ids become ints, and the attributes a dict, only when code asks for the span's context (a
nested submission, a child span, `get_current_span()`) or changes the span (it then becomes a
LightSpan, as a TaskSpan does). A trace context in the generic form takes `_spans.task_span`.

`begin` / `finish` (the executor's way for a thread's synchronous task) go further: making an
ExecSpan, entering and leaving it is most of the worker task thread's tracing cost. `begin`
makes a CurrentExec without its __init__ (the task's span as its fields) and makes a one-entry
Context holding it current by one ContextVar set; `finish` resets it and queues the
ExecRecord. An ExecSpan (same id and start) is made only when code asks the CurrentExec for
anything during the task (its context, an attribute, an error), and then records the span as
task_executing's does. A CurrentExec kept past its task (a copied context used later,
`get_current_span()` stored away) stays that task's: a non-recording span with its context.

When this process's GCS exports execute spans from task events (`_derived.state.on`), `begin`
gives the span the id the GCS derives from the task id and attempt, and `finish` records
nothing for a task that ended without error and whose span no code asked for: it returns the
CurrentExec, and the executor answers `exec_span_left` (or records it after all with
`record_left`: an actor's creation, a reply that became an error).
"""
from __future__ import annotations

import logging
import time
from typing import Any

from opentelemetry.context import _RUNTIME_CONTEXT
from opentelemetry.context.context import Context
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, TraceFlags

from . import _derived
from . import _state as st
from ._context import COMPACT_LEN, carrier
from ._ids import ZERO8, span_ids
from ._light import TaskSpan
from ._records import ExecRecord, task_attributes
from ._records import new as _new
from ._spans import set_error, task_span

log = logging.getLogger(__name__)

_cv: Any = getattr(_RUNTIME_CONTEXT, "_current_context", None)  # OpenTelemetry's current Context
_span_key: Any = None
_on = False  # the fast path may be used (set by init)
_sids = span_ids
_time_ns = time.time_ns
_new_object = object.__new__


def init() -> None:
    """Turns the fast path on when the context implementation is the default one (setup(),
    after _spans.init)."""
    global _on, _span_key
    otel = st.otel
    _on = bool(st.fast and _cv is not None and otel.span_key is not None and otel.parent_based)
    _span_key = otel.span_key


class ExecSpan(TaskSpan):
    """A TaskSpan that keeps the trace_parent bytes and its span id as bytes, is its own
    context manager, and records an ExecRecord. (No __slots__: OpenTelemetry's span classes
    have none, so an instance has a __dict__ anyway.)"""

    # Defaults read until a method sets them (fewer stores per task than in __init__; the
    # instance's own values then shadow these, TaskSpan's slots stay unused).
    _built = _light = _status = _span_id = None
    _ended = False

    def __init__(self, tp: bytes, name: str, spec: Any, node: str, worker: str) -> None:
        self._tp, self._sid, self._name = tp, next(_sids.it, None) or _sids.draw(), name
        self._spec, self._node, self._worker = spec, node, worker
        self._flags = tp[24]
        self._start = _time_ns()

    @classmethod
    def made(cls, tp: bytes, sid: bytes, name: str, spec: Any, node: str, worker: str, start: int) -> ExecSpan:
        """An ExecSpan with the given id and start (a CurrentExec's task, made when asked for)."""
        sp = cls.__new__(cls)
        sp._tp, sp._sid, sp._name, sp._flags, sp._start = tp, sid, name, tp[24], start
        sp._spec, sp._node, sp._worker = spec, node, worker
        return sp

    def _ints(self) -> None:
        """The TaskSpan fields its other methods read, made when first needed."""
        if self._span_id is None:
            tp = self._tp
            self._trace_id, self._parent_id = int.from_bytes(tp[:16], "big"), int.from_bytes(tp[16:24], "big")
            self._state, self._span_id = None, int.from_bytes(self._sid, "big")
            spec, node, worker = self._spec, self._node, self._worker
            self._attributes = lambda: task_attributes(spec.task_id, spec.job_id, spec.attempt, spec.actor_id,
                                                       node, worker)

    def get_span_context(self) -> Any:
        if self._built is None:
            self._ints()
        return super().get_span_context()

    def _upgrade(self) -> Any:
        self._ints()
        return super()._upgrade()

    def __enter__(self) -> Any:
        current = _cv.get()
        key = _span_key
        self._token = _cv.set(Context({**current, key: self} if current else {key: self}))
        return self

    def __exit__(self, typ: Any, exc: Any, tb: Any) -> None:
        try:
            if exc is not None and self.is_recording():
                self.record_exception(exc)
                set_error(self, f"{typ.__name__}: {exc}")
        finally:
            self.end()
            try:
                _cv.reset(self._token)
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
            spec = self._spec
            rec = _new(ExecRecord, (self._name, self._tp, self._sid, self._start, end_time or _time_ns(),
                                    spec.task_id, spec.job_id, spec.attempt, spec.actor_id, self._node,
                                    self._worker, self._status))
            buf = st.buffer
            if buf is not None and st.processor._span_processors is st.only_buffer:
                buf.add_record(rec)  # what st.emit() does, one call fewer
            else:
                st.emit(rec)

    def __repr__(self) -> str:
        return f"ExecSpan(name={self._name!r}, span_id={self._sid.hex()})"


class CurrentExec:
    """The current span of one synchronous task on a thread (`begin`): made without its
    __init__ (a few slot stores, no instance dict), current by one ContextVar set of a
    one-entry Context, holding the task's span as its fields; it makes an ExecSpan (same id
    and start) only when code asks for it (a nested submission, a child span, an attribute).
    Kept past its task (a copied context, `get_current_span()` stored away), it stays that
    task's: a non-recording span with the task's context, so later children still name the
    right parent. A Span by registration (isinstance), not by inheritance: OpenTelemetry's span
    classes have no __slots__."""

    __slots__ = ("tp", "sid", "name", "spec", "node", "worker", "start", "token", "span", "done", "left")
    tp: bytes  # the task's trace_parent
    sid: bytes  # its execute span's id
    name: str
    spec: Any  # the task's spec, node id and worker id: its span's ids, read when needed
    node: str
    worker: str
    start: int
    token: Any  # the ContextVar token of begin's set
    span: Any  # the ExecSpan (or, after the task, its context as a span), once made
    done: bool
    left: bool  # the owner's task events may carry the span (_derived.state.on at begin)

    def record(self, end_ns: int, status: Any = None) -> ExecRecord:
        """The task's ExecRecord, ended at end_ns."""
        spec = self.spec
        rec: ExecRecord = _new(ExecRecord, (self.name, self.tp, self.sid, self.start, end_ns, spec.task_id,
                                            spec.job_id, spec.attempt, spec.actor_id, self.node, self.worker,
                                            status))
        return rec

    def _real(self) -> Any:
        sp = self.span
        if sp is None:
            tp = self.tp
            if self.done:  # the task ended without anyone asking: its context only
                sp = NonRecordingSpan(SpanContext(int.from_bytes(tp[:16], "big"), int.from_bytes(self.sid, "big"),
                                                  False, TraceFlags(tp[24])))
            else:
                sp = ExecSpan.made(tp, self.sid, self.name, self.spec, self.node, self.worker, self.start)
            self.span = sp
        return sp

    def get_span_context(self) -> Any:
        sp = self.span
        if sp is None:  # its context only (a nested submission, a child span): no span made,
            tp = self.tp  # the task's end still queues one ExecRecord
            return SpanContext(int.from_bytes(tp[:16], "big"), int.from_bytes(self.sid, "big"), False,
                               TraceFlags(tp[24]))
        return sp.get_span_context()

    def is_recording(self) -> bool:
        if self.span is None and not self.done:
            return bool(self.tp[24] & 1)
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
_derived_state = _derived.state
_derived_id = _derived.span_id


def begin(name: str, spec: Any, node_id: str, worker_id: str, tp: bytes, start: int) -> CurrentExec | None:
    """The execute span of a synchronous task on this thread, the cheapest way (as
    `task_executing`'s, made current while the task runs): returns the thread's CurrentExec
    holding the task's span, to pass to `finish` when the task ends; None when the general way
    (`task_executing`) must be used (the fast path is off, the context is not a plain 25-byte
    one, or a context is already current on this thread). tp: spec.trace_parent; start: the
    task's start (time.time_ns())."""
    # (find, not `in`: bytes' `in` tries the needle as an int first, at the cost of an exception)
    if not _on or len(tp) != 25 or tp.find(ZERO8) >= 0 or _cv.get():  # a context is current: the general way
        return None
    p: CurrentExec = _new_object(CurrentExec)
    if _derived_state.on:  # the GCS may export the span: the id it derives too (_derived)
        sid = spec.task_id[-8:]
        attempt = spec.attempt
        if attempt or sid == ZERO8 or len(sid) != 8:  # (attempt 0's id inlined: _derived.span_id)
            sid = _derived_id(spec.task_id, attempt)
        p.tp, p.sid, p.left = tp, sid, True
    else:
        p.tp, p.sid, p.left = tp, next(_sids.it, None) or _sids.draw(), False
    p.name, p.start, p.span, p.done = name, start, None, False
    p.spec, p.node, p.worker = spec, node_id, worker_id
    p.token = _cv.set(Context({_span_key: p}))
    return p


def finish(p: CurrentExec, error: str | None = None, exc: BaseException | None = None) -> CurrentExec | None:
    """Ends the span `begin` started: queued as one ExecRecord (ERROR with the text error, or
    with the exception exc recorded, as task_executing's on an exception). Returns p, not
    recorded, when the owner's task events may carry the span instead (this process's GCS
    exports execute spans, no error, nothing asked for the span): the caller sets its reply's
    exec_span_left, or, if the reply turns out an error after all or the task is an actor
    creation (whose owner, the GCS, reports no task events), records it with `record_left(p)`;
    else None."""
    try:
        _cv.reset(p.token)
    except Exception:  # as OpenTelemetry's detach
        log.exception("Failed to detach context")
    p.done = True
    sp = p.span
    if sp is None:
        if error is None and exc is None:  # the usual end: one record, no span object
            if p.tp[24] & 1:
                if p.left:  # the owner's task events carry it (the caller says so)
                    return p
                rec = p.record(_time_ns())
                buf = st.buffer
                if buf is not None and st.processor._span_processors is st.only_buffer:
                    buf.add_record(rec)
                else:
                    st.emit(rec)
            return None
        sp = p.span = ExecSpan.made(p.tp, p.sid, p.name, p.spec, p.node, p.worker, p.start)
    if exc is not None and sp.is_recording():
        sp.record_exception(exc)
        set_error(sp, f"{type(exc).__name__}: {exc}")
    elif error is not None:
        set_error(sp, error)
    sp.end()
    return None


def record_left(p: CurrentExec) -> None:
    """Records the span `finish` left to the owner after all (ended now)."""
    st.emit(p.record(_time_ns()))


def task_executing(name: str, spec: Any, node_id: str, worker_id: str, tp: bytes | None = None) -> Any:
    """A context manager: the task's CONSUMER execute span (as `_spans.task_span` with the
    executor's attributes), made current while the task runs. The caller checks tracing is on
    and the spec carries a context; tp: spec.trace_parent when the caller has read it."""
    if tp is None:
        tp = spec.trace_parent
    # No 8 zero bytes in a row: neither id is zero (a random context rarely has such a run; it
    # would take the generic path, which checks the ids exactly).
    if _on and len(tp) == 25 and tp.find(ZERO8) < 0:
        return ExecSpan(tp, name, spec, node_id, worker_id)
    values = (spec.task_id, spec.job_id, spec.attempt, spec.actor_id, node_id, worker_id)
    if len(tp) == COMPACT_LEN:
        return task_span(name, {}, lambda: task_attributes(*values), tp)
    return task_span(name, carrier(tp), lambda: task_attributes(*values))
