"""Where a lease request goes: here, another node (spillback), or nowhere (infeasible).

Pure logic over this node's resources and the cluster view the GCS publishes, in the shape of
Ray's *hybrid* policy. Every node that has the resources available now gets a score, its
utilization of the requested resources (the busiest of them, GPUs aside; below `spread_threshold` it
counts as 0, so lightly loaded nodes tie). The lowest score wins and this node wins ties:
work stays local while this node is under the threshold (locality, no hop), and spreads to
the least-loaded nodes once it is busier than the threshold or full. Among remote nodes with
equal scores the one with the most headroom wins, then `pick` (a random choice in the raylet,
so several raylets deciding at once do not herd onto one node).

If no node has the resources now, the request waits here when this node could run it later;
if only other nodes could ever run it, it goes to the one with the most total headroom;
otherwise it is infeasible, with a reason naming the missing amounts. A request already
redirected once (spillback_count > 0) is never redirected again: it runs or waits here.

A label selector (Ray's `label_selector`, parsed by `ember_common.labels`) narrows all of this
to the nodes whose labels match it, this node included: a request this node's labels do not
match spills to a matching node, and is infeasible when no alive node matches. With fallbacks (Ray's
`fallback_strategy`), `choose_selector` picks the first selector, the primary one first, that
some alive node matches and could ever run the request on.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from ember_common.labels import Condition, Selector, matches

from .resources import EPS, GPU, NodeResources

DEFAULT_SPREAD_THRESHOLD = 0.5  # Ray's scheduler_spread_threshold


@dataclass
class RemoteNode:
    node_id: str
    raylet_address: str
    total: dict[str, float]
    available: dict[str, float]
    alive: bool = True
    labels: dict[str, str] = field(default_factory=dict)


def with_delta(node: RemoteNode, total: Mapping[str, float], available: Mapping[str, float],
               removed: Iterable[str]) -> RemoteNode:
    """node with the changed entries of a delta heartbeat (new values; `removed` names gone from
    both maps), as a new RemoteNode: Python dict copies, cheap next to reading a whole
    record's protobuf maps when a node holds many bundles."""
    new_total, new_available = dict(node.total), dict(node.available)
    new_total.update(total)
    new_available.update(available)
    for k in removed:
        new_total.pop(k, None)
        new_available.pop(k, None)
    return RemoteNode(node.node_id, node.raylet_address, new_total, new_available, node.alive, node.labels)


@dataclass
class Decision:
    kind: str  # "local", "queue", "spill", "infeasible"
    node: RemoteNode | None = None
    reason: str = field(default="")


Pick = Callable[[list[RemoteNode]], RemoteNode]


def _fits(have: dict[str, float], request: dict[str, float]) -> bool:
    return all(have.get(k, 0.0) + EPS >= v for k, v in request.items() if v > 0)


def utilization(total: dict[str, float], available: dict[str, float],
                request: dict[str, float]) -> float:
    """The busiest requested resource's used share (0..1). GPUs do not count: their shares are
    packed (two 0.5 requests share one GPU), so a node with room on a GPU is as good as any."""
    keys = [k for k, v in request.items() if v > 0 and k != GPU]
    used = [1.0 - max(available.get(k, 0.0), 0.0) / total[k] for k in keys if total.get(k, 0.0) > EPS]
    return max(max(used, default=0.0), 0.0)


def score(total: dict[str, float], available: dict[str, float], request: dict[str, float],
          spread_threshold: float) -> float:
    """The hybrid policy's node score: utilization, 0 below the spread threshold."""
    u = utilization(total, available, request)
    return 0.0 if u < spread_threshold else u


def decide(local: NodeResources, cluster: dict[str, RemoteNode], local_node_id: str,
           request: dict[str, float], spillback_count: int,
           spread_threshold: float = DEFAULT_SPREAD_THRESHOLD, pick: Pick | None = None,
           prefer_here: bool = False, selector: Selector = (),
           local_labels: Mapping[str, str] | None = None) -> Decision:
    """Decides one lease request (see the module docstring). prefer_here (SPREAD, soft
    affinity: the caller chose this node): local whenever it fits now. selector: only nodes
    whose labels (this node's: local_labels) match it may run the request."""
    here_ok = not selector or matches(local_labels or {}, selector)
    if selector:
        cluster = {k: n for k, n in cluster.items() if matches(n.labels, selector)}
    local_now = here_ok and local.fits_now(request)
    if local_now and (spillback_count > 0 or prefer_here or not any(v > 0 for v in request.values())):
        return Decision("local")  # pinned or chosen here, or it needs nothing a node runs out of
    local_ever = here_ok and local.fits_total(request)
    if spillback_count > 0:
        if local_ever:
            return Decision("queue")
        if not here_ok:
            return Decision("infeasible", reason=(
                f"The request {request} was sent to node {local_node_id}, whose labels "
                f"{dict(local_labels or {})} do not match its label selector {_show(selector)}."))
        short = [f"{k}={v:g} (this node has {local.total.get(k, 0.0):g})" for k, v in request.items()
                 if v > 0 and local.total.get(k, 0.0) + EPS < v]
        return Decision("infeasible", reason=(
            f"The request {request} was spilled back to a node that cannot run it: "
            f"{', '.join(short)}; the node it was meant for may have left the cluster."))
    others = [n for n in cluster.values() if n.alive and n.node_id != local_node_id]
    now = [n for n in others if _fits(n.available, request)]
    if local_now:
        mine = score(local.total, local.available, request, spread_threshold)
        if mine == 0.0 or not now:
            return Decision("local")
        best = _best(now, request, spread_threshold, pick)
        if score(best.total, best.available, request, spread_threshold) < mine:
            return Decision("spill", best)
        return Decision("local")
    if now:
        return Decision("spill", _best(now, request, spread_threshold, pick))
    if local_ever:
        return Decision("queue")
    later = [n for n in others if _fits(n.total, request)]
    if later:
        return Decision("spill", max(later, key=lambda n: _headroom(n.total, request)))
    if selector and not here_ok and not any(n.alive for n in cluster.values()):
        return Decision("infeasible", reason=(
            f"No alive node in the cluster has labels matching the label selector "
            f"{_show(selector)} (resources {request})."))
    return Decision("infeasible", reason=_why(request, cluster, local, local_node_id, here_ok))


def choose_selector(local: NodeResources, cluster: dict[str, RemoteNode], local_node_id: str,
                    request: dict[str, float], selectors: list[Selector],
                    local_labels: Mapping[str, str] | None = None) -> Selector:
    """The first of `selectors` (the primary, then the fallbacks) that an alive node (this one
    included) matches and has the total resources for; the primary when none does."""
    for sel in selectors:
        if matches(local_labels or {}, sel) and local.fits_total(request):
            return sel
        if any(n.alive and n.node_id != local_node_id and matches(n.labels, sel) and _fits(n.total, request)
               for n in cluster.values()):
            return sel
    return selectors[0] if selectors else ()


def capacity(local: NodeResources, cluster: dict[str, RemoteNode], local_node_id: str,
             request: dict[str, float], selector: Selector = (),
             local_labels: Mapping[str, str] | None = None) -> int:
    """How many leases of the request's shape the alive nodes' total resources hold at once
    (this node's and the cluster view's; 0: no bound, the shape needs nothing a node runs out
    of). A grant carries it to the owner, which then keeps at most one request of the shape
    beyond it waiting (task_queue): on a full cluster the other requests could only queue and
    be cancelled again when the owner's backlog drains."""
    need = {k: v for k, v in request.items() if v > EPS}
    if not need:
        return 0
    totals = _alive_totals(local, cluster, local_node_id)
    if selector:
        totals = ([local.total] if matches(local_labels or {}, selector) else []) + [
            n.total for n in cluster.values()
            if n.alive and n.node_id != local_node_id and matches(n.labels, selector)]
    return sum(int(min(t.get(k, 0.0) / v for k, v in need.items()) + EPS) for t in totals)


def _alive_totals(local: NodeResources, cluster: dict[str, RemoteNode],
                  local_node_id: str) -> list[dict[str, float]]:
    """Every alive node's total resources, this node's first and once."""
    return [local.total] + [n.total for n in cluster.values() if n.alive and n.node_id != local_node_id]


def _best(nodes: list[RemoteNode], request: dict[str, float], spread_threshold: float,
          pick: Pick | None) -> RemoteNode:
    """The lowest score, then the most headroom; `pick` chooses among exact ties."""
    keyed = [((score(n.total, n.available, request, spread_threshold),
               -_headroom(n.available, request)), n) for n in nodes]
    top = min(k for k, _ in keyed)
    ties = [n for k, n in keyed if k == top]
    return ties[0] if pick is None or len(ties) == 1 else pick(ties)


def _headroom(have: dict[str, float], request: dict[str, float]) -> float:
    return min((have.get(k, 0.0) - v for k, v in request.items() if v > 0), default=0.0)


def _show(selector: Selector) -> str:
    """A parsed selector for messages, in the form the user wrote."""
    def expr(c: Condition) -> str:
        values = ",".join(sorted(c.values))
        return ("!" if c.negate else "") + (values if len(c.values) == 1 else f"in({values})")
    return "{" + ", ".join(f"{c.key!r}: {expr(c)!r}" for c in selector) + "}"


def _why(request: dict[str, float], cluster: dict[str, RemoteNode], local: NodeResources,
         local_node_id: str, here_ok: bool = True) -> str:
    biggest: dict[str, float] = {}
    totals = _alive_totals(local, cluster, local_node_id)
    for t in totals if here_ok else totals[1:]:
        for k, v in t.items():
            biggest[k] = max(biggest.get(k, 0.0), v)
    missing = {k: v for k, v in request.items() if v > 0 and biggest.get(k, 0.0) + EPS < v}
    parts = [f"{k}={v:g} (largest node has {biggest.get(k, 0.0):g})" for k, v in missing.items()]
    return (f"No node in the cluster can satisfy the resource request {request}: "
            f"{', '.join(parts) or 'no single node has all of them'}.")
