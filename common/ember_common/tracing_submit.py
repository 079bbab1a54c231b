"""A task's submit span in its cheapest form, for the driver's hot path (`task_submitted`), and
the compact trace context it travels with (`TaskSpec.trace_parent`, 25 bytes).

The driver is the bottleneck of a single client submitting tasks, so what tracing does per
submission there counts most. `task_submitted` does what `submit_span(name, spec.trace_context,
**{key: value.hex()})` does with less: ids come from one random draw per 512 tasks (sliced in
bulk), the context goes into the spec as 25 raw bytes (a bytes field: no map entry, no hex
formatting; the worker parses it with two `int.from_bytes`), and the span is queued as a
SUBMIT record, `(name, trace_parent, parent, time_ns, key, value)`: no attribute dict, no hex
string, no per-task object besides the tuple. The exporter writes its OTLP bytes
(`otlp_templates.submit_entry`) from it, hex included, in the export thread, one batch at a time.

Anything the compact form does not cover (a tracestate, baggage, another id generator or
sampler, the fast paths off) takes `submit_span`, which writes `trace_context`.

A root submit span (no current span: the usual `f.remote()` of a driver) costs less still when
the GCS exports spans from task events (tracing_derived) and this process reports them: `left`
only gives the task its trace context, and the owner's task-event record carries the span to
the GCS (task_events; the span's time is the record's PENDING_ARGS_AVAIL, when the owner took
the task), which exports it under this process's resource. Nothing is queued or exported here.
"""
from __future__ import annotations

import os
import random
import time
from typing import Any

from . import tracing_spans as ts

_IDS_PER_DRAW = 512
# The SDK's RandomIdGenerator draws from `random` too; os.urandom would release the GIL (a
# syscall) on the hot path, handing the thread's turn to another one every draw.
# An instance of its own (seeded from os.urandom: a user's random.seed() does not repeat ids),
# reseeded after fork.
_rng = random.Random()
_randbytes = _rng.randbytes
_ZERO8 = bytes(8)
_FLAG = [bytes((f,)) for f in range(256)]
_ids: Any = iter(())  # 24-byte chunks: trace id (16) + span id (8), from one draw
_on = False  # the compact path may be used (set by init)
_cv: Any = None  # the ContextVar holding OpenTelemetry's current Context
_add: Any = None  # where a SUBMIT record goes
_root_flag: bytes | None = None  # the flags byte of every root when the root sampler is always_on
_left = False  # root submit spans may be left to task events (set_left)
_time_ns = time.time_ns


def init() -> None:
    """Called by tracing_spans.init(): the compact path is on for the SDK's RandomIdGenerator,
    the W3C propagator and a parent-based sampler (the defaults)."""
    global _on, _cv, _add, _root_flag
    from opentelemetry.context import _RUNTIME_CONTEXT
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    _cv = getattr(_RUNTIME_CONTEXT, "_current_context", None)
    _on = bool(ts._fast and ts._otel.parent_based and type(ts._id_gen) is RandomIdGenerator
               and _cv is not None)
    _add = _emit_submit
    bound = ts._root_bound
    _root_flag = _FLAG[1 | ts._random_flag] if bound is not None and bound > ts._M64 else None


def _after_fork() -> None:
    global _ids
    _ids = iter(())  # a child must not reuse the parent's ids
    _rng.seed()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _draw() -> bytes:
    """24 fresh random bytes (a trace id and a span id); refills the bulk supply."""
    global _ids
    while True:
        buf = _randbytes(24 * _IDS_PER_DRAW)
        if _ZERO8 not in buf:  # an all-zero id is invalid (2^-64 per id; redrawn, not checked per id)
            break
    chunks = [buf[i:i + 24] for i in range(24, len(buf), 24)]
    _ids = iter(chunks)
    return buf[:24]


def task_submitted(spec: Any, name: str, key: str = "ember.task_id", value: bytes | None = None) -> None:
    """The PRODUCER span of a task's submission, child of the current span, with the attribute
    key = value.hex() (value: spec.task_id when None); its context goes into spec.trace_parent
    (or spec.trace_context, on the generic path) for the execute span to hang off."""
    if _on:
        current = _cv.get()
        if not current:  # no current span, no baggage: a root span
            if _root_flag is not None:  # always sampled (the default): the shortest way
                tp = (next(_ids, None) or _draw()) + _root_flag
                spec.trace_parent = tp
                rec = (name, tp, None, _time_ns(), key, spec.task_id if value is None else value)
                buf = ts._buffer
                if buf is not None and ts._processor._span_processors is ts._only_buffer:
                    buf.add_record(rec)
                else:
                    _add(rec)
                return
            bound = ts._root_bound
            if bound is not None:
                ids = next(_ids, None) or _draw()
                if bound > ts._M64:
                    flags = 1 | ts._random_flag
                elif bound and int.from_bytes(ids[8:16], "big") < bound:
                    flags = 1 | ts._random_flag
                else:
                    flags = ts._random_flag
                tp = ids + _FLAG[flags]
                spec.trace_parent = tp
                if flags & 1:
                    _add((name, tp, None, time.time_ns(), key, spec.task_id if value is None else value))
                return
        elif len(current) == 1:  # only a span (no baggage)
            sp = current.get(ts._otel.span_key)
            parent = sp.get_span_context() if sp is not None else None
            if parent is not None and parent.is_valid and not parent.trace_state:
                flags = int(parent.trace_flags)
                if not flags & 1:  # not sampled: propagate the decision, record nothing
                    spec.trace_parent = (parent.trace_id.to_bytes(16, "big")
                                         + parent.span_id.to_bytes(8, "big") + _FLAG[flags])
                    return
                ids = next(_ids, None) or _draw()
                tp = parent.trace_id.to_bytes(16, "big") + ids[16:] + _FLAG[flags]
                spec.trace_parent = tp
                _add((name, tp, parent, time.time_ns(), key, spec.task_id if value is None else value))
                return
    spec.ClearField("trace_parent")
    ts.submit_span(name, spec.trace_context, **{key: (spec.task_id if value is None else value).hex()})


def set_left(on: bool) -> None:
    """Whether root submit spans may be left to this process's task events from now on (its
    GCS exports them: tracing_derived; task_events.start and stop say). Only with the compact
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
    id its first 8 bytes (the execute span's are its last 8: tracing_derived.span_id), so no
    id is drawn: `ember list tasks` shows a root task's trace id as its own id."""
    if _left and not _cv.get() and ts._processor._span_processors is ts._only_buffer:
        sid = task_id[:8]
        if len(task_id) == 16 and sid != _ZERO8:
            spec.trace_parent = task_id + sid + _root_flag  # type: ignore[operator]
            return True
    return False


def record_left(spec: Any, time_ns: int) -> None:
    """Records here, at time_ns, the submit span `left` left to a task-event record that will
    not reach the GCS (task events off or stopped, their buffer full)."""
    _emit_submit((f"submit {spec.name}", spec.trace_parent, None, time_ns, "ember.task_id", spec.task_id))


def _emit_submit(rec: tuple[Any, ...]) -> None:
    buf = ts._buffer
    if buf is not None and ts._processor._span_processors is ts._only_buffer:
        buf.add_record(rec)
    else:
        from .tracing_export import expand

        ts.emit(expand(rec))


parse = ts.parse_trace_parent
traceparent = ts.traceparent


def carrier(spec: Any) -> Any:
    """A task's trace context as header -> value (trace_parent as a traceparent, else the
    trace_context map)."""
    tp = spec.trace_parent
    if tp and len(tp) == 25:
        return {"traceparent": traceparent(tp)}
    return spec.trace_context


def trace_id_hex(spec: Any) -> str:
    """The trace id of a task as 32 hex digits ("" when it carries no trace context)."""
    tp = spec.trace_parent
    if tp:
        return tp[:16].hex() if len(tp) == 25 else ""
    value = spec.trace_context.get("traceparent", "")
    return value.split("-")[1] if value.count("-") >= 2 else ""
