"""Spans made from task events: a task's execute span, and a root submit span, exported by the
GCS from the owner's task-event record instead of by the process that would record them.

Why: with tracing on, every task makes two spans, and the worker's (the execute span) cost the
cluster ~5-6 µs per task (the worker's task thread records it, its export thread encodes and
sends it: docs/perf.md "Session 18"), on top of the task events every task already produces.
Those events hold everything the span says: the task's name, ids and attempt, when it ran
(RUNNING and FINISHED times, from the worker's reply), where (node, worker, pid), and its
trace_parent. So when nothing asked the worker for the span, the GCS, which receives the
owner's records anyway, writes the span from them.

    worker  its GCS says it exports them (KV `tracing`/`exec_spans` = `announcement()`, read
            once at the core worker's start: `on`); it makes the span current as before
            (tracing_exec.begin: a nested submission, a child span or get_current_span() see
            it), with the span id
            `span_id(task_id, attempt)`; when the task ended without error and no code asked
            for the span object, it records nothing and says so (`PushTaskReply.exec_span_left`);
            otherwise (and for an actor's creation, whose owner is the GCS) it records the
            span itself, as before
    owner   its closed record keeps the task's trace_parent with a byte of the spans left to
            it (`TaskEventBatch.trace_parent`, 26 bytes: task_events); an owner whose task
            events are off records the span itself from the reply
    GCS     decodes such batches (`AddTaskEventDataRequest.spans` > 0) in its export thread
            (`DerivedSpans`) and exports one CONSUMER span per record, under the worker's
            resource (service `ember-worker` or OTEL_SERVICE_NAME, `process.pid`,
            `ember.node_id`): the span the worker would have recorded, the same name,
            attributes, parent and times (start: the task's start; end: its end as the reply
            says, a few µs after the worker's own clock read)

A root submit span (a task submitted with no current span: a driver's plain `f.remote()`)
goes the same way (tracing_submit.left): the owner gives the task a new trace context (the
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

import collections
import hashlib
import json
import logging
import os
import threading
from typing import Any, Sequence

log = logging.getLogger(__name__)

# This process's GCS exports execute spans from task events (KV below, read by task_events at
# the core worker's start): its executor leaves the clean, untouched ones to their owners.
on = False
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
    keys = sorted(k for k in os.environ if k.startswith("OTEL_EXPORTER_") or k == "EMBER_TRACE_DIR")
    text = "\0".join([",".join(exporters), *(f"{k}={os.environ[k]}" for k in keys)])
    return b"1:" + hashlib.sha256(text.encode()).hexdigest()[:32].encode()


# Who a group of derived spans is exported as: ("worker", node id, pid) for execute spans, or
# ("owner", resource attributes as JSON, (node id, pid) of the batch) for submit spans.
Who = tuple[str, str, Any]


def records(blob: bytes) -> list[tuple[Who, list[tuple[Any, ...]]]]:
    """The spans a serialized TaskEventBatch carries (records whose trace_parent has a 26th
    byte): EXEC records (tracing_exec's 7-tuples) grouped by the worker that ran them, and
    SUBMIT records (tracing_submit's 6-tuples) of the reporting owner: [(who, records)]."""
    from .proto import gcs_task_pb2

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
    submits: list[tuple[Any, ...]] = []
    groups: dict[Who, list[tuple[Any, ...]]] = {owner: submits}
    named: dict[str, tuple[str, str]] = {}  # name -> its spans' names
    for i in marked:
        tp = tps[i]
        left, tp = tp[25], tp[:25]
        task_id, name = task_ids[i], names[i]
        span_names = named.get(name)
        if span_names is None:
            span_names = named[name] = (f"submit {name}", f"execute {name}")
        if left & 2 and ts[6 * i]:  # its submit span, at PENDING_ARGS_AVAIL
            submits.append((span_names[0], tp, None, ts[6 * i], "ember.task_id", task_id))
        if not left & 1:
            continue
        start, end = ts[6 * i + 3], ts[6 * i + 4]  # RUNNING, FINISHED
        if not start or not end:
            continue
        w = where[i] if i < len(where) else 0
        node, worker, pid = workers[w] if 0 < w < len(workers) else workers[0]
        attempt = attempts[i]
        values = (task_id, jobs[i], attempt, actors[i] if actors else b"", node, worker)
        rec = (span_names[1], tp, span_id(task_id, attempt), start, end, values, None)
        key: Who = ("worker", node, pid)
        recs = groups.get(key)
        if recs is None:
            recs = groups[key] = []
        recs.append(rec)
    if not submits:
        del groups[owner]
    return list(groups.items())


class DerivedSpans:
    """The GCS's export of spans from task events: batches queued as they came (their bytes),
    decoded and exported from one thread every OTEL_BSP_SCHEDULE_DELAY, or as soon as a full
    export batch waits; at most OTEL_BSP_MAX_QUEUE_SIZE records carrying spans wait (one or
    two spans each: the oldest batches go past that, counted and said once)."""

    def __init__(self, exporters: Sequence[Any], scope: Any = None, service: str = "ember-worker") -> None:
        from .tracing_export import DEFAULT_BATCH, _env_int, _Wake

        self.exporters = list(exporters)
        self.scope, self.service = scope, service
        self.batch = max(1, _env_int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", DEFAULT_BATCH))
        self.max_queue = max(1, _env_int("OTEL_BSP_MAX_QUEUE_SIZE", 16384))
        self.delay_s = _env_int("OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000
        self._queue: collections.deque[tuple[bytes, int]] = collections.deque()
        self._waiting = 0  # records carrying spans in the queue
        self._lock = threading.Lock()
        self._idle = threading.Condition()
        self._busy = False
        self._wake = _Wake()
        self._resources: dict[Who, Any] = {}
        self._shutdown = False
        self.dropped = 0  # records whose spans were dropped
        self.exported = 0
        self.bad_batches = 0
        self._thread = threading.Thread(target=self._run, name="ember-derived-spans", daemon=True)
        self._thread.start()

    def add(self, blob: bytes, n: int) -> None:
        """Queues a serialized TaskEventBatch said to have n records carrying spans (any thread)."""
        n = min(n, len(blob) // 26)  # no more than its bytes can hold (26 bytes each)
        with self._lock:
            self._queue.append((blob, n))
            self._waiting += n
            while self._waiting > self.max_queue and len(self._queue) > 1:
                _, k = self._queue.popleft()
                self._waiting -= k
                if not self.dropped:
                    log.warning("task-event span queue full (%d records): dropping spans "
                                "(OTEL_BSP_MAX_QUEUE_SIZE)", self.max_queue)
                self.dropped += k
            full = self._waiting >= self.batch
        if full:
            self._wake.set()

    def _run(self) -> None:
        while not self._shutdown:
            self._wake.wait(self.delay_s)
            self._export_all()
        self._export_all()

    def _export_all(self) -> None:
        with self._idle:
            self._busy = True
        try:
            while True:
                with self._lock:
                    if not self._queue:
                        return
                    blob, n = self._queue.popleft()
                    self._waiting -= n
                try:
                    groups = records(blob)
                except Exception as e:  # a batch the owner should not have sent: counted, said once
                    if not self.bad_batches:
                        log.warning("a task event batch's spans cannot be read: %s", e)
                    self.bad_batches += 1
                    continue
                for key, recs in groups:
                    for i in range(0, len(recs), self.batch):
                        self._export(self._resource(key), recs[i:i + self.batch])
        finally:
            with self._idle:
                self._busy = False
                self._idle.notify_all()

    def _resource(self, who: Who) -> Any:
        res = self._resources.get(who)
        if res is None:
            from opentelemetry.sdk.resources import Resource

            kind, a, b = who
            owner = kind == "owner"
            # an owner's: the attributes it sent, as they are; else (or none sent) its process's
            attrs = _attributes(a) if owner else {}
            if not attrs:
                node, pid = b if owner else (a, b)
                attrs = {"service.name": "ember-driver" if owner else self.service}
                if pid:
                    attrs["process.pid"] = pid
                if node:
                    attrs["ember.node_id"] = node
            res = Resource(attrs) if owner else Resource.create(attrs)
            if len(self._resources) >= 4096:
                self._resources.clear()
            self._resources[who] = res
        return res

    def _export(self, resource: Any, recs: list[tuple[Any, ...]]) -> None:
        from . import otlp_encoding
        from .tracing_export import export_to, to_readable

        # An OTLP exporter's resource is its own process's: the worker's goes in the bytes.
        export_to(self.exporters, len(recs),
                  lambda exp: exp.export([], otlp_encoding.encode_request(recs, resource, self.scope)),
                  lambda: [to_readable(r, resource, self.scope) for r in recs])
        self.exported += len(recs)

    def force_flush(self, timeout_s: float = 30.0) -> bool:
        """Exports everything queued now; True when done within the timeout."""
        self._wake.set()
        with self._idle:
            return self._idle.wait_for(lambda: not self._queue and not self._busy, timeout_s)

    def shutdown(self) -> None:
        """Exports what is queued, then shuts the exporters down."""
        if self._shutdown:
            return
        self._shutdown = True
        self._wake.set()
        self._thread.join(30)
        from .tracing_export import shutdown_exporters

        shutdown_exporters(self.exporters)


def _attributes(text: str) -> dict[str, Any]:
    """Resource attributes sent as a JSON object (TaskEventBatch.span_resource); {}: none, or
    not such an object (its values: str, bool, int, float, or lists of them)."""
    try:
        attrs = json.loads(text) if text else {}
    except ValueError:
        return {}
    if not isinstance(attrs, dict):
        return {}
    return {str(k): tuple(v) if isinstance(v, list) else v for k, v in attrs.items()
            if isinstance(v, (str, bool, int, float, list))}


def make(names: Sequence[str], scope: Any = None, service: str | None = None) -> DerivedSpans | None:
    """The GCS's DerivedSpans exporting with the exporters names stand for (OTEL_TRACES_EXPORTER's,
    configured from the environment, as the GCS's own) and the tracer's scope; None: none."""
    from .tracing_exporters import make_exporter

    service = service or os.environ.get("OTEL_SERVICE_NAME") or "ember-worker"
    exporters = [make_exporter(name, service) for name in names]
    if not exporters:
        return None
    for exp in exporters:
        if getattr(exp, "accepts_records", False):
            exp.scope = scope
    return DerivedSpans(exporters, scope, service)
