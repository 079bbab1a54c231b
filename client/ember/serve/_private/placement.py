"""Where a deployment's replicas go: Ray Serve's `placement_group_bundles` /
`placement_group_strategy` (one placement group per replica) and `max_replicas_per_node`.

The checks run when a deployment is declared, with Ray's rules and messages. `choose_node` is
the pure core of `max_replicas_per_node`: the controller gives it the alive nodes, their free
resources and how many replicas of the deployment each already holds, and pins the new replica
to the node it names (or starts none while no node has room).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_REPLICAS_PER_NODE_MAX_VALUE = 100  # Ray's bound
PLACEMENT_GROUP_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
_BUNDLES_SHAPE = ('`placement_group_bundles` must be a non-empty list of resource dictionaries. '
                  'For example: `[{"CPU": 1.0}, {"GPU": 1.0}]`.')


def _subset_error(what: str, actor_value: Any, bundle_value: Any, resource: str) -> ValueError:
    return ValueError("When using `placement_group_bundles`, the replica actor will be placed in the first "
                      "bundle, so the resource requirements for the actor must be a subset of the first "
                      f"bundle. {what} for the actor is {actor_value} but the bundle only has "
                      f"{bundle_value} `{resource}` specified.")


def check_placement_group_options(bundles: Any, strategy: Any, actor_options: dict[str, Any]) -> None:
    """Ray's rules: a known strategy, only with bundles; bundles a non-empty list of
    {resource: number}; the replica actor (its num_cpus, num_gpus, resources) fits the first."""
    if strategy is not None and strategy not in PLACEMENT_GROUP_STRATEGIES:
        raise ValueError(f"Invalid placement group strategy {strategy!r}. Supported strategies are: "
                         f"{list(PLACEMENT_GROUP_STRATEGIES)}.")
    if strategy is not None and bundles is None:
        raise ValueError("If `placement_group_strategy` is provided, `placement_group_bundles` must also be "
                         "provided.")
    if bundles is None:
        return
    if not isinstance(bundles, list) or not bundles:
        raise ValueError(_BUNDLES_SHAPE)
    for b in bundles:
        if not isinstance(b, dict) or not all(isinstance(k, str) for k in b) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in b.values()):
            raise ValueError(_BUNDLES_SHAPE)
    from ember.util.placement_group import _validate_bundles

    _validate_bundles(bundles)  # what placement_group() itself refuses (negative, all-zero bundles)
    first = bundles[0]
    for opt, res in (("num_cpus", "CPU"), ("num_gpus", "GPU")):
        want = actor_options.get(opt) or 0
        if first.get(res, 0) < want:
            raise _subset_error(f"`{opt}`", want, first.get(res, 0), res)
    for res, want in (actor_options.get("resources") or {}).items():
        if first.get(res, 0) < want:
            raise _subset_error(f"`{res}` requirement", want, first.get(res, 0), res)


def check_max_replicas_per_node(value: Any) -> None:
    """None, or an int in [1, MAX_REPLICAS_PER_NODE_MAX_VALUE] (Ray's types and range)."""
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"Get invalid type '{type(value)}' for max_replicas_per_node. Expected None or an "
                        f"integer in the range of [1, {MAX_REPLICAS_PER_NODE_MAX_VALUE}].")
    if not 1 <= value <= MAX_REPLICAS_PER_NODE_MAX_VALUE:
        raise ValueError(f"Invalid max_replicas_per_node {value}. Valid values are None or an integer in the "
                         f"range of [1, {MAX_REPLICAS_PER_NODE_MAX_VALUE}].")


def replica_request(actor_options: dict[str, Any]) -> dict[str, float]:
    """The resources one replica actor asks for, by resource name (CPU, GPU, memory, custom)."""
    req = {"CPU": float(actor_options.get("num_cpus") or 0), "GPU": float(actor_options.get("num_gpus") or 0),
           "memory": float(actor_options.get("memory") or 0)}
    req.update({k: float(v) for k, v in (actor_options.get("resources") or {}).items()})
    return {k: v for k, v in req.items() if v > 0}


@dataclass
class NodeView:
    """One alive node as the placement sees it."""

    node_id: str
    available: dict[str, float] = field(default_factory=dict)


def choose_node(nodes: list[NodeView], replicas_on: dict[str, int], max_per_node: int,
                request: dict[str, float]) -> str | None:
    """The node for a new replica: one holding fewer than max_per_node replicas of the
    deployment whose free resources fit the request; the one with the fewest replicas of the
    deployment first (spread, as Ray's default), then the most free CPU. None: no node has room."""
    fits = [n for n in nodes if replicas_on.get(n.node_id, 0) < max_per_node
            and all(n.available.get(k, 0.0) >= v for k, v in request.items())]
    if not fits:
        return None
    best = min(fits, key=lambda n: (replicas_on.get(n.node_id, 0), -n.available.get("CPU", 0.0), n.node_id))
    return best.node_id
