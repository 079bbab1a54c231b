"""What the dashboard reads besides the cluster's tables, as pure functions over files and text:
Prometheus text (parsed into samples for the metric charts) and the ember_file exporter's spans
(traces listed, one trace laid out as a waterfall). Log files come from each node's raylet
(logs_api.py)."""
from __future__ import annotations

import json
import os
from typing import Any


def parse_prometheus(text: str) -> list[dict[str, Any]]:
    """Samples of a Prometheus text exposition: name, labels, value (histogram buckets left
    out: the charts plot counters, gauges and histogram sums/counts)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: list[dict[str, Any]] = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith("_bucket") or s.name.endswith("_created"):
                continue
            out.append({"name": s.name, "labels": dict(s.labels), "value": float(s.value)})
    return out


def _spans(directory: str) -> list[dict[str, Any]]:
    spans = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    for name in names:
        if not name.endswith(".jsonl"):
            continue
        with open(os.path.join(directory, name), errors="replace") as f:
            for line in f:
                try:
                    spans.append(json.loads(line))
                except ValueError:
                    continue
    return spans


def list_traces(directory: str, limit: int = 100, contains: str = "",
                since_ns: int = 0, until_ns: int = 0) -> list[dict[str, Any]]:
    """Traces found in an ember_file directory, newest first: id, root span (name, service),
    start, duration, span count, services, whether a span failed. `contains` keeps traces with
    a span whose name or service contains it; since/until keep traces that started between."""
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for s in _spans(directory):
        by_trace.setdefault(s.get("trace_id", ""), []).append(s)
    out = []
    needle = contains.lower()
    for tid, spans in by_trace.items():
        if needle and not any(needle in f"{s.get('service', '')} {s.get('name', '')}".lower() for s in spans):
            continue
        start = min(s["start_ns"] for s in spans)
        end = max(s["end_ns"] for s in spans)
        if (since_ns and start < since_ns) or (until_ns and start > until_ns):
            continue
        ids = {s["span_id"] for s in spans}
        roots = sorted((s for s in spans if s.get("parent_id", "") not in ids), key=lambda s: s["start_ns"])
        root = roots[0] if roots else spans[0]
        out.append({"trace_id": tid, "root": root["name"], "service": root["service"], "start_ns": start,
                    "duration_ms": (end - start) / 1e6, "spans": len(spans),
                    "services": sorted({s["service"] for s in spans}),
                    "error": any(s.get("status") == "ERROR" for s in spans)})
    out.sort(key=lambda t: -t["start_ns"])
    return out[:limit]


def waterfall(directory: str, trace_id: str) -> list[dict[str, Any]]:
    """One trace's spans in tree order (parents before children, siblings by start), each with
    its depth and its offset and duration in ms from the trace's start."""
    trace_id = trace_id.lower().replace("-", "")
    spans = [s for s in _spans(directory) if s.get("trace_id") == trace_id]
    if not spans:
        return []
    t0 = min(s["start_ns"] for s in spans)
    ids = {s["span_id"] for s in spans}
    children: dict[str, list[dict[str, Any]]] = {}
    for s in spans:
        children.setdefault(s["parent_id"] if s.get("parent_id") in ids else "", []).append(s)
    for c in children.values():
        c.sort(key=lambda s: s["start_ns"])
    out: list[dict[str, Any]] = []

    def walk(parent: str, depth: int) -> None:
        for s in children.get(parent, []):
            out.append({"span_id": s["span_id"], "parent_id": s.get("parent_id", ""), "name": s["name"],
                        "service": s["service"], "depth": depth,
                        "offset_ms": (s["start_ns"] - t0) / 1e6,
                        "duration_ms": (s["end_ns"] - s["start_ns"]) / 1e6,
                        "status": s.get("status", "UNSET"), "error": s.get("error", ""),
                        "attributes": s.get("attributes", {})})
            walk(s["span_id"], depth + 1)

    walk("", 0)
    return out
