"""The GCS's export of spans from task events (_derived): DerivedSpans decodes the batches the
owners send, in a thread of its own, and exports the spans under the resource of the process
that would have recorded them."""
from __future__ import annotations

import collections
import json
import logging
import os
import threading
from typing import Any, Sequence

from ._buffer import DEFAULT_BATCH, Wake, env_int, export_to, shutdown_exporters
from ._derived import Who, records
from ._otlp import encode_request
from ._records import to_readable

log = logging.getLogger(__name__)


class DerivedSpans:
    """The GCS's export of spans from task events: batches queued as they came (their bytes),
    decoded and exported from one thread every OTEL_BSP_SCHEDULE_DELAY, or as soon as a full
    export batch waits; at most OTEL_BSP_MAX_QUEUE_SIZE records carrying spans wait (one or
    two spans each: the oldest batches go past that, counted and said once)."""

    def __init__(self, exporters: Sequence[Any], scope: Any = None, service: str = "ember-worker") -> None:
        self.exporters = list(exporters)
        self.scope, self.service = scope, service
        self.batch = max(1, env_int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", DEFAULT_BATCH))
        self.max_queue = max(1, env_int("OTEL_BSP_MAX_QUEUE_SIZE", 16384))
        self.delay_s = env_int("OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000
        self._queue: collections.deque[tuple[bytes, int]] = collections.deque()
        self._waiting = 0  # records carrying spans in the queue
        self._lock = threading.Lock()
        self._idle = threading.Condition()
        self._busy = False
        self._wake = Wake()
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

    def _export(self, resource: Any, recs: list[Any]) -> None:
        # An OTLP exporter's resource is its own process's: the worker's goes in the bytes.
        export_to(self.exporters, len(recs),
                  lambda exp: exp.export([], encode_request(recs, resource, self.scope)),
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
    from ._exporters import make_exporter

    service = service or os.environ.get("OTEL_SERVICE_NAME") or "ember-worker"
    exporters = [make_exporter(name, service) for name in names]
    if not exporters:
        return None
    for exp in exporters:
        if getattr(exp, "accepts_records", False):
            exp.scope = scope
    return DerivedSpans(exporters, scope, service)
