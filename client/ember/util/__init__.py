"""ember.util: ActorPool, placement groups and other helpers on top of the core API."""
from __future__ import annotations

from ember.actor import list_named_actors

from .actor_pool import ActorPool
from .placement_group import (
    get_current_placement_group,
    get_placement_group,
    placement_group,
    placement_group_table,
    remove_placement_group,
)

__all__ = ["ActorPool", "get_current_placement_group", "get_placement_group", "list_named_actors",
           "placement_group", "placement_group_table", "remove_placement_group"]
