"""The prelude of the tracing tests' child processes: tracing set up for one service, with every
finished span record kept in `got` (the fast paths' buffer exports to it)."""
from __future__ import annotations


def keep_spans(service: str) -> str:
    """Python source to start a child script with (it defines `tracing` and `got`)."""
    return f"""
from opentelemetry.sdk.trace.export import SpanExportResult
from ember_common import tracing

assert tracing.setup({service!r})
got = []

class Keep:
    accepts_records = True
    def export(self, batch):
        got.extend(batch)
        return SpanExportResult.SUCCESS
    def shutdown(self):
        pass

tracing._state.buffer.exporters = [Keep()]
"""
