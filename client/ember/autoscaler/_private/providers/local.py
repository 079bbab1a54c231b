"""The local process provider: a node is an object manager and a raylet started on this
machine as child processes of the autoscaler (as `ember.testing.LocalCluster` starts them),
joined to the cluster's GCS. For tests and single-machine clusters with logical resources.

Provider keys: `object_store_memory` (bytes per node, default 128 MiB; a node type's
`node_config.object_store_memory` overrides it). Nodes die with the autoscaler."""
from __future__ import annotations

import threading
from typing import Any

from ember._private import node as node_mod

from .base import LaunchError, ProviderNode

DEFAULT_STORE_BYTES = 128 * 1024 * 1024
KEYS = ("type", "object_store_memory")


class LocalProvider:
    """Nodes as local processes; thread-safe."""

    def __init__(self, provider: dict[str, Any], cluster_name: str, gcs_address: str) -> None:
        unknown = sorted(set(provider) - set(KEYS))
        if unknown:
            raise ValueError(f"provider.{unknown[0]}: unknown key for the local provider (known: "
                             f"{', '.join(KEYS)})")
        self.gcs_address = gcs_address
        self.cluster_name = cluster_name
        self.store_bytes = int(provider.get("object_store_memory", DEFAULT_STORE_BYTES))
        self.session_dir = node_mod.new_session_dir()
        self._lock = threading.Lock()
        self._nodes: dict[str, tuple[str, list[node_mod.ServiceProcess]]] = {}  # id -> (type, procs)

    def create_node(self, node_type: str, resources: dict[str, float], node_config: dict[str, Any]) -> None:
        """Starts the node's object manager and raylet (returns once the raylet serves)."""
        store = int(node_config.get("object_store_memory", self.store_bytes))
        try:
            record, procs = node_mod.start_node(self.session_dir, self.gcs_address, resources=resources,
                                                object_store_memory=store, is_head=False,
                                                die_with_parent=True)
        except (RuntimeError, OSError, ValueError) as e:
            raise LaunchError(f"{type(e).__name__}: {e}") from None
        with self._lock:
            self._nodes[record.node_id] = (node_type, procs)

    def terminate_node(self, provider_id: str) -> None:
        """Stops the raylet (it unregisters) and then the object manager."""
        with self._lock:
            got = self._nodes.pop(provider_id, None)
        if got is not None:
            for p in got[1]:
                node_mod.stop_process(p.pid, popen=p.popen)

    def non_terminated_nodes(self) -> list[ProviderNode]:
        """The started nodes whose raylet still runs (one that died is forgotten and stopped)."""
        with self._lock:
            items = list(self._nodes.items())
        out = []
        for node_id, (node_type, procs) in items:
            if not procs[0].alive():
                self.terminate_node(node_id)
                continue
            out.append(ProviderNode(node_id, node_type, node_id=node_id, ip="127.0.0.1"))
        return out

    def close(self) -> None:
        """Stops every node it started."""
        with self._lock:
            ids = list(self._nodes)
        for node_id in ids:
            self.terminate_node(node_id)
        node_mod.remove_session_store(self.session_dir)
