"""OpenTelemetry tracing for every Ember process, configured by the standard OTEL_* variables:
the one door the core, the services and the GCS use (README.md in this folder has the design).

    set-up         setup, enabled, shutdown, flush, exporter_names, tracer, node_id
    any span       span, annotate, set_error, inject, extract, server_span, ServerInterceptor,
                   metadata, metadata_from
    a task's spans task_submitted, submit_span, submit_left, task_executing, exec_begin,
                   exec_finish, execute_span, task_span, parse_trace_parent, traceparent,
                   trace_id_hex, inject_task, extract_task
    left to the GCS leave_spans_to_gcs, keep_spans, leaves_spans, record_submit_left,
                   record_exec_left, record_exec_from_reply, resource_attributes,
                   DERIVED_KV_NAMESPACE, DERIVED_KV_KEY, announcement, exec_span_id,
                   derived_spans (the GCS's exporter)
    ember_file     read_trace, render_tree, span_to_dict, FileSpanExporter

Everything else is private to the package. Importing it loads no OpenTelemetry module: the SDK
comes in with `setup()` when an exporter is configured, so a process that never traces (a
forked worker's template) does not carry it.
"""
from __future__ import annotations

from typing import Any, Callable

from . import _derived, _submit
from . import _state as _st
from ._context import encode as _encode
from ._context import parse_trace_parent, traceparent
from ._derived import KV_KEY as DERIVED_KV_KEY
from ._derived import KV_NAMESPACE as DERIVED_KV_NAMESPACE
from ._derived import announcement
from ._derived import span_id as exec_span_id
from ._files import FileSpanExporter, read_trace, render_tree, span_to_dict
from ._provider import (
    ServerInterceptor,
    add_span_processor,
    annotate,
    exporter_names,
    flush,
    metadata,
    metadata_from,
    server_span,
    shutdown,
    tracer,
)
from ._provider import setup as _setup
from ._records import ExecRecord
from ._spans import (
    execute_span,
    extract,
    inject,
    set_error,
    span,
    submit_span,
    task_span,
)
from ._submit import carrier as _carrier
from ._submit import left as submit_left
from ._submit import record_left as record_submit_left
from ._submit import task_submitted, trace_id_hex

__all__ = [
    "DERIVED_KV_KEY", "DERIVED_KV_NAMESPACE", "FileSpanExporter", "ServerInterceptor", "add_span_processor",
    "annotate", "announcement", "derived_spans", "enabled", "exec_begin", "exec_finish", "exec_span_id",
    "execute_span", "exporter_names", "extract", "extract_task", "flush", "inject", "inject_task", "keep_spans",
    "leave_spans_to_gcs", "leaves_spans", "metadata", "metadata_from", "node_id", "parse_trace_parent", "read_trace",
    "record_exec_from_reply", "record_exec_left", "record_submit_left", "render_tree", "resource_attributes",
    "server_span", "set_error", "setup", "shutdown", "span", "span_to_dict", "submit_left", "submit_span",
    "task_executing", "task_span", "task_submitted", "trace_id_hex", "traceparent", "tracer",
]


def enabled() -> bool:
    """Whether tracing is on in this process (callers skip every tracing call when not)."""
    return _st.on


def node_id() -> str:
    """The node of this process as setup() was told ("" if none), for span attributes."""
    return _st.node_id


def _task_executing_unset(name: str, spec: Any, node_id: str, worker_id: str, tp: bytes | None = None) -> Any:
    from ._exec import task_executing as f

    return f(name, spec, node_id, worker_id, tp)


def _exec_begin_unset(*args: Any) -> Any:
    from ._exec import begin as f

    return f(*args)


def _exec_finish_unset(*args: Any) -> Any:
    from ._exec import finish as f

    return f(*args)


# The worker's execute span (_exec: a context manager, or begin/finish for a thread's
# synchronous task, begin's None meaning task_executing's way); callers check tracing is on.
# Bound by setup(): _exec is imported only when tracing is on, because a forked worker that
# never traces should not carry its module in the fork server's template.
task_executing: Callable[..., Any] = _task_executing_unset
exec_begin: Callable[..., Any] = _exec_begin_unset
exec_finish: Callable[..., Any] = _exec_finish_unset


def setup(default_service_name: str, node_id: str = "") -> bool:
    """Configures the SDK once per process from the environment. Returns whether tracing is on.
    node_id (raylet, objmgr, workers) becomes the resource attribute `ember.node_id`."""
    global task_executing, exec_begin, exec_finish
    on = _setup(default_service_name, node_id)
    if on:
        from . import _exec

        task_executing, exec_begin, exec_finish = _exec.task_executing, _exec.begin, _exec.finish
    return on


def inject_task(spec: Any) -> None:
    """Writes the current trace context into spec.trace_parent (replacing what it held) in the
    header form: for a task whose spans are not the fast paths' (an actor's creation)."""
    headers: dict[str, str] = {}
    inject(headers)
    spec.trace_parent = _encode(headers)


def extract_task(spec: Any) -> Any:
    """The OpenTelemetry Context of spec's trace_parent (for a span under the task's context)."""
    return extract(_carrier(spec))


def record_exec_left(p: Any) -> None:
    """Records the execute span exec_finish left to the owner after all (ended now)."""
    from ._exec import record_left

    record_left(p)


def record_exec_from_reply(spec: Any, start_ns: int, end_ns: int) -> None:
    """Records here the execute span a worker left to this owner (its reply said so) when no
    task event will carry it: the worker's node and id are not known here."""
    _st.emit(ExecRecord(f"execute {spec.name}", spec.trace_parent, exec_span_id(spec.task_id, spec.attempt),
                        start_ns, end_ns, spec.task_id, spec.job_id, spec.attempt, spec.actor_id, "", "", None))


def leave_spans_to_gcs(announced: bytes | None) -> bool:
    """Given what the GCS announced under DERIVED_KV_* (None: nothing), leaves this process's
    clean execute spans and root submit spans to task events when the GCS exports them to where
    this process would send them. Returns whether it does."""
    on = announced is not None and announced == announcement(exporter_names())
    _derived.state.on = on
    _submit.set_left(on)
    return on


def keep_spans() -> None:
    """This process records every span itself from now on (its task events stopped)."""
    _derived.state.on = False
    _submit.set_left(False)


def leaves_spans() -> bool:
    """Whether this process leaves spans to its GCS (leave_spans_to_gcs)."""
    return _derived.state.on


def resource_attributes() -> dict[str, Any]:
    """This process's tracing resource attributes (empty when tracing is off)."""
    res = _st.resource
    return dict(res.attributes) if res is not None else {}


def derived_spans(service: str | None = None) -> Any:
    """The GCS's exporter of spans from task events (_derived_export.DerivedSpans), with this
    process's exporters and tracer scope; None when tracing is off."""
    if not _st.on:
        return None
    from ._derived_export import make

    return make(exporter_names(), getattr(_st.tracer, "_instrumentation_scope", None), service)
