"""A task's submit span in its cheapest form, for the driver's hot path (`task_submitted`), and
the compact trace context it travels with (`TaskSpec.trace_parent`, 25 bytes).

The driver is the bottleneck of a single client submitting tasks, so what tracing does per
submission there counts most. `task_submitted` does what `submit_span(name, headers,
**{key: value.hex()})` does with less: ids come from one random draw per 512 tasks (sliced in
bulk), the context goes into the spec as 25 raw bytes (_context: no headers, no hex
formatting; the worker parses it with two `int.from_bytes`), and the span is queued as a
SubmitRecord: no attribute dict, no hex string, no per-task object besides the record. The
exporter writes its OTLP bytes (_otlp_templates.submit_entry) from it, hex included, in the
export thread, one batch at a time.

Anything the compact form does not cover (a tracestate, baggage, another id generator or
sampler, the fast paths off) takes `submit_span`, whose headers go into `trace_parent` in
_context's header form.

A root submit span (no current span: the usual `f.remote()` of a driver) costs less still when
the GCS exports spans from task events (_derived) and this process reports them: `left`
only gives the task its trace context, and the owner's task-event record carries the span to
the GCS (task_events; the span's time is the record's PENDING_ARGS_AVAIL, when the owner took
the task), which exports it under this process's resource. Nothing is queued or exported here.
"""
from __future__ import annotations

import time
from typing import Any

from . import _state as st
from ._context import carrier as _carrier
from ._context import encode
from ._context import trace_id_hex as _trace_id_hex
from ._ids import ZERO8, trace_and_span_ids
from ._records import SubmitRecord, expand_submit
from ._records import new as _new
from ._spans import submit_span

_FLAG = [bytes((f,)) for f in range(256)]
_ids = trace_and_span_ids  # 24-byte chunks: trace id (16) + span id (8)
_on = False  # the compact path may be used (set by init)
_cv: Any = None  # the ContextVar holding OpenTelemetry's current Context
_root_flag: bytes | None = None  # the flags byte of every root when the root sampler is always_on
_left = False  # root submit spans may be left to task events (set_left)
_time_ns = time.time_ns


def init() -> None:
    """Called by setup() after _spans.init(): the compact path is on for the SDK's
    RandomIdGenerator, the W3C propagator and a parent-based sampler (the defaults)."""
    global _on, _cv, _root_flag
    from opentelemetry.context import _RUNTIME_CONTEXT
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    _cv = getattr(_RUNTIME_CONTEXT, "_current_context", None)
    _on = bool(st.fast and st.otel.parent_based and type(st.id_gen) is RandomIdGenerator and _cv is not None)
    bound = st.root_bound
    _root_flag = _FLAG[1 | st.random_flag] if bound is not None and bound > st.M64 else None


def task_submitted(spec: Any, name: str, key: str = "ember.task_id", value: bytes | None = None) -> None:
    """The PRODUCER span of a task's submission, child of the current span, with the attribute
    key = value.hex() (value: spec.task_id when None); its context goes into spec.trace_parent
    (in either of _context's forms) for the execute span to hang off."""
    if _on:
        current = _cv.get()
        if not current:  # no current span, no baggage: a root span
            if _root_flag is not None:  # always sampled (the default): the shortest way
                tp = (next(_ids.it, None) or _ids.draw()) + _root_flag
                spec.trace_parent = tp
                rec = _new(SubmitRecord, (name, tp, None, _time_ns(), key, spec.task_id if value is None else value))
                buf = st.buffer
                if buf is not None and st.processor._span_processors is st.only_buffer:
                    buf.add_record(rec)
                else:
                    _emit(rec)
                return
            bound = st.root_bound
            if bound is not None:
                ids = next(_ids.it, None) or _ids.draw()
                if bound > st.M64:
                    flags = 1 | st.random_flag
                elif bound and int.from_bytes(ids[8:16], "big") < bound:
                    flags = 1 | st.random_flag
                else:
                    flags = st.random_flag
                tp = ids + _FLAG[flags]
                spec.trace_parent = tp
                if flags & 1:
                    _emit(_new(SubmitRecord, (name, tp, None, _time_ns(), key, spec.task_id if value is None else value)))
                return
        elif len(current) == 1:  # only a span (no baggage)
            sp = current.get(st.otel.span_key)
            parent = sp.get_span_context() if sp is not None else None
            if parent is not None and parent.is_valid and not parent.trace_state:
                flags = int(parent.trace_flags)
                if not flags & 1:  # not sampled: propagate the decision, record nothing
                    spec.trace_parent = (parent.trace_id.to_bytes(16, "big")
                                         + parent.span_id.to_bytes(8, "big") + _FLAG[flags])
                    return
                ids = next(_ids.it, None) or _ids.draw()
                tp = parent.trace_id.to_bytes(16, "big") + ids[16:] + _FLAG[flags]
                spec.trace_parent = tp
                _emit(_new(SubmitRecord, (name, tp, parent, _time_ns(), key, spec.task_id if value is None else value)))
                return
    headers: dict[str, str] = {}
    submit_span(name, headers, **{key: (spec.task_id if value is None else value).hex()})
    spec.trace_parent = encode(headers)


def set_left(on: bool) -> None:
    """Whether root submit spans may be left to this process's task events from now on (its
    GCS exports them: _derived; task_events.start and stop say). Only with the compact
    path and every root sampled (the default sampler)."""
    global _left
    _left = bool(on and _on and _root_flag is not None)


def left(spec: Any, task_id: bytes) -> bool:
    """A task (spec, with task_id) submitted with no current span, when root submit spans may
    be left to task events: gives spec its trace context and returns True; its owner's
    task-event record carries the submit span (TaskEntry.span_left). False: nothing done
    (task_submitted records the span). Only Ember's own span processor may be installed: a
    span the GCS exports never reaches another one.

    The new trace's id is the task id (128 random bits: ids.new_task_id) and the submit span's
    id its first 8 bytes (the execute span's are its last 8: _derived.span_id), so no
    id is drawn: `ember list tasks` shows a root task's trace id as its own id."""
    if _left and not _cv.get() and st.processor._span_processors is st.only_buffer:
        sid = task_id[:8]
        if len(task_id) == 16 and sid != ZERO8:
            spec.trace_parent = task_id + sid + _root_flag  # type: ignore[operator]
            return True
    return False


def record_left(spec: Any, time_ns: int) -> None:
    """Records here, at time_ns, the submit span `left` left to a task-event record that will
    not reach the GCS (task events off or stopped, their buffer full)."""
    _emit(SubmitRecord(f"submit {spec.name}", spec.trace_parent, None, time_ns, "ember.task_id", spec.task_id))


def _emit(rec: SubmitRecord) -> None:
    if st.direct():
        st.buffer.add_record(rec)
    else:
        st.emit(expand_submit(rec))



def carrier(spec: Any) -> dict[str, str]:
    """A task's trace context as header -> value."""
    return _carrier(spec.trace_parent)


def trace_id_hex(spec: Any) -> str:
    """The trace id of a task as 32 hex digits ("" when it carries no trace context)."""
    return _trace_id_hex(spec.trace_parent)
