"""Spans made from task events: a task's execute span, and a root submit span, exported by the
GCS from the owner's task-event record instead of by the process that would record them.

Why: with tracing on, every task makes two spans, and the worker's (the execute span) costs the
worker's task thread to record it and its export thread to encode and send it, on top of the
task events every task already produces. Those events hold everything the span says: the task's name, ids and attempt, when it ran
(RUNNING and FINISHED times, from the worker's reply), where (node, worker, pid), and its
trace_parent. So when nothing asked the worker for the span, the GCS, which receives the
owner's records anyway, writes the span from them.

    worker  its GCS says it exports them (KV `tracing`/`exec_spans` = `announcement()`, read
            once at the core worker's start: `state.on`); it makes the span current as before
            (_exec.begin: a nested submission, a child span or get_current_span() see it),
            with the span id
            `span_id(task_id, attempt)`; when the task ended without error and no code asked
            for the span object, it records nothing and says so (`PushTaskReply.exec_span_left`);
            otherwise (and for an actor's creation, whose owner is the GCS) it records the
            span itself, as before
    owner   its closed record keeps the task's trace_parent with a byte of the spans left to
            it (`TaskEventBatch.trace_parent`, 26 bytes: task_events); an owner whose task
            events are off records the span itself from the reply
    GCS     decodes such batches (`AddTaskEventDataRequest.spans` > 0) in its export thread
            (_derived_export.DerivedSpans) and exports one CONSUMER span per record, under the worker's
            resource (service `ember-worker` or OTEL_SERVICE_NAME, `process.pid`,
            `ember.node_id`): the span the worker would have recorded, the same name,
            attributes, parent and times (start: the task's start; end: its end as the reply
            says, a few µs after the worker's own clock read)

A root submit span (a task submitted with no current span: a driver's plain `f.remote()`)
goes the same way (_submit.left): the owner gives the task a new trace context (the
trace id is the task id, the submit span id its first 8 bytes) and no span; the task's first
record carries the span (bit 1 of that byte) with the first batch that sends it, closed or
still open, once; the GCS exports a PRODUCER span named `submit <name>` at
the record's PENDING_ARGS_AVAIL time (when the owner took the task, a few µs to ms after
`.remote()`), under the owner's resource (`TaskEventBatch.span_resource`). A record the owner
cannot send (task events stopped, their buffer full) has the owner record the span itself.
A batch the GCS does not take loses its spans, as a full span queue would.

A process leaves spans to its GCS only when both would send them to the same place: the GCS
announces a digest of its exporter settings (`announcement`), and the process compares its own.
The execute span id is the task id's last 8 bytes (random: ids.new_task_id), XORed with a
constant per attempt, so the worker and the GCS name the same span without telling each other. What applies
to these spans is the GCS's tracing configuration (its OTEL_* variables: exporter, endpoint,
OTEL_BSP_SCHEDULE_DELAY); the GCS announces only when it exports at all. A record the owner's
task events drop (their buffer full) loses its span, as a full span queue would.
"""
from __future__ import annotations

import hashlib
import os
from typing import Any, Sequence

from .. import envvars
from ._records import ExecRecord, SubmitRecord


class _DerivedState:
    """on: this process's GCS exports execute spans from task events (KV below, read by
    task_events at the core worker's start): its executor leaves the clean, untouched ones to
    their owners."""

    __slots__ = ("on",)

    def __init__(self) -> None:
        self.on = False


state = _DerivedState()
KV_NAMESPACE = "tracing"
KV_KEY = b"exec_spans"  # announcement(): the GCS exports spans from task events
_M64 = (1 << 64) - 1
_K = 0x9E3779B97F4A7C15  # an odd constant (2^64 / golden ratio): attempts map to distinct masks
_ZERO8 = bytes(8)
_ONE8 = (1).to_bytes(8, "big")


def span_id(task_id: bytes, attempt: int) -> bytes:
    """The execute span id of a task's attempt (8 bytes, never all zero)."""
    sid = task_id[-8:]
    if attempt:
        sid = ((int.from_bytes(sid, "big") ^ (attempt * _K)) & _M64).to_bytes(8, "big")
    return sid if len(sid) == 8 and sid != _ZERO8 else _ONE8


def announcement(exporters: Sequence[str]) -> bytes:
    """What a GCS exporting spans from task events writes under KV_KEY, and what a process that
    would export with the given exporters compares it with: b"1:" and a digest of where spans go
    (the exporters' names and every OTEL_EXPORTER_* setting and EMBER_TRACE_DIR)."""
    where = {k: v for k, v in os.environ.items() if k.startswith("OTEL_EXPORTER_")}
    if (trace_dir := envvars.get("EMBER_TRACE_DIR")) is not None:
        where["EMBER_TRACE_DIR"] = trace_dir
    text = "\0".join([",".join(exporters), *(f"{k}={where[k]}" for k in sorted(where))])
    return b"1:" + hashlib.sha256(text.encode()).hexdigest()[:32].encode()


# Who a group of derived spans is exported as: ("worker", node id, pid) for execute spans, or
# ("owner", resource attributes as JSON, (node id, pid) of the batch) for submit spans.
Who = tuple[str, str, Any]


def records(blob: bytes) -> list[tuple[Who, list[Any]]]:
    """The spans a serialized TaskEventBatch carries (records whose trace_parent has a 26th
    byte): ExecRecords grouped by the worker that ran them, and SubmitRecords of the reporting
    owner: [(who, records)]."""
    from ..proto import gcs_task_pb2

    b = gcs_task_pb2.TaskEventBatch.FromString(blob)
    tps = list(b.trace_parent)  # (columns as lists: indexing a protobuf container costs more)
    marked = [i for i, n in enumerate(map(len, tps)) if n == 26]
    if not marked:
        return []
    n = len(b.task_id)
    if len(tps) != n or len(b.ts_ns) != 6 * n:
        raise ValueError(f"task events: {len(tps)} trace parents and {len(b.ts_ns)} times for {n} records")
    task_ids, attempts, jobs, names, ts = list(b.task_id), list(b.attempt), list(b.job_id), list(b.name), list(b.ts_ns)
    where, actors = list(b.where), list(b.actor_id)
    workers = [("", "", 0), *zip(b.where_node_id, b.where_worker_id, b.where_pid, strict=True)]
    owner: Who = ("owner", b.span_resource, (b.node_id, b.pid))
    submits: list[Any] = []
    groups: dict[Who, list[Any]] = {owner: submits}
    named: dict[str, tuple[str, str]] = {}  # name -> its spans' names
    for i in marked:
        tp = tps[i]
        left, tp = tp[25], tp[:25]
        task_id, name = task_ids[i], names[i]
        span_names = named.get(name)
        if span_names is None:
            span_names = named[name] = (f"submit {name}", f"execute {name}")
        if left & 2 and ts[6 * i]:  # its submit span, at PENDING_ARGS_AVAIL
            submits.append(SubmitRecord(span_names[0], tp, None, ts[6 * i], "ember.task_id", task_id))
        if not left & 1:
            continue
        start, end = ts[6 * i + 3], ts[6 * i + 4]  # RUNNING, FINISHED
        if not start or not end:
            continue
        w = where[i] if i < len(where) else 0
        node, worker, pid = workers[w] if 0 < w < len(workers) else workers[0]
        attempt = attempts[i]
        rec = ExecRecord(span_names[1], tp, span_id(task_id, attempt), start, end, task_id, jobs[i], attempt,
                         actors[i] if actors else b"", node, worker, None)
        key: Who = ("worker", node, pid)
        recs = groups.get(key)
        if recs is None:
            recs = groups[key] = []
        recs.append(rec)
    if not submits:
        del groups[owner]
    return list(groups.items())
