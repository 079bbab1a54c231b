"""The cluster config (`ember autoscaler --config cluster.yaml`), Ray's cluster YAML's shape:

    cluster_name: demo
    max_workers: 4                 # worker nodes in all (the head not counted)
    upscaling_speed: 1.0
    idle_timeout_minutes: 5        # or idle_timeout_s (Ember's, in seconds)
    provider: {type: local}        # local | docker | kubernetes (providers/*.py: their keys)
    head_node_type: head
    available_node_types:
      head: {resources: {CPU: 2}, node_config: {}}
      small: {resources: {CPU: 2}, min_workers: 0, max_workers: 4, node_config: {}}

Ray's keys that Ember does not carry out (setup and start commands, file mounts, auth, docker)
are refused by name when they hold anything; an empty one is accepted (it asks for nothing).
Unknown keys are refused. `ClusterConfig.node_types()` gives the policy's worker node types
(the head's type is the head, never launched).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

from .policy import NodeType

RAY_ONLY = ("docker", "auth", "file_mounts", "cluster_synced_files", "file_mounts_sync_continuously",
            "rsync_exclude", "rsync_filter", "initialization_commands", "setup_commands",
            "head_setup_commands", "worker_setup_commands", "head_start_ray_commands",
            "worker_start_ray_commands")
TOP = ("cluster_name", "max_workers", "upscaling_speed", "idle_timeout_minutes", "idle_timeout_s",
       "provider", "available_node_types", "head_node_type", "update_interval_s", "launch_timeout_s")
TYPE_KEYS = ("resources", "min_workers", "max_workers", "node_config")
TYPE_RAY_ONLY = ("worker_setup_commands", "docker", "labels")
PROVIDERS = ("local", "docker", "kubernetes")


class ConfigError(ValueError):
    """The cluster config is malformed; the message names the key."""


@dataclass(frozen=True)
class NodeTypeConfig:
    """One `available_node_types` entry."""

    name: str
    resources: dict[str, float]
    min_workers: int = 0
    max_workers: int = 0
    node_config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterConfig:
    """The validated cluster config (units in field names)."""

    cluster_name: str
    max_workers: int
    upscaling_speed: float
    idle_timeout_s: float
    provider: dict[str, Any]
    types: dict[str, NodeTypeConfig]
    head_node_type: str
    update_interval_s: float = 1.0
    launch_timeout_s: float = 60.0

    def node_types(self) -> list[NodeType]:
        """The worker node types for the policy (the head's type left out)."""
        return [NodeType(t.name, dict(t.resources), t.min_workers, t.max_workers)
                for t in self.types.values() if t.name != self.head_node_type]


def _number(where: str, v: Any, *, integer: bool = False, low: float = 0.0) -> Any:
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok or not math.isfinite(v) or v < low:
        kind = "an integer" if integer else "a number"
        raise ConfigError(f"{where} must be {kind} >= {low:g}, got {v!r}")
    return v


def _refuse(where: str, raw: dict[str, Any], allowed: tuple[str, ...], ray_only: tuple[str, ...]) -> None:
    for k, v in raw.items():
        if k in ray_only:
            if v:
                raise ConfigError(f"{where}{k} is not supported by Ember's autoscaler (nodes start "
                                  f"from the provider's image or this machine's install)")
        elif k not in allowed:
            raise ConfigError(f"{where}{k}: unknown key (known: {', '.join(allowed)})")


def parse(raw: Any) -> ClusterConfig:
    """Validates a loaded config (a dict); ConfigError naming the first bad key."""
    if not isinstance(raw, dict):
        raise ConfigError(f"the cluster config must be a mapping, got {type(raw).__name__}")
    _refuse("", raw, TOP, RAY_ONLY)
    provider = raw.get("provider")
    if not isinstance(provider, dict) or provider.get("type") not in PROVIDERS:
        raise ConfigError(f"provider.type must be one of {', '.join(PROVIDERS)}, got "
                          f"{provider.get('type') if isinstance(provider, dict) else provider!r}")
    types_raw = raw.get("available_node_types")
    if not isinstance(types_raw, dict) or not types_raw:
        raise ConfigError("available_node_types must map node type names to their config")
    types = {}
    for name, t in types_raw.items():
        where = f"available_node_types.{name}."
        if not isinstance(t, dict):
            raise ConfigError(f"available_node_types.{name} must be a mapping")
        _refuse(where, t, TYPE_KEYS, TYPE_RAY_ONLY)
        res = t.get("resources")
        if not isinstance(res, dict):
            raise ConfigError(f"{where}resources is required (a mapping of resource name to amount)")
        resources = {str(k): float(_number(f"{where}resources.{k}", v)) for k, v in res.items()}
        lo = _number(f"{where}min_workers", t.get("min_workers", 0), integer=True)
        hi = _number(f"{where}max_workers", t.get("max_workers", lo), integer=True)
        if hi < lo:
            raise ConfigError(f"{where}max_workers ({hi}) is below min_workers ({lo})")
        node_config = t.get("node_config") or {}
        if not isinstance(node_config, dict):
            raise ConfigError(f"{where}node_config must be a mapping")
        types[str(name)] = NodeTypeConfig(str(name), resources, lo, hi, node_config)
    head = raw.get("head_node_type", "")
    if head and head not in types:
        raise ConfigError(f"head_node_type {head!r} is not in available_node_types")
    if "idle_timeout_s" in raw and "idle_timeout_minutes" in raw:
        raise ConfigError("give idle_timeout_minutes or idle_timeout_s, not both")
    idle_s = (_number("idle_timeout_s", raw["idle_timeout_s"]) if "idle_timeout_s" in raw
              else 60.0 * _number("idle_timeout_minutes", raw.get("idle_timeout_minutes", 5)))
    max_workers = _number("max_workers", raw.get("max_workers", sum(
        t.max_workers for t in types.values() if t.name != head)), integer=True)
    return ClusterConfig(
        cluster_name=str(raw.get("cluster_name", "default")), max_workers=max_workers,
        upscaling_speed=float(_number("upscaling_speed", raw.get("upscaling_speed", 1.0))),
        idle_timeout_s=float(idle_s), provider=dict(provider), types=types, head_node_type=str(head),
        update_interval_s=float(_number("update_interval_s", raw.get("update_interval_s", 1.0), low=0.05)),
        launch_timeout_s=float(_number("launch_timeout_s", raw.get("launch_timeout_s", 60.0), low=1.0)))


def load(path: str) -> ClusterConfig:
    """Reads and validates a YAML (or JSON) cluster config file."""
    if not os.path.exists(path):
        raise ConfigError(f"no cluster config at {path}")
    with open(path) as f:
        text = f.read()
    if path.endswith(".json"):
        return parse(json.loads(text))
    try:
        import yaml
    except ImportError:  # pyyaml comes with the serve extra
        raise ConfigError("reading a YAML cluster config needs pyyaml (pip install pyyaml), "
                          "or give the config as .json") from None
    return parse(yaml.safe_load(text))
