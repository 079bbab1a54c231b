"""The autoscaler part of `ember status`, in `ray status`'s shape: node status (Active, Idle,
Pending, Recent failures) and resources (Total Usage, From request_resources, Pending Demands). It reads
the GCS's GetClusterResourceState and the autoscaler's state in the internal KV (namespace
"autoscaler", key "status"); without an autoscaler the node types are "head" and "worker" and
nothing is pending. `format_report` is pure."""
from __future__ import annotations

import json
import time
from typing import Any

MAX_FAILURES_SHOWN = 20


def _shape(resources: Any) -> str:
    return str({k: float(v) for k, v in sorted(dict(resources).items())})


def _hms(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts))


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.2f}{unit}"
        n /= 1024
    return f"{n:.2f}TiB"


def _usage(nodes: Any) -> list[str]:
    """` used/total name` per resource over the nodes (bytes for memory), as `ray status`."""
    total: dict[str, float] = {}
    free: dict[str, float] = {}
    for n in nodes:
        for k, v in n.total_resources.items():
            total[k] = total.get(k, 0.0) + v
            free[k] = free.get(k, 0.0) + n.available_resources.get(k, 0.0)
    out = []
    for k in sorted(total, key=lambda k: (k not in ("CPU", "GPU"), k)):
        used = total[k] - free[k]
        out.append(f" {_bytes(used)}/{_bytes(total[k])} {k}" if k.endswith("memory")
                   else f" {used:.1f}/{total[k]:.1f} {k}")
    return out


def format_report(state: Any, status: dict[str, Any] | None, now: float) -> list[str]:
    """The lines for a GetClusterResourceStateReply and the autoscaler's status JSON (None when
    no autoscaler published one)."""
    types = (status or {}).get("node_types", {})
    head_type = (status or {}).get("head_node_type") or "head"
    active: dict[str, int] = {}
    idle: dict[str, int] = {}
    for n in state.nodes:
        t = types.get(n.node_id) or (head_type if n.is_head else "worker")
        busy = not (n.reported and n.idle_duration_s > 0)  # reserved bundles make a node busy too
        (active if busy else idle)[t] = (active if busy else idle).get(t, 0) + 1
    if status is None:
        when = "no autoscaler is running"
    else:
        ts = status.get("time", now)
        when = f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(ts))} ({max(0.0, now - ts):.0f}s ago)"
    out = ["=" * 8 + f" Autoscaler status: {when} " + "=" * 8, "Node status", "-" * 60, "Active:"]
    out += [f" {c} {t}" for t, c in sorted(active.items())] or [" (no active nodes)"]
    out += ["Idle:"] + ([f" {c} {t}" for t, c in sorted(idle.items())] or [" (no idle nodes)"])
    pending: dict[str, int] = {}
    waiting = []
    for p in (status or {}).get("pending_launches", []):
        if p.get("state") == "launching":
            pending[p["node_type"]] = pending.get(p["node_type"], 0) + 1
        else:
            waiting.append(f" {p.get('provider_id', '?')}: {p.get('node_type') or 'node'}, {p.get('state')}")
    lines = [f" {t}, {c} launching" for t, c in sorted(pending.items())] + waiting
    out += ["Pending:"] + (lines or [" (no pending nodes)"])
    failures = list((status or {}).get("recent_failures", []))[-MAX_FAILURES_SHOWN:]
    out += ["Recent failures:"] + ([f" {f['node_type']}: LaunchFailed (latest_attempt: {_hms(f['time'])})"
                                    f" - {f['message']}" for f in reversed(failures)] or [" (no failures)"])
    out += ["", "Resources", "-" * 60, "Total Usage:"] + (_usage(state.nodes) or [" (no resources)"])
    out += ["", "From request_resources:"]
    out += [f" {_shape(d.resources)}: {d.count} from request_resources()" for d in state.requested] or [
        " (no resource demands)"]
    tasks: dict[str, int] = {}
    for n in state.nodes:
        for d in (*n.queued, *n.infeasible):
            tasks[_shape(d.resources)] = tasks.get(_shape(d.resources), 0) + d.count
    demand = [f" {shape}: {c}+ pending tasks/actors" for shape, c in sorted(tasks.items())]
    groups: dict[str, int] = {}
    for g in state.pending_placement_groups:
        key = " + ".join(f"{_shape(b.resources)} * {b.count}" for b in g.bundles) + f" ({g.strategy})"
        groups[key] = groups.get(key, 0) + 1
    demand += [f" {k}: {c}+ pending placement groups" for k, c in sorted(groups.items())]
    out += ["Pending Demands:"] + (demand or [" (no resource demands)"])
    infeasible = (status or {}).get("infeasible", [])
    if infeasible:
        out += ["No node type can hold (infeasible):"] + [f" {_shape(s)}" for s in infeasible]
    return out


def autoscaler_report(address: str) -> list[str]:
    """The lines for the cluster at `address`; [] when the GCS does not serve the demand."""
    from ember_common import autoscaler_client, rpc

    from .common import gcs

    try:
        state = autoscaler_client.fetch_cluster_resource_state(address, timeout_s=5)
    except rpc.ServiceError:
        return []
    status = None
    try:
        with gcs(address) as client:
            raw = client.internal_kv_get(autoscaler_client.KV_NAMESPACE, autoscaler_client.STATUS_KEY)
        status = json.loads(raw) if raw else None
    except (rpc.ServiceError, ValueError):
        status = None
    return ["", *format_report(state, status, time.time())]
