"""Placement groups (Ray 2.60's `ray.util.placement_group`): reserve bundles of resources
together on nodes chosen by a strategy, then schedule tasks and actors into them.

    pg = placement_group([{"CPU": 1}] * 3, strategy="STRICT_SPREAD")
    ember.get(pg.ready())
    Actor.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, 0)).remote()
    remove_placement_group(pg)

The GCS places the group (two-phase commit over the raylets); this module validates the
arguments as Ray does and talks to the core through `ember._private.doors.placement_groups`.
"""
from __future__ import annotations

import math
from typing import Any

from ember._private.doors import placement_groups as _door
from ember_common import labels as kit_labels
from ember_common.validate_rules import MAX_BUNDLES_PER_GROUP

VALID_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")

__all__ = ["PlacementGroup", "PlacementGroupID", "get_current_placement_group",
           "get_placement_group", "placement_group", "placement_group_table",
           "remove_placement_group"]


class PlacementGroupID:
    """A placement group's id (18 bytes)."""

    def __init__(self, b: bytes) -> None:
        self._b = b

    def binary(self) -> bytes:
        return self._b

    def hex(self) -> str:
        return self._b.hex()

    def is_nil(self) -> bool:
        return not any(self._b)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PlacementGroupID) and other._b == self._b

    def __hash__(self) -> int:
        return hash(self._b)

    def __repr__(self) -> str:
        return f"PlacementGroupID({self.hex()})"


class PlacementGroup:
    """A handle to a placement group: picklable, so tasks and actors can receive it."""

    def __init__(self, id: PlacementGroupID, bundle_cache: list[dict[str, float]] | None = None) -> None:
        self.id = id
        self.bundle_cache = bundle_cache

    @staticmethod
    def empty() -> PlacementGroup:
        return PlacementGroup(PlacementGroupID(bytes(18)))

    def ready(self) -> Any:
        """An ObjectRef that resolves (to this group) once every bundle is reserved; use it
        with `ember.get` / `ember.wait`. It raises if the group is removed first."""
        return _door.ready_ref(self.id.binary(), self)

    def wait(self, timeout_seconds: float | int = 30) -> bool:
        """Waits up to timeout_seconds for the group to be ready; True if it is."""
        return _door.wait(self.id.binary(), float(timeout_seconds))

    @property
    def bundle_specs(self) -> list[dict[str, float]]:
        """The bundles' resources, in order."""
        self._fill_bundle_cache()
        assert self.bundle_cache is not None
        return [dict(b) for b in self.bundle_cache]

    @property
    def bundle_count(self) -> int:
        self._fill_bundle_cache()
        assert self.bundle_cache is not None
        return len(self.bundle_cache)

    def _bundle_count_or_none(self) -> int | None:
        """Bundle count when known without a GCS call (the core checks indexes with it)."""
        return None if self.bundle_cache is None else len(self.bundle_cache)

    def _fill_bundle_cache(self) -> None:
        if self.bundle_cache is None:
            entry = _door.table(self.id.binary())
            if not entry:
                raise ValueError(f"placement group {self.id.hex()} does not exist")
            self.bundle_cache = [entry["bundles"][i] for i in sorted(entry["bundles"])]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PlacementGroup) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"PlacementGroup(id={self.id.hex()})"


def _validate_bundles(bundles: Any) -> list[dict[str, float]]:
    if not isinstance(bundles, (list, tuple)) or not bundles:
        raise ValueError("The placement group `bundles` argument cannot contain an empty list; "
                         f"got {bundles!r}")
    if len(bundles) > MAX_BUNDLES_PER_GROUP:
        raise ValueError(f"A placement group has at most {MAX_BUNDLES_PER_GROUP} bundles, got {len(bundles)}")
    out = []
    for i, b in enumerate(bundles):
        if not isinstance(b, dict):
            raise ValueError(f"Bundle {i} of the placement group must be a dict of resources, got {b!r}")
        clean: dict[str, float] = {}
        for k, v in b.items():
            if not isinstance(k, str):
                raise ValueError(f"Bundle {i}: resource names must be str, got {k!r}")
            if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v) \
                    or math.isinf(v) or v < 0:
                raise ValueError(f"Bundle {i}: resource {k!r} must be a number >= 0, got {v!r}")
            if v > 0:
                clean[k] = float(v)
        if not clean:
            raise ValueError(f"Bundles cannot be an empty dictionary or resources with only 0 "
                             f"values. Bundles: {list(bundles)}")
        out.append(clean)
    return out


def placement_group(bundles: list[dict[str, float]], strategy: str = "PACK", name: str = "",
                    lifetime: str | None = None, _soft_target_node_id: str | None = None,
                    bundle_label_selector: Any = None, topology_strategy: Any = None) -> PlacementGroup:
    """Asynchronously creates a placement group (use `.ready()` or `.wait()`).

    strategy: PACK (few nodes, best effort), SPREAD (many nodes, best effort), STRICT_PACK
    (one node), STRICT_SPREAD (one node per bundle). lifetime: None (removed with the job) or
    "detached". bundle_label_selector: one label selector per bundle (Ray's syntax, as
    `label_selector`); a bundle goes only to a node whose labels match its selector.
    Ray's topology_strategy is not implemented: given, it raises ValueError."""
    if topology_strategy is not None:
        raise ValueError("placement_group(topology_strategy=...) is not implemented by Ember")
    clean = _validate_bundles(bundles)
    selectors = _bundle_label_selectors(bundle_label_selector, len(clean))
    if strategy not in VALID_STRATEGIES:
        raise ValueError(f"Invalid placement group strategy {strategy!r}. Supported strategies "
                         f"are: {list(VALID_STRATEGIES)}.")
    if lifetime not in (None, "detached"):
        raise ValueError("Placement group `lifetime` argument must be either `None` or "
                         f"'detached'. Got {lifetime!r}.")
    if not isinstance(name, str):
        raise TypeError(f"Placement group `name` must be a str, got {type(name).__name__}")
    pg_id = _door.create(clean, strategy, name, lifetime == "detached", selectors)
    return PlacementGroup(PlacementGroupID(pg_id), bundle_cache=clean)


def _bundle_label_selectors(selectors: Any, n: int) -> list[dict[str, str]] | None:
    """bundle_label_selector checked: a list of one selector per bundle (ValueError naming the
    problem); None when absent or every selector is empty."""
    if selectors is None:
        return None
    if not isinstance(selectors, list) or len(selectors) != n:
        raise ValueError(f"bundle_label_selector must be a list of {n} label selectors (one per "
                         f"bundle), got {selectors!r}")
    for i, sel in enumerate(selectors):
        kit_labels.parse_selector(sel, f"bundle_label_selector[{i}]")
    return [dict(s or {}) for s in selectors] if any(selectors) else None


def remove_placement_group(placement_group: PlacementGroup) -> None:
    """Removes the group: its bundles are freed, actors and tasks in it are killed."""
    if not isinstance(placement_group, PlacementGroup):
        raise TypeError(f"remove_placement_group takes a PlacementGroup, got {placement_group!r}")
    _door.remove(placement_group.id.binary())


def get_placement_group(placement_group_name: str, namespace: str | None = None) -> PlacementGroup:
    """The live group with this name (in the current namespace by default); ValueError if none."""
    if not placement_group_name:
        raise ValueError("Please supply a non-empty value to get_placement_group")
    entry = _door.get_named(placement_group_name, namespace)
    bundles = [entry["bundles"][i] for i in sorted(entry["bundles"])]
    return PlacementGroup(PlacementGroupID(bytes.fromhex(entry["placement_group_id"])), bundles)


def placement_group_table(placement_group: PlacementGroup | None = None) -> dict[str, Any]:
    """State of one group (Ray's dict: placement_group_id, name, bundles, bundles_to_node_id,
    strategy, state, stats, ...), or of every group keyed by hex id."""
    if placement_group is not None:
        return _door.table(placement_group.id.binary())
    return _door.table()


def get_current_placement_group() -> PlacementGroup | None:
    """The group the current task or actor runs in; None in the driver or outside a group."""
    pg_id, _ = _door.current()
    return PlacementGroup(PlacementGroupID(pg_id)) if pg_id else None
