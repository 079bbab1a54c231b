"""The span classes of the per-task fast paths (_spans): LightSpan, a light recording span,
and TaskSpan, a task's lazy execute span. This module subclasses OpenTelemetry's span classes,
so it is imported only when tracing is on (by _spans.init)."""
from __future__ import annotations

import logging
import time
import traceback
from typing import Any, Callable

from opentelemetry.sdk.trace import Event
from opentelemetry.trace import NonRecordingSpan, Span, Status, StatusCode

from . import _state as st
from ._records import SpanRecord

log = logging.getLogger(__name__)
_VALUE_TYPES = (str, bool, int, float)
_UNSET = Status(StatusCode.UNSET)  # immutable: shared by every span until one sets its status


class LightSpan(Span):
    """A recording span with the SDK Span's behaviour for what code does with a current span
    (attributes, events, exceptions, status, name), made without its locks, limits and
    per-span bookkeeping; on end it is queued as a SpanRecord. Span processors' on_start is
    not called for it (Ember's own processors do nothing there)."""

    __slots__ = ("_name", "_ctx", "_parent", "_attrs", "_kind", "_events", "_status",
                 "_start", "_end")

    def __init__(self, name: str, ctx: Any, parent: Any, attributes: dict[str, Any],
                 kind: Any) -> None:
        self._name, self._ctx, self._parent, self._attrs = name, ctx, parent, attributes
        self._events: list[Any] = []
        self._kind, self._status = kind, _UNSET
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
        st.emit(SpanRecord(self._name, ctx.trace_id, ctx.span_id, int(ctx.trace_flags), ctx.trace_state,
                           self._parent, self._kind, self._start, self._end, self._attrs, self._status,
                           tuple(self._events)))

    def __repr__(self) -> str:
        return f"LightSpan(name={self._name!r}, context={self._ctx!r})"


class TaskSpan(NonRecordingSpan):
    """A task's execute span while the task runs (_spans.task_span): it holds the ids from the
    traceparent, builds its SpanContext only when asked for (a child span, a nested
    submission, `get_current_span()`), and at the end is queued as one SpanRecord
    (attributes() computed then; nothing when not sampled). When code changes it
    (set_attribute, add_event, set_status, record_exception, update_name) it becomes a
    LightSpan with the same id, start and attributes, which records itself. Ember's own
    set_error only keeps the status (keep_status)."""

    __slots__ = ("_trace_id", "_parent_id", "_flags", "_state", "_span_id", "_built",
                 "_name", "_attributes", "_start", "_light", "_status", "_ended")

    def __init__(self, trace_id: int, parent_id: int, flags: int, state: str | None,
                 name: str, attributes: Callable[[], dict[str, Any]]) -> None:
        self._trace_id, self._parent_id, self._flags, self._state = trace_id, parent_id, flags, state
        self._span_id, self._built, self._name, self._attributes = st.id_gen.generate_span_id(), None, name, attributes
        self._light: Any = None
        self._status: Any = None
        self._ended = False
        self._start = time.time_ns()

    def _trace_state(self) -> Any:
        return st.otel.TraceState.from_header([self._state]) if self._state else None

    def get_span_context(self) -> Any:
        ctx = self._built
        if ctx is None:
            ctx = self._built = st.otel.SpanContext(self._trace_id, self._span_id, False,
                                                 st.otel.TraceFlags(self._flags), self._trace_state())
        return ctx

    def is_recording(self) -> bool:
        if self._light is not None:
            return bool(self._light.is_recording())
        return not self._ended and bool(self._flags & 1)

    def _upgrade(self) -> Any:
        sp = self._light
        if sp is None:
            if not self._flags & 1 or self._ended:
                return None  # not sampled (nothing is recorded anywhere), or over
            ctx = self.get_span_context()
            parent = st.otel.SpanContext(self._trace_id, self._parent_id, True, ctx.trace_flags,
                                      ctx.trace_state)
            sp = self._light = LightSpan(
                self._name, ctx, parent,
                {k: v for k, v in self._attributes().items() if v is not None},
                st.otel.SpanKind.CONSUMER)
            sp._start = self._start
            if self._status is not None:
                sp.set_status(self._status)
        return sp

    def set_attribute(self, key: str, value: Any) -> None:
        if (sp := self._upgrade()) is not None:
            sp.set_attribute(key, value)

    def set_attributes(self, attributes: Any) -> None:
        if (sp := self._upgrade()) is not None:
            sp.set_attributes(attributes)

    def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None) -> None:
        if (sp := self._upgrade()) is not None:
            sp.add_event(name, attributes, timestamp)

    def update_name(self, name: str) -> None:
        if (sp := self._upgrade()) is not None:
            sp.update_name(name)

    def set_status(self, status: Any, description: str | None = None) -> None:
        if (sp := self._upgrade()) is not None:
            sp.set_status(status, description)

    def record_exception(self, exception: BaseException, attributes: Any = None,
                         timestamp: int | None = None, escaped: bool = False) -> None:
        if (sp := self._upgrade()) is not None:
            sp.record_exception(exception, attributes, timestamp, escaped)

    def keep_status(self, status: Any) -> None:
        """Ember's status for the span (set_error), without making it a LightSpan."""
        if self._light is not None:
            self._light.set_status(status)
        else:
            self._status = status

    def end(self, end_time: int | None = None) -> None:
        if self._light is not None:
            self._light.end(end_time)
            return
        if self._ended:
            return
        self._ended = True
        if self._flags & 1:
            st.emit(SpanRecord(self._name, self._trace_id, self._span_id, self._flags, self._trace_state(),
                               self._parent_id, st.otel.SpanKind.CONSUMER, self._start, end_time or time.time_ns(),
                               {k: v for k, v in self._attributes().items() if v is not None},
                               self._status, ()))

    def __repr__(self) -> str:
        return f"TaskSpan(name={self._name!r}, span_id={self._span_id:016x})"
