"""A trial's placement group, as Ray Tune's `PlacementGroupResourceManager` makes them.

`TrialRequest.of(pgf)` reads a trial's PlacementGroupFactory: the bundles of its group (an
empty first bundle is left out, as Ray does: the trial actor then takes no resources of its own
and runs in the first remaining bundle), the strategy, the trial actor's own resources (the
first bundle) and a key for reusing an actor (`reuse_actors`: same bundles, same strategy).

`start_trial_actor` creates the group (asynchronously) and the trial actor in bundle 0 with
`placement_group_capture_child_tasks=True`, so the tasks and actors the trainable starts go into
the trial's group (a TorchTrainer's workers take its other bundles). The actor's first calls
queue until the group is placed: a trial the cluster cannot hold yet waits for its group
instead of over-subscribing nodes. `release` kills the actor and removes the group; an idle
reused actor keeps its group until the next trial of the same key takes both over.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ember
from ember.air.placement import infeasible_reason
from ember.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ember.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from ..trainable.util import PlacementGroupFactory


@dataclass(frozen=True)
class TrialRequest:
    """What one trial reserves."""

    bundles: tuple[tuple[tuple[str, float], ...], ...]
    strategy: str
    head: tuple[tuple[str, float], ...]

    @classmethod
    def of(cls, pgf: PlacementGroupFactory) -> TrialRequest:
        """The request of a factory (its empty head bundle dropped from the group)."""
        bundles = [{k: v for k, v in b.items() if v} for b in pgf.bundles]
        head = bundles[0]
        if not head:
            bundles = bundles[1:]
        if not bundles:
            raise ValueError(f"{pgf!r} asks for no resources at all: give the first bundle at least one "
                             f"resource (e.g. {{'CPU': 1}}) or add bundles for the trial's workers")
        return cls(tuple(tuple(sorted(b.items())) for b in bundles), pgf.strategy, tuple(sorted(head.items())))

    @property
    def bundle_dicts(self) -> list[dict[str, float]]:
        """The group's bundles."""
        return [dict(b) for b in self.bundles]

    @property
    def head_dict(self) -> dict[str, float]:
        """What the trial actor itself holds (inside bundle 0)."""
        return dict(self.head)

    @property
    def need(self) -> dict[str, float]:
        """The whole group's resources."""
        out: dict[str, float] = {}
        for b in self.bundles:
            for k, v in b:
                out[k] = out.get(k, 0.0) + v
        return out

    def infeasible(self, nodes: list[dict[str, Any]]) -> str | None:
        """Why the cluster's nodes can never hold this group (None when they can)."""
        return infeasible_reason(self.bundle_dicts, self.strategy, nodes)


def start_trial_actor(actor_cls: Any, request: TrialRequest, *args: Any) -> tuple[Any, PlacementGroup]:
    """Creates the trial's group and its actor in bundle 0 (child tasks captured)."""
    pg = placement_group(request.bundle_dicts, strategy=request.strategy)
    head = request.head_dict
    opts: dict[str, Any] = {"num_cpus": head.get("CPU", 0.0), "scheduling_strategy": PlacementGroupSchedulingStrategy(
        pg, placement_group_bundle_index=0, placement_group_capture_child_tasks=True)}
    if head.get("GPU"):
        opts["num_gpus"] = head["GPU"]
    if head.get("memory"):
        opts["memory"] = head["memory"]
    custom = {k: v for k, v in head.items() if k not in ("CPU", "GPU", "memory")}
    if custom:
        opts["resources"] = custom
    try:
        return actor_cls.options(**opts).remote(*args), pg
    except BaseException:
        remove_placement_group(pg)
        raise


def release(actor: Any, pg: PlacementGroup | None) -> None:
    """Kills the trial actor and removes its group (each step best effort)."""
    try:
        ember.kill(actor)
    except Exception:  # noqa: BLE001 - already dead
        pass
    if pg is not None:
        try:
            remove_placement_group(pg)
        except Exception:  # noqa: BLE001 - already removed
            pass
