"""Where finished spans go: SpanBuffer, the batching span processor `setup()` installs.

It does what the SDK's BatchSpanProcessor does (a bounded queue, a thread that exports a batch
when `max_export_batch_size` spans wait or every `schedule_delay`, force_flush, shutdown; the
same OTEL_BSP_* variables), with a cheaper way in for the per-task fast paths: `add_record()`
appends a record (_records: SubmitRecord, ExecRecord, SpanRecord) instead of an SDK
ReadableSpan, so a task's span costs one tuple and a deque append in the task's thread. The
export thread turns records into ReadableSpans only for exporters that need them; the OTLP
exporters encode records directly (_otlp). Spans made by the SDK itself (`span()`, users' own
spans) come through `on_end()` as ReadableSpans, as with any span processor.
"""
from __future__ import annotations

import collections
import logging
import os
import threading
import time
from typing import Any, Sequence

from opentelemetry.sdk.trace import SpanProcessor

from ._records import RECORD_TYPES, ExecRecord, SubmitRecord, to_readable

log = logging.getLogger(__name__)
DEFAULT_BATCH = 2048  # spans per export (the spec's default: 512; see SpanBuffer.__init__)
SDK_BATCH = 512  # at most this many SDK spans per export, unless the batch size is set


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        log.warning("%s=%r is not an integer; using %d", name, raw, default)
        return default


class SpanBuffer(SpanProcessor):
    """A span processor: queues finished spans (records or ReadableSpans) and exports them in
    batches from one thread, to every exporter given."""

    def __init__(self, exporters: Sequence[Any], resource: Any = None, scope: Any = None,
                 max_queue_size: int | None = None) -> None:
        self.exporters = list(exporters)
        self.resource, self.scope = resource, scope  # what records are turned into spans with
        self.max_queue = max_queue_size or env_int("OTEL_BSP_MAX_QUEUE_SIZE", 16384)
        # The spec's default batch is 512; Ember's is 2048 (OTEL_BSP_MAX_EXPORT_BATCH_SIZE
        # wins): an export has a fixed cost in the exporting process and in the receiver
        # whatever its size, and the per-task spans are small, so larger batches cost less per
        # span (docs/perf.md has the figures). A request holds at most 512 other spans under
        # the default (SDK spans, users' own, SpanRecords, whose attributes and events users'
        # code may set), and the OTLP exporter halves any request over
        # _otlp_grpc.MAX_REQUEST_BYTES (long task names), so that it stays within a
        # receiver's 4 MiB as with the SDK's processor.
        explicit = os.environ.get("OTEL_BSP_MAX_EXPORT_BATCH_SIZE") is not None
        self.batch = max(1, min(env_int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", DEFAULT_BATCH), self.max_queue))
        self.sdk_batch = self.batch if explicit else min(self.batch, SDK_BATCH)
        self.delay_s = env_int("OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000
        self._queue: collections.deque[Any] = collections.deque()
        self._wake = Wake()
        self._idle = threading.Condition()
        self._exporting = False
        self._flushes = 0  # force_flush calls waiting: export everything, not only full batches
        self._shutdown = False
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="ember-span-export", daemon=True)
        self._thread.start()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._after_fork)

    # ----------------------------------------------------------------- producers (any thread)
    def add_record(self, rec: Any) -> None:
        """Queues one finished span as a record (_records)."""
        q = self._queue
        q.append(rec)
        n = len(q)
        if n >= self.batch and n % self.batch == 0 or n > self.max_queue:
            self._wake.set()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def _on_ending(self, span: Any) -> None:
        pass

    def on_end(self, span: Any) -> None:
        """A finished SDK span (sampled ones only, as the SDK's processors do)."""
        if span.context is not None and span.context.trace_flags.sampled:
            self.add_record(span)

    # ----------------------------------------------------------------- export thread
    def _run(self) -> None:
        while not self._shutdown:
            # Woken by a full batch: full batches only (as the SDK's BatchSpanProcessor), the
            # rest waits for more spans, the timer or a flush; every export has a fixed cost
            # (a gRPC call), so draining the queue in the small batches that arrive meanwhile
            # would cost several times the spans' encoding.
            full_only = self._wake.wait(self.delay_s)
            self._export_all(full_only)
        self._export_all()

    def _take(self) -> list[Any]:
        q = self._queue
        if len(q) > self.max_queue:  # the exporter cannot keep up: drop the oldest, say so once
            over = len(q) - self.max_queue
            for _ in range(over):
                q.popleft()
            if not self.dropped:
                log.warning("span queue full (%d): dropping spans (OTEL_BSP_MAX_QUEUE_SIZE)", self.max_queue)
            self.dropped += over
        return [q.popleft() for _ in range(min(self.batch, len(q)))]

    def _export_all(self, full_only: bool = False) -> None:
        """Exports what is queued, in batches; full_only: only while a full batch waits (and
        no flush is asked for)."""
        with self._idle:
            self._exporting = True
        try:
            while True:
                if full_only and len(self._queue) < self.batch and not self._flushes and not self._shutdown:
                    return
                batch = self._take()
                if not batch:
                    return
                self._export(batch)
        finally:
            with self._idle:
                self._exporting = False
                self._idle.notify_all()

    def _export(self, batch: list[Any]) -> None:
        n = self.sdk_batch
        if len(batch) > n and sum(type(s) is not SubmitRecord and type(s) is not ExecRecord for s in batch) > n:
            # more than n spans that are not a task's own records: n at a time
            for i in range(0, len(batch), n):
                self._export(batch[i:i + n])
            return
        export_to(self.exporters, len(batch), lambda exp: exp.export(batch),
                  lambda: [to_readable(r, self.resource, self.scope) if type(r) in RECORD_TYPES else r for r in batch])

    # ----------------------------------------------------------------- control
    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Exports everything queued now; True when done within the timeout."""
        if self._shutdown:
            return True
        deadline = timeout_millis / 1000
        with self._idle:
            self._flushes += 1
        try:
            self._wake.set()
            start = time.monotonic()
            with self._idle:
                if not self._idle.wait_for(lambda: not self._queue and not self._exporting, deadline):
                    return False
            # an exporter that hands spans on (_relay) has them exported before this returns
            left_ms = max(1, int((deadline - (time.monotonic() - start)) * 1000))
            return all(exp.force_flush(left_ms) is not False for exp in self.exporters
                       if hasattr(exp, "force_flush"))
        finally:
            with self._idle:
                self._flushes -= 1

    def shutdown(self) -> None:
        if self._shutdown:
            return
        self._shutdown = True
        self._wake.set()
        self._thread.join(30)
        shutdown_exporters(self.exporters)

    def _after_fork(self) -> None:
        self._queue.clear()
        self._wake = Wake()
        self._idle = threading.Condition()
        self._exporting = False
        self._flushes = 0
        self._thread = threading.Thread(target=self._run, name="ember-span-export", daemon=True)
        self._thread.start()


class Wake:
    """What wakes the export thread: an event for one waiter made of one lock (held while
    unset). set() never blocks: threading.Event.set takes the lock of a Condition the export
    thread takes too, and a set() that finds it taken gives the GIL away and waits (on the
    driver, its submitting thread, once per batch)."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()

    def set(self) -> None:
        try:
            self._lock.release()
        except RuntimeError:  # set already
            pass

    def wait(self, timeout: float) -> bool:
        """True when set (it is then unset again), False after timeout seconds."""
        return self._lock.acquire(timeout=timeout)


def export_to(exporters: Sequence[Any], n: int, records: Any, readable: Any) -> None:
    """Hands one batch of n spans to every exporter, with instrumentation suppressed (the
    exporters' own calls make no spans): `records(exp)` for an exporter that takes records,
    `readable()`'s SDK spans (made once) for the others. A failing exporter is logged; the
    others still get the batch."""
    from opentelemetry import context

    token = context.attach(context.set_value(context._SUPPRESS_INSTRUMENTATION_KEY, True))
    try:
        spans: list[Any] | None = None
        for exp in exporters:
            try:
                if getattr(exp, "accepts_records", False):
                    records(exp)
                else:
                    if spans is None:
                        spans = readable()
                    exp.export(spans)
            except Exception:
                log.exception("exporting %d spans failed", n)
    finally:
        context.detach(token)


def shutdown_exporters(exporters: Sequence[Any]) -> None:
    """Shuts every exporter down (a failing one is logged)."""
    for exp in exporters:
        try:
            exp.shutdown()
        except Exception:
            log.exception("shutting down a span exporter failed")

