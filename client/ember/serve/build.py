"""`serve build`'s core: an application's config entry (Ray's ServeApplicationSchema) with every
deployment's options as its code declares them, so that editing the file and running
`serve deploy` changes them."""
from __future__ import annotations

import dataclasses
from typing import Any

from ._private.app_build import _nodes
from .config import DEFAULT_REPLICA_NUM_CPUS, DeploymentConfig
from .deployment import Application

_DEFAULTS = DeploymentConfig()


def deployment_entry(name: str, cfg: DeploymentConfig) -> dict[str, Any]:
    """One deployments[] entry: the name and the options that differ from Ray's defaults, plus
    num_replicas and max_ongoing_requests always (the knobs edited most)."""
    out: dict[str, Any] = {"name": name}
    if cfg.autoscaling_config is not None:
        out["autoscaling_config"] = dataclasses.asdict(cfg.autoscaling_config)
    else:
        out["num_replicas"] = cfg.num_replicas
    out["max_ongoing_requests"] = cfg.max_ongoing_requests
    for f in ("max_queued_requests", "user_config", "health_check_period_s", "health_check_timeout_s",
              "graceful_shutdown_wait_loop_s", "graceful_shutdown_timeout_s"):
        if getattr(cfg, f) != getattr(_DEFAULTS, f):
            out[f] = getattr(cfg, f)
    actor_options = {k: v for k, v in cfg.ray_actor_options.items()
                     if not (k == "num_cpus" and v == DEFAULT_REPLICA_NUM_CPUS)}  # the default goes without saying
    if actor_options:
        out["ray_actor_options"] = actor_options
    for f in ("placement_group_bundles", "placement_group_strategy", "max_replicas_per_node"):
        if getattr(cfg, f) is not None:
            out[f] = getattr(cfg, f)
    return out


def app_config(target: Any, import_path: str, name: str, route_prefix: str) -> dict[str, Any]:
    """The applications[] entry of a bound application found at import_path."""
    if not isinstance(target, Application):
        raise TypeError(f"expected {import_path!r} to be an Application (MyDeployment.bind()), "
                        f"got {type(target).__name__}")
    seen: list[str] = []
    deps = []
    for node in _nodes(target):
        d = node.deployment
        if d.name in seen:
            continue
        seen.append(d.name)
        deps.append(deployment_entry(d.name, d.config))
    return {"name": name, "route_prefix": route_prefix, "import_path": import_path, "runtime_env": {},
            "deployments": deps}
