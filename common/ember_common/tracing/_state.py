"""The tracing pipeline of this process as the fast paths see it: set once by `_spans.init()`
when `setup()` turns tracing on, read by _spans, _light, _exec and _submit at each span.

A module of plain globals (not an object) because the per-task paths read them as often as
once per task: a module attribute is the cheapest lookup they can make, and every reader sees
the value init() set without holding a reference of its own.
"""
from __future__ import annotations

from typing import Any

M64 = (1 << 64) - 1  # the low 64 bits of a trace id

on = False  # tracing is on in this process (setup() succeeded)
node_id = ""  # the node of this process (raylet, objmgr), for span attributes

tracer: Any = None  # the SDK tracer (`ember`)
fast = False  # the fast paths may be used: W3C propagation, the SDK's own provider
sampler: Any = None
id_gen: Any = None
processor: Any = None  # the provider's span processor (a SynchronousMultiSpanProcessor)
resource: Any = None  # this process's Resource
scope: Any = None  # the tracer's InstrumentationScope
random_flag = 0  # W3C's random-trace-id flag when the id generator's ids are random
otel: Any = None  # namespace of OpenTelemetry names the fast paths use (_spans.init)
root_bound: int | None = None  # a root is sampled iff trace_id's low 64 bits < this (None: ask the sampler)
buffer: Any = None  # the SpanBuffer, when the fast paths may queue records into it directly
only_buffer: Any = None  # the provider's processor tuple while the SpanBuffer is its only one


def direct() -> bool:
    """Whether records may go straight into the SpanBuffer (it is the only span processor)."""
    return buffer is not None and processor._span_processors is only_buffer


def emit(rec: Any) -> None:
    """A finished fast-path span (a record: _records) to the span processors: queued as is
    while the SpanBuffer is the only one, else as an SDK ReadableSpan."""
    if buffer is not None and processor._span_processors is only_buffer:
        buffer.add_record(rec)
    else:
        from ._records import to_readable

        processor.on_end(to_readable(rec, resource, scope))
