"""The node provider interface the autoscaler's loop drives (as Ray's NodeProvider, smaller):
create a node of a type, terminate one, list those not terminated. Calls block (a launch may
take seconds); the loop makes them from its launcher threads, so implementations are
thread-safe."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class LaunchError(RuntimeError):
    """A node could not be created (the message says why; shown in `ember status`)."""


@dataclass(frozen=True)
class ProviderNode:
    """A node as its provider knows it. `node_id` is the Ember node id when the provider knows
    it (the local provider does), else the node is matched to the GCS's by `ip`; a node that
    matches none is still launching."""

    provider_id: str
    node_type: str
    node_id: str = ""
    ip: str = ""


class NodeProvider(Protocol):
    """What the autoscaler needs of a provider."""

    def create_node(self, node_type: str, resources: dict[str, float],
                    node_config: dict[str, Any]) -> None:
        """Starts one node of the type; LaunchError when it cannot."""

    def terminate_node(self, provider_id: str) -> None:
        """Stops a node (its raylet first, so it leaves the cluster cleanly)."""

    def non_terminated_nodes(self) -> list[ProviderNode]:
        """The nodes this provider started that are not terminated (launching ones included)."""

    def close(self) -> None:
        """Releases the provider (the local one stops its nodes: they are its children)."""
