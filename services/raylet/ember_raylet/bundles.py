"""Placement group bundles on one raylet: the two-phase reservation and the named resources.
Pure (no I/O): over the node's `NodeResources`.

Prepare takes a bundle's resources out of the node's pool (all bundles of the request or none).
Commit turns them into named resources, Ray's scheme: for a bundle {"CPU": 2} with index 1 of
group G, `CPU_group_1_G` = 2 and `CPU_group_G` += 2, plus `bundle_group_1_G` = 1000 and
`bundle_group_G` += 1000 (so zero-resource tasks can still be pinned to a bundle). A lease inside
the group asks for the named resources instead of the plain ones (`translate`), so only tasks
and actors scheduled into a bundle use it. Cancel returns everything (the driver first kills the
workers leased from the bundle). Every step is idempotent.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence, TypeVar

from ember_common.rpc import Infeasible, InvalidArgument

from .resources import Allocation, NodeResources

_G = TypeVar("_G")
BUNDLE = "bundle"
# Bundles the raylet reserves, commits or cancels between two turns of its event loop (about
# 30 ms of work): a request of many groups never holds off lease requests for long.
SLICE_BUNDLES = 1_000
BUNDLE_UNITS = 1000.0
# A task inside a bundle with no resources still asks for a sliver of the bundle's marker.
MARKER_REQUEST = 0.001


def group_suffix(pg_id: bytes) -> str:
    """The hex id that ends a group's resource names."""
    return pg_id.hex()


def named(resources: dict[str, float], pg_id: bytes, index: int) -> dict[str, float]:
    """The named resources a committed bundle adds to the node."""
    g = group_suffix(pg_id)
    out: dict[str, float] = {}
    for k, v in list(resources.items()) + [(BUNDLE, BUNDLE_UNITS)]:
        if v > 0:
            out[f"{k}_group_{index}_{g}"] = v
            out[f"{k}_group_{g}"] = out.get(f"{k}_group_{g}", 0.0) + v
    return out


def translate(request: dict[str, float], pg_id: bytes, index: int) -> dict[str, float]:
    """A lease request inside a group: each resource becomes its bundle's named one (index -1:
    any bundle of the group), plus a sliver of the bundle marker."""
    g = group_suffix(pg_id)
    tag = f"_group_{index}_{g}" if index >= 0 else f"_group_{g}"
    out = {f"{k}{tag}": v for k, v in request.items() if v > 0}
    out[f"{BUNDLE}{tag}"] = MARKER_REQUEST
    return out


def slices(groups: Sequence[_G], size: Callable[[_G], int], budget: int = SLICE_BUNDLES) -> Iterator[Sequence[_G]]:
    """groups in order, in runs of about `budget` bundles by `size` (a group is never cut: each
    is reserved all or none), so the caller can yield to its event loop between runs."""
    start, held = 0, 0
    for i, g in enumerate(groups):
        held += size(g)
        if held >= budget:
            yield groups[start:i + 1]
            start, held = i + 1, 0
    if start < len(groups):
        yield groups[start:]


@dataclass
class Reservation:
    """One bundle reserved on this node."""

    pg_id: bytes
    index: int
    resources: dict[str, float]
    alloc: Allocation
    committed: bool = False
    named: dict[str, float] = field(default_factory=dict)


class BundleTable:
    """The bundles reserved on this node, by group id then index: every step costs what the
    group it names holds, never what the node holds (a node may hold many large groups)."""

    def __init__(self, resources: NodeResources) -> None:
        self.resources = resources
        self.groups: dict[bytes, dict[int, Reservation]] = {}

    def reservations(self) -> Iterator[Reservation]:
        """Every bundle reserved here."""
        for group in self.groups.values():
            yield from group.values()

    def prepare(self, pg_id: bytes, bundles: list[tuple[int, dict[str, float]]]) -> bool:
        """Reserves every bundle not reserved yet, or none of them (False: they do not fit now).
        InvalidArgument for a bundle whose resources are already reserved differently."""
        if not pg_id:
            raise InvalidArgument("placement_group_id is required")
        group = self.groups.get(pg_id, {})
        new: list[tuple[int, dict[str, float]]] = []
        for index, res in bundles:
            have = group.get(index)
            if have is None:
                new.append((index, res))
            elif have.resources != res:
                raise InvalidArgument(f"bundle {index} of group {pg_id.hex()} is already reserved "
                                      f"here with {have.resources}, not {res}")
        taken: list[Reservation] = []
        for index, res in new:
            alloc = self.resources.allocate(res)
            if alloc is None:
                for r in taken:
                    self.resources.release(r.alloc)
                return False
            taken.append(Reservation(pg_id, index, dict(res), alloc))
        if taken:
            group = self.groups.setdefault(pg_id, {})
            for r in taken:
                group[r.index] = r
        return True

    def commit(self, pg_id: bytes, indexes: list[int]) -> None:
        """Makes prepared bundles usable (named resources). Infeasible when one is not prepared
        here (its reservation was cancelled or this raylet restarted)."""
        group = self.groups.get(pg_id, {})
        for index in indexes:
            r = group.get(index)
            if r is None:
                raise Infeasible(f"bundle {index} of group {pg_id.hex()} is not prepared on this node")
            if not r.committed:
                r.named = named(r.resources, pg_id, index)
                self.resources.add_named(r.named)
                r.committed = True

    def _selected(self, pg_id: bytes, indexes: list[int]) -> list[Reservation]:
        """The group's bundles here among `indexes` (all of them when empty)."""
        group = self.groups.get(pg_id, {})
        if not indexes:
            return list(group.values())
        return [group[i] for i in set(indexes) if i in group]

    def cancel(self, pg_id: bytes, indexes: list[int]) -> list[Reservation]:
        """Releases bundles (every bundle of the group here when indexes is empty); returns those
        released. The caller has already ended the leases that used them."""
        out = self._selected(pg_id, indexes)
        group = self.groups.get(pg_id, {})
        for r in out:
            del group[r.index]
            if r.committed:
                self.resources.remove_named(r.named)
            self.resources.release(r.alloc)
        if not group:
            self.groups.pop(pg_id, None)
        return out

    def group_resource_names(self, pg_id: bytes, indexes: list[int]) -> set[str]:
        """Names a lease uses when it runs in these bundles (all of the group's when empty)."""
        names: set[str] = set()
        for r in self._selected(pg_id, indexes):
            names.update(named(r.resources, pg_id, r.index))
        return names

    def gpu_ids(self, pg_id: bytes, index: int) -> list[int]:
        """The GPU instances a bundle holds (index -1: every bundle of the group here)."""
        out: list[int] = []
        for r in sorted(self._selected(pg_id, [] if index < 0 else [index]), key=lambda r: r.index):
            out += r.alloc.gpu_ids
        return out
