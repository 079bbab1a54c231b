"""Scheduling strategies (Ray 2.60's classes) and how a task's or actor's options become a
placement: a placement group bundle, a node (hard or soft affinity), spread, or the default.

The classes are re-exported by `ember.util.scheduling_strategies`; they live here because the
core interprets them. `resolve(options, ...)` is pure: the caller passes what it knows of the
current task (its group and whether it captures child tasks), and gets a `Placement`.

Ray's precedence: an explicit `scheduling_strategy` object wins; else the legacy
`placement_group=` option (None: no group; "default": the parent's group when it captures
child tasks); else the parent's capturing group; `scheduling_strategy="DEFAULT"` opts out of
capture, `"SPREAD"` spreads over nodes.
"""
from __future__ import annotations

from typing import Any, NamedTuple


class PlacementGroupSchedulingStrategy:
    """Run the task or actor in a placement group's bundle (index -1: any bundle)."""

    def __init__(self, placement_group: Any, placement_group_bundle_index: int = -1,
                 placement_group_capture_child_tasks: bool | None = None) -> None:
        self.placement_group = placement_group
        self.placement_group_bundle_index = placement_group_bundle_index
        self.placement_group_capture_child_tasks = placement_group_capture_child_tasks

    def __repr__(self) -> str:
        return (f"PlacementGroupSchedulingStrategy({self.placement_group!r}, "
                f"bundle_index={self.placement_group_bundle_index}, "
                f"capture_child_tasks={self.placement_group_capture_child_tasks})")


class NodeAffinitySchedulingStrategy:
    """Run on the node with this id (hex). soft=False: only there (an error when the node is
    dead or unknown); soft=True: there when it can, elsewhere otherwise."""

    def __init__(self, node_id: str, soft: bool, _spill_on_unavailable: bool = False,
                 _fail_on_unavailable: bool = False) -> None:
        if not isinstance(node_id, str) or not node_id:
            raise ValueError(f"NodeAffinitySchedulingStrategy needs a node id (hex str), got {node_id!r}")
        self.node_id = node_id
        self.soft = bool(soft)
        self._spill_on_unavailable = _spill_on_unavailable
        self._fail_on_unavailable = _fail_on_unavailable

    def __repr__(self) -> str:
        return f"NodeAffinitySchedulingStrategy(node_id={self.node_id!r}, soft={self.soft})"


class Placement(NamedTuple):
    """Where a task or actor may run. Part of a task's scheduling key."""

    pg_id: bytes = b""
    bundle_index: int = -1
    capture: bool = False
    node_id: str = ""
    soft: bool = False
    spread: bool = False


DEFAULT = Placement()


def _pg_id(pg: Any, what: str) -> tuple[bytes, int | None]:
    """The group's id and bundle count (None when unknown) of a PlacementGroup."""
    pid = getattr(pg, "id", None)
    binary = getattr(pid, "binary", None)
    if binary is None:
        raise TypeError(f"placement_group for {what} must be a PlacementGroup (from "
                        f"ember.util.placement_group), got {type(pg).__name__}")
    count = getattr(pg, "_bundle_count_or_none", lambda: None)()
    return binary(), count


def needs_context(options: dict[str, Any]) -> bool:
    """True when the placement depends on the calling task (capture of child tasks)."""
    return options.get("scheduling_strategy") is None and \
        options.get("placement_group", "default") == "default"


def resolve(options: dict[str, Any], what: str, parent_pg: bytes = b"",
            parent_capture: bool = False, request: dict[str, float] | None = None) -> Placement:
    """The placement that options ask for (see the module docstring). ValueError/TypeError
    name the problem: a bad strategy, a bundle index out of range, a resource request
    (when given) that fits no bundle it may use."""
    strategy = options.get("scheduling_strategy")
    pg: Any = options.get("placement_group", "default")
    index = options.get("placement_group_bundle_index", -1)
    capture = options.get("placement_group_capture_child_tasks")
    if isinstance(strategy, PlacementGroupSchedulingStrategy):
        pg = strategy.placement_group
        index = strategy.placement_group_bundle_index
        capture = strategy.placement_group_capture_child_tasks
    elif isinstance(strategy, NodeAffinitySchedulingStrategy):
        return Placement(node_id=strategy.node_id, soft=strategy.soft)
    elif strategy == "SPREAD":
        return Placement(spread=True)
    elif strategy == "DEFAULT":
        pg = None if pg == "default" else pg
    elif strategy is not None:
        # A wrong type is a TypeError (as Ray's), an unknown name a ValueError.
        raise (ValueError if isinstance(strategy, str) else TypeError)(
            f"scheduling_strategy={strategy!r} for {what}: must be 'DEFAULT', "
                         "'SPREAD', a PlacementGroupSchedulingStrategy or a "
                         "NodeAffinitySchedulingStrategy")
    if index is None:
        index = -1
    if not isinstance(index, int) or isinstance(index, bool):
        raise TypeError(f"placement_group_bundle_index for {what} must be an int, got {index!r}")
    if pg == "default":
        if not (parent_pg and parent_capture):
            if index != -1:
                raise ValueError(f"placement_group_bundle_index={index} for {what} is given "
                                 "without a placement group")
            return DEFAULT
        return Placement(pg_id=parent_pg, bundle_index=index,
                         capture=parent_capture if capture is None else bool(capture))
    if pg is None:
        if index != -1:
            raise ValueError(f"placement_group_bundle_index={index} for {what} is given "
                             "without a placement group")
        return DEFAULT
    pg_id, count = _pg_id(pg, what)
    if index < -1 or (count is not None and index >= count):
        raise ValueError(f"placement_group_bundle_index {index} for {what} is invalid: the "
                         f"group has {count if count is not None else 'fewer'} bundles "
                         "(use -1 for any bundle)")
    if request is not None:
        check_fits(request, getattr(pg, "bundle_cache", None), index, what)
    return Placement(pg_id=pg_id, bundle_index=index, capture=bool(capture))


def check_fits(request: dict[str, float], bundles: list[dict[str, float]] | None,
               index: int, what: str) -> None:
    """ValueError (as Ray) when the resource request fits in no bundle it may use."""
    if bundles is None:
        return
    candidates = bundles if index == -1 else bundles[index:index + 1]
    eps = 1e-9
    for b in candidates:
        if all(b.get(k, 0.0) + eps >= v for k, v in request.items() if v > 0):
            return
    where = "any bundle" if index == -1 else f"bundle {index}"
    raise ValueError(f"Cannot schedule {what} with the placement group because the resource "
                     f"request {request} cannot fit into {where} of the placement group, "
                     f"{candidates}.")
