"""Serve's declarative config, in Ray Serve's schema (`ray.serve.schema`): what `serve deploy`,
`serve run config.yaml` and the dashboard's `PUT /api/serve/applications/` take.

    ServeDeploySchema          proxy_location, http_options, applications[]
      HTTPOptionsSchema        host, port (root_path, request_timeout_s, keep_alive_timeout_s: defaults only)
      ServeApplicationSchema   name, route_prefix, import_path, runtime_env, args, deployments[]
        DeploymentSchema       name + per-deployment overrides (num_replicas, user_config, ...)

Plain dataclasses: `model_validate(dict)` checks every field and `model_dump(exclude_unset=...)`
gives the dict back, as Ray's pydantic models do. A field Ray has that Ember does not implement
is refused with a `SchemaError` naming it (never accepted and dropped); so is an unknown field
(Ray's pydantic models ignore those; Ember refuses them so that a typo cannot pass unnoticed).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .config import build_config

# Ember runs one HTTP proxy per cluster: EveryNode (Ray's default, which `serve build` writes) and
# HeadOnly both get it; Disabled runs none.
PROXY_LOCATIONS = ("EveryNode", "HeadOnly", "Disabled")
DEFAULT_HTTP_HOST = "127.0.0.1"  # Ray's is 0.0.0.0; Ember publishes on loopback unless told otherwise
DEFAULT_HTTP_PORT = 8000
DEFAULT_KEEP_ALIVE_TIMEOUT_S = 90


class SchemaError(ValueError):
    """A Serve config that does not fit the schema; the message names the field."""


def _unset_like(v: Any) -> bool:
    return v is None or v == {} or v == [] or v is False


def _check_keys(data: Any, where: str, known: tuple[str, ...], unimplemented: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise SchemaError(f"{where} must be a mapping, got {type(data).__name__}")
    for k, v in data.items():
        if k in unimplemented:
            if not _unset_like(v):
                raise SchemaError(f"{where}.{k}: Ray Serve's field {k!r} is not implemented by Ember; "
                                  "remove it from the config")
        elif k not in known:
            raise SchemaError(f"{where}: unknown field {k!r}; the fields are {sorted(known)}")
    return {k: v for k, v in data.items() if k not in unimplemented}


def _typed(where: str, name: str, v: Any, types: type | tuple[type, ...], *, none_ok: bool = False) -> Any:
    if v is None and none_ok:
        return v
    if isinstance(v, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise SchemaError(f"{where}.{name} must be {_tname(types)}, got {v!r}")
    if not isinstance(v, types):
        raise SchemaError(f"{where}.{name} must be {_tname(types)}, got {type(v).__name__} {v!r}")
    return v


def _tname(types: type | tuple[type, ...]) -> str:
    ts = types if isinstance(types, tuple) else (types,)
    return " or ".join(t.__name__ for t in ts)


class _Schema:
    """model_validate / model_dump shared by the schema classes; `_set` is the fields given."""

    _set: frozenset[str]

    def model_dump(self, exclude_unset: bool = False) -> dict[str, Any]:
        """The config as a dict (nested schemas as dicts); exclude_unset: only the fields given."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if f.name.startswith("_") or (exclude_unset and f.name not in self._set):
                continue
            out[f.name] = _dump(getattr(self, f.name), exclude_unset)
        return out


def _dump(v: Any, exclude_unset: bool) -> Any:
    if isinstance(v, _Schema):
        return v.model_dump(exclude_unset)
    if isinstance(v, list):
        return [_dump(x, exclude_unset) for x in v]
    return v


@dataclass
class HTTPOptionsSchema(_Schema):
    """Where the HTTP proxy listens (Ray's http_options)."""

    host: str = DEFAULT_HTTP_HOST
    port: int = DEFAULT_HTTP_PORT
    root_path: str = ""
    request_timeout_s: float | None = None
    keep_alive_timeout_s: int = DEFAULT_KEEP_ALIVE_TIMEOUT_S
    _set: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    @classmethod
    def model_validate(cls, data: Any, where: str = "http_options") -> HTTPOptionsSchema:
        """Checks a dict of http_options."""
        d = _check_keys(data, where, ("host", "port", "root_path", "request_timeout_s", "keep_alive_timeout_s"),
                        ("ssl_keyfile", "ssl_certfile", "ssl_keyfile_password", "ssl_ca_certs"))
        _typed(where, "host", d.get("host", ""), str)
        port = _typed(where, "port", d.get("port", 0), int)
        if not 0 <= port <= 65535:
            raise SchemaError(f"{where}.port must be between 0 and 65535, got {port}")
        # The proxy takes host and port; the other options are refused unless at Ray's default.
        if d.get("root_path", ""):
            raise SchemaError(f"{where}.root_path: not implemented by Ember's HTTP proxy; remove it")
        if d.get("request_timeout_s") is not None:
            raise SchemaError(f"{where}.request_timeout_s: not implemented by Ember's HTTP proxy; remove it")
        if d.get("keep_alive_timeout_s", DEFAULT_KEEP_ALIVE_TIMEOUT_S) != DEFAULT_KEEP_ALIVE_TIMEOUT_S:
            raise SchemaError(f"{where}.keep_alive_timeout_s: only Ray's default "
                              f"({DEFAULT_KEEP_ALIVE_TIMEOUT_S}) is implemented by Ember's HTTP proxy")
        return cls(**d, _set=frozenset(d))


DEPLOYMENT_FIELDS = ("name", "num_replicas", "max_ongoing_requests", "max_queued_requests", "user_config",
                     "autoscaling_config", "graceful_shutdown_wait_loop_s", "graceful_shutdown_timeout_s",
                     "health_check_period_s", "health_check_timeout_s", "ray_actor_options",
                     "placement_group_bundles", "placement_group_strategy", "max_replicas_per_node")
DEPLOYMENT_UNIMPLEMENTED = ("backpressure_config", "placement_group_bundle_label_selector", "logging_config",
                            "request_router_config", "gang_scheduling_config", "deployment_actors",
                            "rolling_update_percentage", "max_surge_percent")


@dataclass
class DeploymentSchema(_Schema):
    """One deployment's overrides of what its code declares (only the fields given apply)."""

    name: str
    num_replicas: int | str | None = None
    max_ongoing_requests: int | None = None
    max_queued_requests: int | None = None
    user_config: Any = None
    autoscaling_config: dict[str, Any] | None = None
    graceful_shutdown_wait_loop_s: float | None = None
    graceful_shutdown_timeout_s: float | None = None
    health_check_period_s: float | None = None
    health_check_timeout_s: float | None = None
    ray_actor_options: dict[str, Any] | None = None
    placement_group_bundles: list[dict[str, float]] | None = None
    placement_group_strategy: str | None = None
    max_replicas_per_node: int | None = None
    _set: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    @classmethod
    def model_validate(cls, data: Any, where: str = "deployment") -> DeploymentSchema:
        """Checks one entry of an application's deployments[]."""
        d = _check_keys(data, where, DEPLOYMENT_FIELDS, DEPLOYMENT_UNIMPLEMENTED)
        if "name" not in d:
            raise SchemaError(f"{where}.name is required")
        _typed(where, "name", d["name"], str)
        probe = {k: v for k, v in d.items() if k != "name"}
        if "placement_group_bundles" in probe and "ray_actor_options" not in probe:
            # the replica's own ray_actor_options are in its code: whether they fit the first
            # bundle is checked when the overrides are applied to it
            probe["ray_actor_options"] = {"num_cpus": 0}
        try:
            build_config(probe)
        except (TypeError, ValueError) as e:
            raise SchemaError(f"{where} ({d['name']}): {e}") from e
        return cls(**d, _set=frozenset(d))

    def options(self) -> dict[str, Any]:
        """The overrides as `Deployment.options(...)` keyword arguments."""
        return {k: getattr(self, k) for k in self._set if k != "name"}


APP_UNIMPLEMENTED = ("host", "port", "autoscaling_policy", "logging_config", "external_scaler_enabled")


@dataclass
class ServeApplicationSchema(_Schema):
    """One application: the import path of its bound app (or app builder) and its overrides."""

    import_path: str
    name: str = "default"
    route_prefix: str | None = "/"
    runtime_env: dict[str, Any] = field(default_factory=dict)
    deployments: list[DeploymentSchema] = field(default_factory=list)
    args: dict[str, Any] = field(default_factory=dict)
    _set: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    @classmethod
    def model_validate(cls, data: Any, where: str = "application") -> ServeApplicationSchema:
        """Checks one entry of applications[]."""
        d = _check_keys(data, where, ("name", "route_prefix", "import_path", "runtime_env", "deployments", "args"),
                        APP_UNIMPLEMENTED)
        if "import_path" not in d:
            raise SchemaError(f"{where}.import_path is required")
        check_import_path(_typed(where, "import_path", d["import_path"], str), where)
        _typed(where, "name", d.get("name", "x"), str)
        rp = _typed(where, "route_prefix", d.get("route_prefix"), str, none_ok=True)
        if rp is not None and (not rp.startswith("/") or "{" in rp or "}" in rp):
            raise SchemaError(f"{where}.route_prefix must start with '/' and hold no '{{' or '}}', got {rp!r}")
        if rp is not None and len(rp) > 1 and rp.endswith("/"):
            raise SchemaError(f"{where}.route_prefix must not end with '/', got {rp!r}")
        _typed(where, "runtime_env", d.get("runtime_env", {}), dict)
        _typed(where, "args", d.get("args", {}), dict)
        deps = _typed(where, "deployments", d.get("deployments", []), list)
        d["deployments"] = [DeploymentSchema.model_validate(x, f"{where}.deployments[{i}]")
                            for i, x in enumerate(deps)]
        names = [x.name for x in d["deployments"]]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise SchemaError(f"{where}.deployments: deployment name(s) {dup} given more than once")
        return cls(**d, _set=frozenset(d))


def check_import_path(path: str, where: str = "import_path") -> None:
    """`module.sub:attr` or `module.sub.attr` (Ray's two forms)."""
    if path.count(":") > 1:
        raise SchemaError(f"{where}.import_path {path!r}: an import path may have at most one colon")
    mod, sep, attr = path.partition(":") if ":" in path else path.rpartition(".")
    if not mod or not attr:
        raise SchemaError(f"{where}.import_path {path!r} must be of the form 'module.path:attribute' "
                          "or 'module.path.attribute'")


DEPLOY_UNIMPLEMENTED = ("controller_options", "logging_config", "tracing_config", "target_capacity")


@dataclass
class ServeDeploySchema(_Schema):
    """The whole config: where proxies run, their HTTP options, and the applications."""

    applications: list[ServeApplicationSchema] = field(default_factory=list)
    proxy_location: str = "EveryNode"
    http_options: HTTPOptionsSchema = field(default_factory=HTTPOptionsSchema)
    _set: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    @classmethod
    def model_validate(cls, data: Any, where: str = "config") -> ServeDeploySchema:
        """Checks a whole config (the parsed YAML of `serve deploy`, the body of the REST PUT)."""
        if isinstance(data, dict) and "grpc_options" in data:
            g = data["grpc_options"] or {}
            if not isinstance(g, dict) or g.get("grpc_servicer_functions"):
                raise SchemaError(f"{where}.grpc_options: Ember runs no gRPC proxy; grpc_servicer_functions "
                                  "is not implemented, remove grpc_options")
            data = {k: v for k, v in data.items() if k != "grpc_options"}  # no servicers: no gRPC proxy, as Ray
        d = _check_keys(data, where, ("applications", "proxy_location", "http_options"), DEPLOY_UNIMPLEMENTED)
        loc = d.get("proxy_location", "EveryNode")
        if loc not in PROXY_LOCATIONS:
            raise SchemaError(f"{where}.proxy_location must be one of {list(PROXY_LOCATIONS)}, got {loc!r}")
        if "http_options" in d:
            d["http_options"] = HTTPOptionsSchema.model_validate(d["http_options"] or {}, f"{where}.http_options")
        apps = _typed(where, "applications", d.get("applications", []), list)
        d["applications"] = [ServeApplicationSchema.model_validate(a, f"{where}.applications[{i}]")
                             for i, a in enumerate(apps)]
        names = [a.name for a in d["applications"]]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise SchemaError(f"{where}.applications: application name(s) {dup} given more than once")
        prefixes = [a.route_prefix for a in d["applications"] if a.route_prefix is not None]
        dup = sorted({p for p in prefixes if prefixes.count(p) > 1})
        if dup:
            raise SchemaError(f"{where}.applications: route_prefix(es) {dup} used by more than one application")
        return cls(**d, _set=frozenset(d))


__all__ = ["DeploymentSchema", "HTTPOptionsSchema", "SchemaError", "ServeApplicationSchema", "ServeDeploySchema"]
