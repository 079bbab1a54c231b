"""Where a lease request goes: here, another node (spillback), or nowhere (infeasible).

Pure logic over this node's resources and the cluster view the GCS publishes. Local first: a
request that fits here now runs here. Otherwise it spills to an alive node that has the
resources available now (the most available first), or, if none has them now but this node
could run it later, waits here; if only other nodes could ever run it, it goes to one of them.
A request already redirected once (spillback_count > 0) is never redirected again.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .resources import EPS, NodeResources


@dataclass
class RemoteNode:
    node_id: str
    raylet_address: str
    total: dict[str, float]
    available: dict[str, float]
    alive: bool = True


@dataclass
class Decision:
    kind: str  # "local", "queue", "spill", "infeasible"
    node: RemoteNode | None = None
    reason: str = field(default="")


def _fits(have: dict[str, float], request: dict[str, float]) -> bool:
    return all(have.get(k, 0.0) + EPS >= v for k, v in request.items() if v > 0)


def decide(local: NodeResources, cluster: dict[str, RemoteNode], local_node_id: str,
           request: dict[str, float], spillback_count: int) -> Decision:
    if local.fits_now(request):
        return Decision("local")
    local_ever = local.fits_total(request)
    if spillback_count > 0:
        if local_ever:
            return Decision("queue")
        short = [f"{k}={v:g} (this node has {local.total.get(k, 0.0):g})" for k, v in request.items()
                 if v > 0 and local.total.get(k, 0.0) + EPS < v]
        return Decision("infeasible", reason=(
            f"The request {request} was spilled back to a node that cannot run it: "
            f"{', '.join(short)}; the node it was meant for may have left the cluster."))
    others = [n for n in cluster.values() if n.alive and n.node_id != local_node_id]
    now = [n for n in others if _fits(n.available, request)]
    if now:
        best = max(now, key=lambda n: _headroom(n.available, request))
        return Decision("spill", best)
    if local_ever:
        return Decision("queue")
    later = [n for n in others if _fits(n.total, request)]
    if later:
        return Decision("spill", max(later, key=lambda n: _headroom(n.total, request)))
    return Decision("infeasible", reason=_why(request, cluster, local))


def _headroom(have: dict[str, float], request: dict[str, float]) -> float:
    return min((have.get(k, 0.0) - v for k, v in request.items() if v > 0), default=0.0)


def _why(request: dict[str, float], cluster: dict[str, RemoteNode], local: NodeResources) -> str:
    totals = [local.total] + [n.total for n in cluster.values() if n.alive]
    biggest: dict[str, float] = {}
    for t in totals:
        for k, v in t.items():
            biggest[k] = max(biggest.get(k, 0.0), v)
    missing = {k: v for k, v in request.items() if v > 0 and biggest.get(k, 0.0) + EPS < v}
    parts = [f"{k}={v:g} (largest node has {biggest.get(k, 0.0):g})" for k, v in missing.items()]
    return (f"No node in the cluster can satisfy the resource request {request}: "
            f"{', '.join(parts) or 'no single node has all of them'}.")
