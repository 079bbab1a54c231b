"""The autoscaling policy, pure (no sockets, no clock): the cluster's demand, its node types and
its nodes in, the nodes to launch and to terminate out. The loop (monitor.py) feeds it the GCS's
GetClusterResourceState and the provider's nodes each round and carries its decisions out.

Scale up, in order (as Ray's resource_demand_scheduler, in spirit):
1. every node type up to its `min_workers`;
2. `request_resources()` bundles: fitted onto the *totals* of every node (running, launching and
   just decided), the rest onto new nodes — a floor on the cluster's size, not added to its load;
3. the demand — lease requests queued or infeasible on the raylets, and the unplaced bundles of
   pending placement groups (STRICT_PACK's as one shape, STRICT_SPREAD's on distinct nodes) —
   fitted onto what is *free* on the running nodes and onto the whole of launching ones, the
   rest onto new nodes. Steps 1–2 are not capped; step 3 keeps at most
   max(5, upscaling_speed × nodes) launches in flight.
New nodes: the node type that packs the remaining demand best (binpack.score), one node at a
time, within each type's `max_workers` and the cluster's `max_workers`. Demand no node type can
ever hold is reported as infeasible.

Scale down: a worker node idle (nothing leased, nothing queued, every resource free) for
`idle_timeout_s` is terminated, longest idle first — never the head, never below its type's
`min_workers`, never one whose capacity the `request_resources()` floor still needs, never one
holding primary copies of objects (kept until they are freed; see README.md), never one whose
free resources the demand is counted on, and never while feasible demand is unmet.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from .binpack import Resources, fit_onto, fits, score


@dataclass(frozen=True)
class NodeType:
    """One kind of worker node (`available_node_types` entry)."""

    name: str
    resources: Resources
    min_workers: int = 0
    max_workers: int = 0


@dataclass(frozen=True)
class Node:
    """A node the autoscaler knows: running in the cluster, or launched and not joined yet."""

    node_id: str  # the GCS's node id, or the provider's id while launching
    node_type: str  # "" for a node the autoscaler does not manage (the head)
    total: Resources
    available: Resources
    idle_s: float = 0.0
    busy: bool = False  # leases held, or no load report yet
    launching: bool = False
    has_objects: bool = False  # primary copies of objects live here


@dataclass(frozen=True)
class PendingGroup:
    """A placement group's unplaced bundles and its strategy (PACK, SPREAD, STRICT_*)."""

    strategy: str
    bundles: list[Resources]


@dataclass
class Demand:
    """What the cluster needs: lease requests by shape, pending groups, the requested floor."""

    shapes: list[Resources] = field(default_factory=list)
    groups: list[PendingGroup] = field(default_factory=list)
    requested: list[Resources] = field(default_factory=list)


@dataclass(frozen=True)
class Terminate:
    """Stop a node; why says so in the log and `ember status`."""

    node_id: str
    why: str


@dataclass
class Decision:
    """One round's result: how many nodes of each type to launch, which to stop, and the shapes
    no node type can ever hold."""

    launch: dict[str, int] = field(default_factory=dict)
    terminate: list[Terminate] = field(default_factory=list)
    infeasible: list[Resources] = field(default_factory=list)


class Policy:
    """Node types and limits; `decide` is the whole policy."""

    def __init__(self, node_types: list[NodeType], *, max_workers: int, idle_timeout_s: float,
                 upscaling_speed: float = 1.0) -> None:
        self.types = {t.name: t for t in node_types}
        self.max_workers = max_workers
        self.idle_timeout_s = idle_timeout_s
        self.upscaling_speed = upscaling_speed

    def decide(self, nodes: list[Node], demand: Demand) -> Decision:
        """The launches and terminations for a cluster of `nodes` facing `demand`."""
        out = Decision()
        count = {name: 0 for name in self.types}
        for n in nodes:
            if n.node_type in count:
                count[n.node_type] += 1
        workers = sum(count.values())
        new: list[Resources] = []  # totals of the nodes decided this round

        def launch(name: str) -> bool:
            nonlocal workers
            t = self.types[name]
            if count[name] >= t.max_workers or workers >= self.max_workers:
                return False
            count[name] += 1
            workers += 1
            out.launch[name] = out.launch.get(name, 0) + 1
            new.append(dict(t.resources))
            return True

        for t in self.types.values():  # 1. min_workers
            while count[t.name] < t.min_workers and launch(t.name):
                pass
        # 2. the request_resources() floor, on totals
        totals = [dict(n.total) for n in nodes] + [dict(r) for r in new]
        left = fit_onto([dict(r) for r in demand.requested], totals)
        out.infeasible += self._grow(left, launch, new, cap=None)
        # 3. the demand, on what is free now and on the launching and new nodes
        free = [dict(n.total if n.launching else n.available) for n in nodes] + [dict(r) for r in new]
        free_before = [dict(f) for f in free]
        unmet: list[Resources] = fit_onto([dict(s) for s in demand.shapes], free)
        spread: list[list[Resources]] = []
        for g in demand.groups:
            if g.strategy == "STRICT_PACK":
                whole: Resources = {}
                for b in g.bundles:
                    for k, v in b.items():
                        whole[k] = whole.get(k, 0.0) + v
                unmet += fit_onto([whole], free)
            elif g.strategy == "STRICT_SPREAD":
                if fit_onto([dict(b) for b in g.bundles], [dict(f) for f in free], distinct=True):
                    spread.append([dict(b) for b in g.bundles])
                else:
                    fit_onto([dict(b) for b in g.bundles], free, distinct=True)
            else:
                unmet += fit_onto([dict(b) for b in g.bundles], free)
        launching = sum(1 for n in nodes if n.launching) + sum(out.launch.values())
        cap = max(5, math.ceil(self.upscaling_speed * max(1, len(nodes)))) - launching
        out.infeasible += self._grow(unmet, launch, new, cap=cap)
        for bundles in spread:  # one new node per bundle that no node can take
            for b in bundles:
                out.infeasible += self._grow([b], launch, new, cap=None)
        # a node whose free resources the demand is counted on stays (it is about to get work)
        needed = {n.node_id for n, f, was in zip(nodes, free, free_before, strict=False) if f != was}
        if not any(self._feasible(s) for s in unmet + [b for g in spread for b in g]):
            out.terminate = self._idle([n for n in nodes if n.node_id not in needed], demand.requested, count)
        return out

    def _grow(self, left: list[Resources], launch: Callable[[str], bool], new: list[Resources],
              cap: int | None) -> list[Resources]:
        """Launches nodes for `left` (the best-packing type first) until it fits or the limits
        are hit; returns the shapes no node type can ever hold."""
        infeasible = [s for s in left if not self._feasible(s)]
        left = [s for s in left if s not in infeasible]
        while left and (cap is None or cap > 0):
            ranked = sorted(((score(t.resources, left), t.name) for t in self.types.values()),
                            reverse=True)
            for sc, name in ranked:
                if sc[3] > 0 and launch(name):
                    break
            else:
                return infeasible  # every type that could help is at its max
            if cap is not None:
                cap -= 1
            left = fit_onto(left, [new[-1]])
        return infeasible

    def _feasible(self, shape: Resources) -> bool:
        return any(fits(shape, t.resources) for t in self.types.values())

    def _idle(self, nodes: list[Node], requested: list[Resources], count: dict[str, int]) -> list[Terminate]:
        """Idle worker nodes past the timeout that may go (longest idle first)."""
        out: list[Terminate] = []
        remaining = list(nodes)
        candidates = sorted((n for n in nodes if n.node_type and not n.launching and not n.busy
                             and not n.has_objects and n.idle_s >= self.idle_timeout_s),
                            key=lambda n: -n.idle_s)
        for n in candidates:
            t = self.types.get(n.node_type)
            rest = [x for x in remaining if x is not n]
            if t is not None and count[n.node_type] <= t.min_workers:
                continue
            if requested and fit_onto([dict(r) for r in requested], [dict(x.total) for x in rest]):
                continue  # the request_resources() floor needs it
            remaining = rest
            if t is not None:
                count[n.node_type] -= 1
            out.append(Terminate(n.node_id, f"idle for {n.idle_s:.0f}s (idle_timeout_s "
                                            f"{self.idle_timeout_s:g})"))
        return out
