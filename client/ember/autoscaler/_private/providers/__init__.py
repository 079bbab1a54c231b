"""Node providers: one interface (base.NodeProvider), one module per kind — `local` (raylet +
objmgr processes on this machine), `docker` (a node's two containers on the compose network),
`kubernetes` (a worker group's replicas through the API). `make_provider` picks one from the
cluster config's `provider.type`."""
from __future__ import annotations

from typing import Any

from .base import LaunchError, NodeProvider, ProviderNode

__all__ = ["LaunchError", "NodeProvider", "ProviderNode", "make_provider"]


def make_provider(provider: dict[str, Any], cluster_name: str, gcs_address: str,
                  node_configs: dict[str, dict[str, Any]]) -> NodeProvider:
    """The provider named by the config's `provider.type` (config.py has validated it), for the
    worker node types' `node_config`s (type name -> node_config)."""
    kind = provider.get("type")
    if kind == "local":
        from .local import LocalProvider
        return LocalProvider(provider, cluster_name, gcs_address)
    if kind == "docker":
        from .docker import DockerProvider
        return DockerProvider(provider, cluster_name, gcs_address)
    if kind == "kubernetes":
        from .kubernetes import KubernetesProvider
        return KubernetesProvider(provider, cluster_name, node_configs)
    raise ValueError(f"unknown provider type {kind!r}")
