"""The ember_file span exporter (`OTEL_TRACES_EXPORTER=ember_file`: JSON lines per process in
EMBER_TRACE_DIR) and its reader for `ember trace show`: read_trace() gathers one trace's spans,
render_tree() draws them as an indented tree. No OpenTelemetry import until spans are exported.
"""
from __future__ import annotations

import json
import os
from typing import Any, Iterator, Sequence


class FileSpanExporter:
    """Writes finished spans as JSON lines to <dir>/<service>-<pid>.jsonl (for `ember trace show`)."""

    def __init__(self, directory: str, service: str) -> None:
        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, f"{service}-{os.getpid()}.jsonl")
        self.service = service

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        with open(self.path, "a") as f:
            for s in spans:
                f.write(json.dumps(span_to_dict(s, self.service)) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def span_to_dict(s: Any, service: str) -> dict[str, Any]:
    """One span as a JSON-able dict; service: its resource's service.name, else the given one
    (a span made with another process's resource keeps that process's name)."""
    ctx = s.get_span_context()
    res = getattr(s, "resource", None)
    service = (res.attributes.get("service.name") if res is not None else None) or service
    return {
        "trace_id": format(ctx.trace_id, "032x"), "span_id": format(ctx.span_id, "016x"),
        "parent_id": format(s.parent.span_id, "016x") if s.parent is not None else "",
        "name": s.name, "service": service, "start_ns": s.start_time, "end_ns": s.end_time,
        "status": s.status.status_code.name,
        "error": s.status.description or "",
        "attributes": {k: v for k, v in (s.attributes or {}).items()},
    }


def read_trace(directory: str, trace_id: str) -> list[dict[str, Any]]:
    """Every span of one trace found in an ember_file directory."""
    spans = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".jsonl"):
            continue
        with open(os.path.join(directory, name)) as f:
            for line in f:
                try:
                    d = json.loads(line)
                except ValueError:
                    continue
                if d.get("trace_id") == trace_id:
                    spans.append(d)
    return spans


def render_tree(spans: list[dict[str, Any]]) -> Iterator[str]:
    """Lines of an indented tree: service, span name, duration, errors."""
    by_parent: dict[str, list[dict[str, Any]]] = {}
    ids = {s["span_id"] for s in spans}
    for s in spans:
        parent = s["parent_id"] if s["parent_id"] in ids else ""
        by_parent.setdefault(parent, []).append(s)
    for children in by_parent.values():
        children.sort(key=lambda s: s["start_ns"])

    def walk(parent: str, depth: int) -> Iterator[str]:
        for s in by_parent.get(parent, []):
            ms = (s["end_ns"] - s["start_ns"]) / 1e6
            first = (s["error"] or "").splitlines()[:1]
            err = f"  ERROR {first[0] if first else ''}" if s["status"] == "ERROR" else ""
            yield f"{'  ' * depth}{s['service']:16} {s['name']}  {ms:.2f} ms{err}"
            yield from walk(s["span_id"], depth + 1)

    yield from walk("", 0)
