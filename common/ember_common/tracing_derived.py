"""Execute spans made from task events: a task's execute span exported by the GCS from the
owner's task-event record instead of by the worker that ran it.

Why: with tracing on, every task makes two spans, and the worker's (the execute span) cost the
cluster ~5-6 µs per task (the worker's task thread records it, its export thread encodes and
sends it: docs/perf.md "Session 18"), on top of the task events every task already produces.
Those events hold everything the span says: the task's name, ids and attempt, when it ran
(RUNNING and FINISHED times, from the worker's reply), where (node, worker, pid), and its
trace_parent. So when nothing asked the worker for the span, the GCS, which receives the
owner's records anyway, writes the span from them.

    worker  its GCS says it exports them (KV `tracing`/`exec_spans`, read once at the core
            worker's start: `on`); it makes the span current as before (tracing_exec.begin: a
            nested submission, a child span or get_current_span() see it), with the span id
            `span_id(task_id, attempt)`; when the task ended without error and no code asked
            for the span object, it records nothing and says so (`PushTaskReply.exec_span_left`);
            otherwise (and for an actor's creation, whose owner is the GCS) it records the
            span itself, as before
    owner   its closed record keeps the task's trace_parent marked (task_events), and the batch
            lists those records (`TaskEventBatch.exec_span_index` / `exec_span_parent`); an
            owner whose task events are off records the span itself from the reply
    GCS     decodes such batches (`AddTaskEventDataRequest.exec_spans` > 0) in its export
            thread (`DerivedSpans`) and exports one CONSUMER span per record, under the
            worker's resource (service `ember-worker` or OTEL_SERVICE_NAME, `process.pid`,
            `ember.node_id`): the span the worker would have recorded, the same name,
            attributes, parent and times (start: the task's start; end: its end as the reply
            says, a few µs after the worker's own clock read)

The span id is the task id's last 8 bytes (random: ids.new_task_id), XORed with a constant per
attempt, so the worker and the GCS name the same span without telling each other. What applies
to these spans is the GCS's tracing configuration (its OTEL_* variables: exporter, endpoint,
OTEL_BSP_SCHEDULE_DELAY); the GCS announces only when it exports at all. A record the owner's
task events drop (their buffer full) loses its span, as a full span queue would.
"""
from __future__ import annotations

import collections
import logging
import os
import threading
from typing import Any, Sequence

log = logging.getLogger(__name__)

# This process's GCS exports execute spans from task events (KV below, read by task_events at
# the core worker's start): its executor leaves the clean, untouched ones to their owners.
on = False
KV_NAMESPACE = "tracing"
KV_KEY = b"exec_spans"  # b"1": the GCS exports execute spans from task events
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


def records(blob: bytes) -> list[tuple[tuple[str, int], list[tuple[Any, ...]]]]:
    """The EXEC records (tracing_exec's 7-tuples) of a serialized TaskEventBatch's execute
    spans, grouped by the worker that ran them: [((node id, pid), records)]."""
    from .proto import gcs_task_pb2

    b = gcs_task_pb2.TaskEventBatch.FromString(blob)
    index, parents = b.exec_span_index, b.exec_span_parent
    if not index:
        return []
    if len(index) != len(parents):
        raise ValueError(f"task events: {len(index)} execute span indexes, {len(parents)} parents")
    task_ids, attempts, jobs, names, ts, where = b.task_id, b.attempt, b.job_id, b.name, b.ts_ns, b.where
    actors = b.actor_id
    nodes, workers, pids = b.where_node_id, b.where_worker_id, b.where_pid
    groups: dict[tuple[str, int], list[tuple[Any, ...]]] = {}
    for i, tp in zip(index, parents, strict=True):
        if len(tp) != 25:
            continue
        w = where[i] if i < len(where) else 0
        node, worker, pid = (nodes[w - 1], workers[w - 1], pids[w - 1]) if 0 < w <= len(pids) else ("", "", 0)
        task_id, attempt = task_ids[i], attempts[i]
        start, end = ts[6 * i + 3], ts[6 * i + 4]  # RUNNING, FINISHED
        if not start or not end:
            continue
        values = (task_id, jobs[i], attempt, actors[i] if actors else b"", node, worker)
        rec = (f"execute {names[i]}", tp, span_id(task_id, attempt), start, end, values, None)
        groups.setdefault((node, pid), []).append(rec)
    return list(groups.items())


class DerivedSpans:
    """The GCS's export of execute spans from task events: batches queued as they came (their
    bytes), decoded and exported from one thread every OTEL_BSP_SCHEDULE_DELAY, or as soon as
    a full export batch waits; at most OTEL_BSP_MAX_QUEUE_SIZE spans wait (the oldest batches
    go past that, counted and said once)."""

    def __init__(self, exporters: Sequence[Any], scope: Any = None, service: str = "ember-worker") -> None:
        from .tracing_export import DEFAULT_BATCH, _env_int, _Wake

        self.exporters = list(exporters)
        self.scope, self.service = scope, service
        self.batch = max(1, _env_int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", DEFAULT_BATCH))
        self.max_queue = max(1, _env_int("OTEL_BSP_MAX_QUEUE_SIZE", 16384))
        self.delay_s = _env_int("OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000
        self._queue: collections.deque[tuple[bytes, int]] = collections.deque()
        self._waiting = 0  # spans in the queue
        self._lock = threading.Lock()
        self._idle = threading.Condition()
        self._busy = False
        self._wake = _Wake()
        self._resources: dict[tuple[str, int], Any] = {}
        self._shutdown = False
        self.dropped = 0
        self.exported = 0
        self.bad_batches = 0
        self._thread = threading.Thread(target=self._run, name="ember-derived-spans", daemon=True)
        self._thread.start()

    def add(self, blob: bytes, n: int) -> None:
        """Queues a serialized TaskEventBatch said to carry n execute spans (any thread)."""
        n = min(n, len(blob) // 25)  # no more than its bytes can hold (25 bytes of parent each)
        with self._lock:
            self._queue.append((blob, n))
            self._waiting += n
            while self._waiting > self.max_queue and len(self._queue) > 1:
                _, k = self._queue.popleft()
                self._waiting -= k
                if not self.dropped:
                    log.warning("execute span queue full (%d): dropping spans (OTEL_BSP_MAX_QUEUE_SIZE)",
                                self.max_queue)
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
                        log.warning("a task event batch's execute spans cannot be read: %s", e)
                    self.bad_batches += 1
                    continue
                for key, recs in groups:
                    for i in range(0, len(recs), self.batch):
                        self._export(self._resource(key), recs[i:i + self.batch])
        finally:
            with self._idle:
                self._busy = False
                self._idle.notify_all()

    def _resource(self, key: tuple[str, int]) -> Any:
        res = self._resources.get(key)
        if res is None:
            from opentelemetry.sdk.resources import Resource

            node, pid = key
            attrs: dict[str, Any] = {"service.name": self.service}
            if pid:
                attrs["process.pid"] = pid
            if node:
                attrs["ember.node_id"] = node
            if len(self._resources) >= 4096:
                self._resources.clear()
            res = self._resources[key] = Resource.create(attrs)
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
