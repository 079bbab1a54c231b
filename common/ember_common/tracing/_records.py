"""The finished-span records the fast paths queue instead of SDK spans, one named tuple per
kind, and their expansion into SDK ReadableSpans for exporters that take those.

    SubmitRecord  a task's PRODUCER submit span, as the submitter holds it (_submit)
    ExecRecord    a task's CONSUMER execute span, as the worker holds it (_exec), or as the
                  GCS reads it from a task-event batch (_derived)
    SpanRecord    any other span the fast paths made (a LightSpan, a TaskSpan, a nested
                  submission's span): every field of a span, ids as ints

They are named tuples rather than classes: a task's record is made on the hot path (a tuple is
the cheapest object Python builds; the hot paths call `new`, tuple.__new__, rather than the
class), the OTLP encoder unpacks them in one step, and the span relay marshals their fields. The encoder and SpanBuffer tell the kinds apart by
their type (`type(r) is ExecRecord`), never by length.
"""
from __future__ import annotations

from typing import Any, NamedTuple


class SubmitRecord(NamedTuple):
    """A zero-length PRODUCER span with one attribute, key = value.hex() (the task's or
    actor's id). trace_parent holds the span's own context (trace id, span id, flags: a
    TaskSpec's 25 bytes); parent is None for a root span, else the parent's SpanContext."""

    name: str
    trace_parent: bytes
    parent: Any
    time_ns: int
    key: str
    value: bytes


class ExecRecord(NamedTuple):
    """A task's CONSUMER execute span: trace_parent is the task's (its parent, the submit
    span), span_id the span's own 8 bytes; the task's ids as the spec holds them (bytes), the
    node and worker as this worker names them. status is None (UNSET) or an SDK Status."""

    name: str
    trace_parent: bytes
    span_id: bytes
    start_ns: int
    end_ns: int
    task_id: bytes
    job_id: bytes
    attempt: int
    actor_id: bytes
    node_id: str
    worker_id: str
    status: Any


class SpanRecord(NamedTuple):
    """Every field of a span. parent is None, a SpanContext, or the span id (int) of a remote
    parent in the same trace; kind an SDK SpanKind; status None (UNSET) or an SDK Status;
    events a tuple of SDK Events."""

    name: str
    trace_id: int
    span_id: int
    flags: int
    trace_state: Any
    parent: Any
    kind: Any
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status: Any
    events: tuple[Any, ...]


# How the hot paths make a record: new(ExecRecord, (fields...)) is tuple.__new__ itself, the
# same record as ExecRecord(fields...) without the Python frame of the named tuple's __new__.
new = tuple.__new__

RECORD_TYPES = (SubmitRecord, ExecRecord, SpanRecord)
# A task's own records: SpanBuffer exports any number of them per batch (they are small).
TASK_RECORDS = (SubmitRecord, ExecRecord)


def task_attributes(task_id: bytes, job_id: bytes, attempt: int, actor_id: bytes, node_id: str,
                    worker_id: str) -> dict[str, Any]:
    """A task's execute span attributes: ids in hex, no actor id for a normal task."""
    attrs: dict[str, Any] = {"ember.task_id": task_id.hex(), "ember.job_id": job_id.hex(), "ember.node_id": node_id,
                             "ember.worker_id": worker_id, "ember.attempt": attempt}
    if actor_id:
        attrs["ember.actor_id"] = actor_id.hex()
    return attrs


def exec_attributes(rec: ExecRecord) -> dict[str, Any]:
    """An ExecRecord's span attributes (task_attributes)."""
    return task_attributes(rec.task_id, rec.job_id, rec.attempt, rec.actor_id, rec.node_id, rec.worker_id)


def expand_submit(rec: SubmitRecord) -> SpanRecord:
    """The SpanRecord of a SubmitRecord: a zero-length PRODUCER span, key = value.hex()."""
    from opentelemetry.trace import SpanKind

    tp = rec.trace_parent
    return SpanRecord(rec.name, int.from_bytes(tp[:16], "big"), int.from_bytes(tp[16:24], "big"), tp[24], None,
                      rec.parent, SpanKind.PRODUCER, rec.time_ns, rec.time_ns, {rec.key: rec.value.hex()},
                      None, ())


def expand_exec(rec: ExecRecord) -> SpanRecord:
    """The SpanRecord of an ExecRecord: the task's CONSUMER execute span."""
    from opentelemetry.trace import SpanKind

    tp = rec.trace_parent
    return SpanRecord(rec.name, int.from_bytes(tp[:16], "big"), int.from_bytes(rec.span_id, "big"), tp[24], None,
                      int.from_bytes(tp[16:24], "big"), SpanKind.CONSUMER, rec.start_ns, rec.end_ns,
                      exec_attributes(rec), rec.status, ())


def expand(rec: Any) -> SpanRecord:
    """Any record as a SpanRecord."""
    t = type(rec)
    if t is SubmitRecord:
        return expand_submit(rec)
    if t is ExecRecord:
        return expand_exec(rec)
    return rec  # type: ignore[no-any-return]


def to_readable(rec: Any, resource: Any, scope: Any) -> Any:
    """The SDK ReadableSpan of a record (for exporters that take SDK spans)."""
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext, TraceFlags

    name, trace_id, span_id, flags, state, parent, kind, start, end, attrs, status, events = expand(rec)
    if type(parent) is int:
        parent = SpanContext(trace_id, parent, True, TraceFlags(flags), state)
    extra = {} if status is None else {"status": status}
    return ReadableSpan(name=name, context=SpanContext(trace_id, span_id, False, TraceFlags(flags), state),
                        parent=parent, resource=resource, attributes=attrs, events=events or (),
                        kind=kind, start_time=start, end_time=end, instrumentation_scope=scope, **extra)
