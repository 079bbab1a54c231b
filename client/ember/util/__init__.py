"""ember.util: ActorPool, placement groups and other helpers on top of the core API (as
`ray.util`). Submodules: multiprocessing (Pool), joblib (the "ray" backend), metrics
(Counter/Gauge/Histogram), accelerators (accelerator type names), queue, state,
scheduling_strategies, placement_group."""
from __future__ import annotations

from typing import Any

from ember.actor import list_named_actors

from .actor_pool import ActorPool
from .check_serialize import inspect_serializability
from .node_ip import get_node_ip_address
from .placement_group import (
    get_current_placement_group,
    get_placement_group,
    placement_group,
    placement_group_table,
    remove_placement_group,
)

__all__ = ["ActorPool", "get_current_placement_group", "get_node_ip_address", "get_placement_group",
           "inspect_serializability", "list_named_actors", "placement_group",
           "placement_group_table", "remove_placement_group"]

_LAZY_SUBMODULES = ("accelerators", "joblib", "metrics", "multiprocessing")


def __getattr__(name: str) -> Any:
    """`ember.util.metrics` and the other submodules above load on first use."""
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f"ember.util.{name}")
    raise AttributeError(f"module 'ember.util' has no attribute {name!r}")
