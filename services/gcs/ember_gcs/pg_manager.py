"""The placement group state machine, pure: events in, decisions out, an injected clock.

PENDING --schedule--> (prepare on every chosen raylet) --all prepared--> PREPARED --all
committed--> CREATED. Any prepare or commit failure rolls back every bundle of the attempt
(Cancel) and the group waits again. A node's death puts its groups' bundles there back to
unplaced: RESCHEDULING (the bundles elsewhere stay). remove() -> REMOVED (Cancel on every node
holding a bundle); a group whose job ends goes too unless detached. Pending groups are retried
in creation order, all of them in one round (`schedule_round`), so the driver (placement_groups.py)
can send one prepare and one commit per raylet for the whole round (`by_node`); it persists the
records and talks to the raylets.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from ember_common import resources as kit_resources
from ember_common.labels import Selector, matches, parse_selector
from ember_common.proto import common_pb2
from ember_common.rpc import AlreadyExists, InvalidArgument, NotFound
from ember_common.validate import resource_map
from ember_common.validate_rules import MAX_BUNDLES_PER_GROUP

from .placement_policy import NoPlacement, place

PG = common_pb2.PlacementGroupInfo
WAITING = (PG.PENDING, PG.RESCHEDULING)


@dataclass(frozen=True)
class Prepare:
    """Reserve these bundles: node id -> bundle indexes."""

    pg_id: bytes
    plan: dict[str, list[int]]


@dataclass(frozen=True)
class Wait:
    """Nothing to do for now (the reason is recorded in the group's state_message)."""

    pg_id: bytes
    reason: str
    infeasible: bool


@dataclass(frozen=True)
class Cancel:
    """Release these bundles of the group on that node."""

    pg_id: bytes
    node_id: str
    indexes: list[int] = field(default_factory=list)


def by_node(items: list[tuple[bytes, dict[str, list[int]]]]) -> dict[str, list[tuple[bytes, list[int]]]]:
    """Groups' plans (id, node -> indexes) regrouped per node: node -> [(id, indexes)], so that
    one RPC per node carries every group of a round (plans, or Cancel's node and indexes)."""
    out: dict[str, list[tuple[bytes, list[int]]]] = {}
    for pg_id, plan in items:
        for node, indexes in plan.items():
            out.setdefault(node, []).append((pg_id, list(indexes)))
    return out


def selectors(spec: common_pb2.PlacementGroupInfo) -> dict[int, Selector]:
    """The bundles' label selectors (bundle_label_selector), by index; InvalidArgument naming a
    bad one."""
    out: dict[int, Selector] = {}
    for i, b in enumerate(spec.bundles):
        if b.label_selector:
            try:
                out[i] = parse_selector(dict(b.label_selector), f"bundle_label_selector[{i}]")
            except ValueError as e:
                raise InvalidArgument(str(e)) from None
    return out


def allowed_nodes(spec: common_pb2.PlacementGroupInfo, nodes: Iterable[str],
                  labels: Mapping[str, Mapping[str, str]]) -> dict[int, frozenset[str]]:
    """For each bundle with a label selector: the nodes whose labels match it."""
    names = list(nodes)
    return {i: frozenset(n for n in names if matches(labels.get(n, {}), sel))
            for i, sel in selectors(spec).items()}


def validate(spec: common_pb2.PlacementGroupInfo) -> None:
    """InvalidArgument naming the problem: no id, no bundles, an empty or bad bundle."""
    if not spec.placement_group_id:
        raise InvalidArgument("placement_group_id is required")
    if not spec.bundles:
        raise InvalidArgument("a placement group needs at least one bundle")
    if len(spec.bundles) > MAX_BUNDLES_PER_GROUP:
        raise InvalidArgument(f"a placement group has at most {MAX_BUNDLES_PER_GROUP} bundles, got {len(spec.bundles)}")
    for i, b in enumerate(spec.bundles):
        res = dict(b.resources)
        try:
            kit_resources.validate(res, source=f"bundle {i}")
        except ValueError as e:
            raise InvalidArgument(str(e)) from None
        absurd = resource_map(b.resources)  # the rules' bound (CPU=1e308 is finite, not sane)
        if absurd:
            raise InvalidArgument(f"bundle {i} resources{absurd}")
        if not any(v > 0 for v in res.values()):
            raise InvalidArgument(f"bundle {i} is empty: {res} (every bundle needs a positive resource)")


class PgManager:
    """Every group, its name index and the transitions."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.groups: dict[bytes, common_pb2.PlacementGroupInfo] = {}
        self.names: dict[tuple[str, str], bytes] = {}
        self._waiting: dict[bytes, None] = {}  # ids of the PENDING/RESCHEDULING groups
        self._removed: dict[bytes, None] = {}  # ids of the REMOVED groups, oldest first

    def _track(self, g: common_pb2.PlacementGroupInfo) -> None:
        """Keeps the waiting and removed indexes in step with the group's state."""
        pg_id = g.placement_group_id
        if g.state in WAITING:
            self._waiting[pg_id] = None
        else:
            self._waiting.pop(pg_id, None)
        if g.state == PG.REMOVED:
            self._removed[pg_id] = None

    def get(self, pg_id: bytes) -> common_pb2.PlacementGroupInfo:
        """A group; NotFound if unknown."""
        g = self.groups.get(pg_id)
        if g is None:
            raise NotFound(f"placement group {pg_id.hex()} is unknown")
        return g

    def get_named(self, name: str, namespace: str) -> common_pb2.PlacementGroupInfo:
        """The live group with that name; NotFound when there is none."""
        pg_id = self.names.get((namespace, name))
        if pg_id is None:
            raise NotFound(f"Failed to look up placement group with name '{name}' in namespace '{namespace}'")
        return self.groups[pg_id]

    def load(self, g: common_pb2.PlacementGroupInfo) -> None:
        """A record read back from storage."""
        self.groups[g.placement_group_id] = g
        if g.name and g.state != PG.REMOVED:
            self.names[(g.namespace, g.name)] = g.placement_group_id
        self._track(g)

    def create(self, spec: common_pb2.PlacementGroupInfo) -> tuple[common_pb2.PlacementGroupInfo, bool]:
        """Records a new group (PENDING); returns it and whether it is new (False: the same id was
        created before). InvalidArgument for bad bundles, AlreadyExists for a taken name."""
        have = self.groups.get(spec.placement_group_id)
        if have is not None:
            return have, False
        validate(spec)
        selectors(spec)
        key = (spec.namespace, spec.name)
        if spec.name and key in self.names:
            raise AlreadyExists(f"Placement group with name '{spec.name}' already exists in the "
                                f"namespace '{spec.namespace}'")
        g = PG()
        g.CopyFrom(spec)
        g.state, g.state_message, g.create_time = PG.PENDING, "waiting to be scheduled", self.clock()
        for i, b in enumerate(g.bundles):
            b.index, b.node_id = i, ""
        self.groups[g.placement_group_id] = g
        if g.name:
            self.names[key] = g.placement_group_id
        self._track(g)
        return g, True

    def waiting(self) -> list[common_pb2.PlacementGroupInfo]:
        """Groups to (re)schedule, oldest first."""
        return sorted((self.groups[i] for i in self._waiting), key=lambda g: g.create_time)

    def schedule(self, pg_id: bytes, available: dict[str, dict[str, float]],
                 total: dict[str, dict[str, float]],
                 labels: Mapping[str, Mapping[str, str]] | None = None) -> Prepare | Wait:
        """Chooses nodes for the group's unplaced bundles over the alive nodes' resources (and
        their labels, for bundles with a label selector)."""
        g = self.get(pg_id)
        if g.state not in WAITING:
            return Wait(pg_id, f"the group is {PG.State.Name(g.state)}", infeasible=False)
        todo = {b.index: dict(b.resources) for b in g.bundles if not b.node_id}
        fixed = {b.index: b.node_id for b in g.bundles if b.node_id}
        allowed = allowed_nodes(g, total, labels or {})
        got = place(PG.Strategy.Name(g.strategy), todo, available, total, fixed, allowed)
        if isinstance(got, NoPlacement):
            g.state_message = got.reason
            return Wait(pg_id, got.reason, got.infeasible)
        plan: dict[str, list[int]] = {}
        for index, node in sorted(got.nodes.items()):
            plan.setdefault(node, []).append(index)
        return Prepare(pg_id, plan)

    def schedule_round(self, available: dict[str, dict[str, float]],
                       total: dict[str, dict[str, float]],
                       labels: Mapping[str, Mapping[str, str]] | None = None) -> list[Prepare | Wait]:
        """Decides every waiting group, oldest first, each taking its bundles from what the
        earlier ones left (`available` is not changed: a copy is). One decision per group."""
        left = {n: dict(r) for n, r in available.items()}
        out: list[Prepare | Wait] = []
        for g in self.waiting():
            d = self.schedule(g.placement_group_id, left, total, labels)
            if isinstance(d, Prepare):
                for node, indexes in d.plan.items():
                    for i in indexes:
                        for k, v in g.bundles[i].resources.items():
                            left[node][k] = left[node].get(k, 0.0) - v
            out.append(d)
        return out

    def prepared(self, pg_id: bytes, plan: dict[str, list[int]]) -> None:
        """Every raylet of the plan reserved its bundles: PREPARED, bundles placed."""
        g = self.get(pg_id)
        for node, indexes in plan.items():
            for i in indexes:
                g.bundles[i].node_id = node
        g.state, g.state_message = PG.PREPARED, "prepared; committing"
        self._track(g)

    def failed(self, pg_id: bytes, plan: dict[str, list[int]], reason: str) -> list[Cancel]:
        """A prepare or commit failed: roll back every bundle of the attempt; the group waits."""
        g = self.get(pg_id)
        rescheduling = any(b.node_id and not any(b.index in ix for ix in plan.values()) for b in g.bundles)
        for indexes in plan.values():
            for i in indexes:
                g.bundles[i].node_id = ""
        if g.state != PG.REMOVED:
            g.state = PG.RESCHEDULING if rescheduling else PG.PENDING
            g.state_message = f"retrying: {reason}"
            self._track(g)
        return [Cancel(pg_id, node, list(ix)) for node, ix in plan.items()]

    def committed(self, pg_id: bytes) -> None:
        """Every bundle is committed: CREATED (a new placement version)."""
        g = self.get(pg_id)
        g.state, g.state_message = PG.CREATED, ""
        g.placement_version += 1
        self._track(g)

    def remove(self, pg_id: bytes, why: str = "removed") -> list[Cancel]:
        """REMOVED; Cancel on every node holding a bundle. Idempotent (again: nothing to do)."""
        g = self.get(pg_id)
        if g.state == PG.REMOVED:
            return []
        by_node: dict[str, list[int]] = {}
        for b in g.bundles:
            if b.node_id:
                by_node.setdefault(b.node_id, []).append(b.index)
        g.state, g.state_message = PG.REMOVED, why
        self._track(g)
        if g.name and self.names.get((g.namespace, g.name)) == pg_id:
            del self.names[(g.namespace, g.name)]
        return [Cancel(pg_id, node, ix) for node, ix in by_node.items()]

    def node_dead(self, node_id: str) -> list[bytes]:
        """The node's bundles are lost: their groups go RESCHEDULING. Returns the groups touched."""
        touched = []
        for g in self.groups.values():
            if g.state == PG.REMOVED:
                continue
            lost = [b for b in g.bundles if b.node_id == node_id]
            if not lost:
                continue
            for b in lost:
                b.node_id = ""
            if g.state in (PG.CREATED, PG.PREPARED, PG.RESCHEDULING):
                g.state = PG.RESCHEDULING
                g.state_message = f"rescheduling bundles {[b.index for b in lost]}: node {node_id[:8]} died"
                self._track(g)
            touched.append(g.placement_group_id)
        return touched

    def job_finished(self, job_id: bytes) -> list[bytes]:
        """The job's non-detached groups, to remove."""
        return [g.placement_group_id for g in self.groups.values()
                if g.job_id == job_id and not g.detached and g.state != PG.REMOVED]

    def evict_removed(self, keep: int) -> list[bytes]:
        """Forgets the oldest REMOVED groups beyond the newest `keep`; returns their ids (for the
        driver to delete from storage)."""
        out = []
        while len(self._removed) > keep:
            pg_id = next(iter(self._removed))
            del self._removed[pg_id]
            self.groups.pop(pg_id, None)
            out.append(pg_id)
        return out

    def counts(self) -> dict[str, int]:
        """Groups by state name."""
        out = {name: 0 for name in PG.State.keys()}
        for g in self.groups.values():
            out[PG.State.Name(g.state)] += 1
        return out
