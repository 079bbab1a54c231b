"""OpenTelemetry spans of one execution: `ember.data execute <dataset>` and, below it, one
`ember.data operator <name>` per operator (rows, bytes, tasks, errored blocks). An operator's
tasks are submitted under its span, so their own spans nest below it."""
from __future__ import annotations

from typing import Any

from .operators import RuntimeOp


def _set_error(span: Any, error: BaseException) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_status(Status(StatusCode.ERROR, str(error)[:200]))


class ExecutionSpans:
    """The spans of one execution (executor thread and driver thread)."""

    def __init__(self, name: str) -> None:
        from opentelemetry import trace

        self._tracer = trace.get_tracer("ember.data")
        self._root: Any = self._tracer.start_span(f"ember.data execute {name}")
        self._ops: dict[int, Any] = {}
        self._ended: set[int] = set()

    def op_span(self, op: RuntimeOp) -> Any:
        """The operator's span (started on first use)."""
        sp = self._ops.get(id(op))
        if sp is None:
            from opentelemetry import trace

            ctx = trace.set_span_in_context(self._root)
            sp = self._tracer.start_span(f"ember.data operator {op.name}", context=ctx)
            self._ops[id(op)] = sp
        return sp

    def end_op(self, op: RuntimeOp, error: BaseException | None = None) -> None:
        """Ends the operator's span with its counters (once)."""
        sp = self._ops.get(id(op))
        if sp is None or id(op) in self._ended:
            return
        self._ended.add(id(op))
        s = op.stats
        sp.set_attributes({"ember.data.operator": op.name, "ember.data.rows": s.rows_out,
                           "ember.data.bytes": s.bytes_out, "ember.data.tasks": s.tasks_done,
                           "ember.data.errored_blocks": s.errored_blocks})
        if error is not None:
            sp.record_exception(error)
            _set_error(sp, error)
        sp.end()

    def end(self, error: BaseException | None = None) -> None:
        """Ends the execution's span."""
        if self._root is None:
            return
        if error is not None:
            _set_error(self._root, error)
        self._root.end()
        self._root = None
