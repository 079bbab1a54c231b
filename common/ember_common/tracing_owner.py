"""The owner's side of execute spans it records for its workers (see tracing_spans: a normal
task's `submit_task_span` marks its carrier with OWNER_KEY).

The owner learns each leased worker's identity from the lease grant (`worker_leased`) and, for
each push reply of a marked task, records the `execute <name>` span the worker would have made
(`task_replied`): same name, trace, parent (the submit span, remote), span id
(`execute_span_id(submit span, attempt)`, as the worker computes it), CONSUMER kind, the
worker's start and end times from the reply, Ember's attributes (task, job, node, worker,
attempt), ERROR with the error text when the user's code raised, and the worker's Resource
(service.name `OTEL_SERVICE_NAME` or ember-worker, process.pid, ember.node_id), so exporters
see the span as the worker's. Call only when tracing.enabled().
"""
from __future__ import annotations

import os
from typing import Any

from . import tracing_spans
from .tracing_light import execute_span_id
from .tracing_spans import OWNER_KEY

# worker address -> (node_id, worker_id, pid, Resource or None until the first reply)
_workers: dict[str, list[Any]] = {}
_MAX_WORKERS = 4096


def worker_leased(address: str, node_id: str, worker_id: str, pid: int) -> None:
    """A lease granted the worker at address (its node, id and pid, from the Grant)."""
    w = _workers.get(address)
    if w is not None and w[1] == worker_id:
        return
    if len(_workers) >= _MAX_WORKERS:
        _workers.clear()
    _workers[address] = [node_id, worker_id, pid, None]


def _resource(w: list[Any]) -> Any:
    from opentelemetry.sdk.resources import Resource

    attrs: dict[str, Any] = {"service.name": os.environ.get("OTEL_SERVICE_NAME") or "ember-worker"}
    if w[2]:
        attrs["process.pid"] = w[2]
    if w[0]:
        attrs["ember.node_id"] = w[0]
    w[3] = Resource.create(attrs)
    return w[3]


def task_replied(spec: Any, reply: Any, address: str) -> None:
    """The worker at address answered a push of spec (a TaskSpec; reply: its PushTaskReply):
    records the execute span of that attempt when the spec's carrier says the owner does, the
    task ran and is sampled, and the worker did not record the span itself (the user's code
    changed it: PushTaskReply.execute_span_recorded)."""
    carrier = spec.trace_context
    if not reply.start_time_ns or reply.execute_span_recorded or OWNER_KEY not in carrier:
        return
    tp = carrier["traceparent"]
    flags = int(tp[53:55], 16)
    if not flags & 1:
        return
    w = _workers.get(address)
    if w is None:  # not leased through this owner's submitter: what is known
        w = _workers[address] = ["", "", 0, None]
    attempt = spec.attempt
    submit = int(tp[36:52], 16)
    o = tracing_spans._otel
    status = (o.Status(o.StatusCode.ERROR, reply.error_message[:500])
              if reply.is_application_error else None)
    state = o.TraceState.from_header([carrier["tracestate"]]) if "tracestate" in carrier else None
    tracing_spans.emit((
        "execute " + spec.name, int(tp[3:35], 16), execute_span_id(submit, attempt), flags, state,
        submit, o.SpanKind.CONSUMER, reply.start_time_ns, reply.end_time_ns,
        {"ember.task_id": spec.task_id.hex(), "ember.job_id": spec.job_id.hex(),
         "ember.node_id": w[0], "ember.worker_id": w[1], "ember.attempt": attempt},
        status, (), w[3] or _resource(w)))
