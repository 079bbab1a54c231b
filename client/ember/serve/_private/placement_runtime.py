"""The cluster side of replica placement, for the controller: a replica's own placement group
(created, detached and named as the replica actor, like Ray's; removed when the replica stops)
and the alive nodes with their free resources (for `max_replicas_per_node`)."""
from __future__ import annotations

import logging

from ember.serve.config import DeploymentConfig
from ember.util.placement_group import PlacementGroup, get_placement_group, placement_group, remove_placement_group

from .placement import NodeView

log = logging.getLogger(__name__)


def replica_placement_group(cfg: DeploymentConfig, replica_name: str) -> PlacementGroup:
    """A new placement group for one replica: its bundles, its strategy (PACK unless given)."""
    assert cfg.placement_group_bundles is not None
    return placement_group(cfg.placement_group_bundles, strategy=cfg.placement_group_strategy or "PACK",
                           name=replica_name, lifetime="detached")


def find_replica_group(replica_name: str) -> PlacementGroup | None:
    """The placement group of a replica started by an earlier controller, if it still exists."""
    try:
        return get_placement_group(replica_name)
    except ValueError:
        return None


def remove_replica_group(pg: PlacementGroup, replica_name: str) -> None:
    """Removes a stopped replica's group (its bundles return to the nodes)."""
    try:
        remove_placement_group(pg)
    except Exception as e:
        log.warning("removing the placement group of %s failed: %s", replica_name, e)


def alive_nodes() -> list[NodeView]:
    """The alive nodes and their free resources, as the GCS last heard them (the state API)."""
    from ember.util.state import list_nodes

    rows = list_nodes(filters=[("state", "=", "ALIVE")], detail=True, limit=1_000_000)
    return [NodeView(n.node_id, {k: float(v) for k, v in (n.resources_available or {}).items()}) for n in rows]

