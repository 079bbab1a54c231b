"""Deployment and autoscaling configuration (Ray Serve's names, defaults and units).

Every option is validated when the deployment is declared, so a typo or a bad value fails at the
call site with a message naming the option, not later inside a replica.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ._private.placement import check_max_replicas_per_node, check_placement_group_options

DEFAULT_MAX_ONGOING_REQUESTS = 5
DEFAULT_MAX_QUEUED_REQUESTS = -1  # unbounded, as in Ray
DEFAULT_REPLICA_NUM_CPUS = 1  # Ray's: a replica reserves one CPU unless ray_actor_options say otherwise


@dataclass(frozen=True)
class AutoscalingConfig:
    """Ray Serve's autoscaling_config: replicas follow ongoing requests / target_ongoing_requests."""

    min_replicas: int = 1
    max_replicas: int = 1
    initial_replicas: int | None = None
    target_ongoing_requests: float = 2.0
    upscale_delay_s: float = 30.0
    downscale_delay_s: float = 600.0
    downscale_to_zero_delay_s: float | None = None
    upscaling_factor: float | None = None
    downscaling_factor: float | None = None
    metrics_interval_s: float = 10.0
    look_back_period_s: float = 30.0

    def __post_init__(self) -> None:
        if not isinstance(self.min_replicas, int) or self.min_replicas < 0:
            raise ValueError(f"autoscaling_config.min_replicas must be an int >= 0, got {self.min_replicas!r}")
        if not isinstance(self.max_replicas, int) or self.max_replicas < 1:
            raise ValueError(f"autoscaling_config.max_replicas must be an int >= 1, got {self.max_replicas!r}")
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"autoscaling_config.min_replicas ({self.min_replicas}) must be <= "
                             f"max_replicas ({self.max_replicas})")
        if self.initial_replicas is not None and not (
                self.min_replicas <= self.initial_replicas <= self.max_replicas):
            raise ValueError("autoscaling_config.initial_replicas must be between min_replicas and max_replicas")
        if self.target_ongoing_requests <= 0:
            raise ValueError(f"autoscaling_config.target_ongoing_requests must be > 0, "
                             f"got {self.target_ongoing_requests!r}")
        for name in ("upscale_delay_s", "downscale_delay_s", "metrics_interval_s", "look_back_period_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"autoscaling_config.{name} must be >= 0, got {getattr(self, name)!r}")

    @classmethod
    def from_any(cls, value: Any) -> AutoscalingConfig | None:
        """Accepts None, an AutoscalingConfig or a dict of its fields (unknown keys fail)."""
        if value is None or isinstance(value, AutoscalingConfig):
            return value
        if not isinstance(value, dict):
            raise TypeError(f"autoscaling_config must be a dict or AutoscalingConfig, got {type(value).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(value) - known - {"target_num_ongoing_requests_per_replica"})
        if unknown:
            raise ValueError(f"unknown autoscaling_config option(s) {unknown}; known: {sorted(known)}")
        value = dict(value)
        if "target_num_ongoing_requests_per_replica" in value:  # the older Ray name
            value.setdefault("target_ongoing_requests", value.pop("target_num_ongoing_requests_per_replica"))
        return cls(**value)


@dataclass(frozen=True)
class DeploymentConfig:
    """What a deployment's replicas run with. `version_fields` decide whether a change restarts
    replicas (rolling update) or is applied in place."""

    num_replicas: int | None = 1
    max_ongoing_requests: int = DEFAULT_MAX_ONGOING_REQUESTS
    max_queued_requests: int = DEFAULT_MAX_QUEUED_REQUESTS
    autoscaling_config: AutoscalingConfig | None = None
    user_config: Any = None
    health_check_period_s: float = 10.0
    health_check_timeout_s: float = 30.0
    graceful_shutdown_wait_loop_s: float = 2.0
    graceful_shutdown_timeout_s: float = 20.0
    ray_actor_options: dict[str, Any] = field(default_factory=dict)
    placement_group_bundles: list[dict[str, float]] | None = None
    placement_group_strategy: str | None = None
    max_replicas_per_node: int | None = None

    def __post_init__(self) -> None:
        n: object = self.num_replicas  # as given: checked before it is trusted to be an int
        if n is not None and n != "auto" and (not isinstance(n, int) or n < 0):
            raise ValueError(f"num_replicas must be an int >= 0, got {n!r}")
        if not isinstance(self.max_ongoing_requests, int) or self.max_ongoing_requests < 1:
            raise ValueError(f"max_ongoing_requests must be an int >= 1, got {self.max_ongoing_requests!r}")
        if not isinstance(self.max_queued_requests, int) or self.max_queued_requests < -1:
            raise ValueError(f"max_queued_requests must be -1 (no limit) or an int >= 0, "
                             f"got {self.max_queued_requests!r}")
        for name in ("health_check_period_s", "health_check_timeout_s", "graceful_shutdown_wait_loop_s",
                     "graceful_shutdown_timeout_s"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or v < 0:
                raise ValueError(f"{name} must be a number >= 0, got {v!r}")
        if not isinstance(self.ray_actor_options, dict):
            raise TypeError(f"ray_actor_options must be a dict, got {type(self.ray_actor_options).__name__}")
        bad = sorted(set(self.ray_actor_options) - RAY_ACTOR_OPTIONS)
        if bad:
            raise ValueError(f"ray_actor_options {bad} are not supported; allowed: {sorted(RAY_ACTOR_OPTIONS)}")
        if self.ray_actor_options.get("num_cpus") is None:
            object.__setattr__(self, "ray_actor_options",
                               {**self.ray_actor_options, "num_cpus": DEFAULT_REPLICA_NUM_CPUS})
        check_placement_group_options(self.placement_group_bundles, self.placement_group_strategy,
                                      self.ray_actor_options)
        if self.placement_group_bundles is not None:  # a copy: the caller's list may change later
            object.__setattr__(self, "placement_group_bundles", [dict(b) for b in self.placement_group_bundles])
        check_max_replicas_per_node(self.max_replicas_per_node)
        if self.max_replicas_per_node is not None and self.placement_group_bundles is not None:
            raise ValueError("Setting max_replicas_per_node is not allowed when placement_group_bundles is provided.")

    def initial_target(self) -> int:
        a = self.autoscaling_config
        if a is not None:
            return a.initial_replicas if a.initial_replicas is not None else a.min_replicas
        return int(self.num_replicas or 0)


RAY_ACTOR_OPTIONS = {"num_cpus", "num_gpus", "memory", "resources", "runtime_env", "accelerator_type",
                     "object_store_memory"}

DEPLOYMENT_OPTIONS = {
    "name", "num_replicas", "ray_actor_options", "max_ongoing_requests", "max_queued_requests",
    "autoscaling_config", "user_config", "health_check_period_s", "health_check_timeout_s",
    "graceful_shutdown_wait_loop_s", "graceful_shutdown_timeout_s", "version", "route_prefix",
    "placement_group_bundles", "placement_group_strategy", "max_replicas_per_node", "logging_config",
    "max_concurrent_queries", "request_router_config",
}


def build_config(options: dict[str, Any], base: DeploymentConfig | None = None) -> DeploymentConfig:
    """A DeploymentConfig from @serve.deployment / .options() keyword arguments."""
    unknown = sorted(set(options) - DEPLOYMENT_OPTIONS)
    if unknown:
        raise TypeError(f"unknown deployment option(s) {unknown}; known: {sorted(DEPLOYMENT_OPTIONS)}")
    for unsupported in ("request_router_config", "logging_config"):
        if options.get(unsupported) is not None:
            raise ValueError(f"deployment option {unsupported!r} is not supported by Ember Serve yet")
    kw: dict[str, Any] = {}
    for name in ("num_replicas", "max_ongoing_requests", "max_queued_requests", "user_config",
                 "health_check_period_s", "health_check_timeout_s", "graceful_shutdown_wait_loop_s",
                 "graceful_shutdown_timeout_s", "ray_actor_options", "placement_group_bundles",
                 "placement_group_strategy", "max_replicas_per_node"):
        if name in options:
            kw[name] = options[name]
    if "max_concurrent_queries" in options and "max_ongoing_requests" not in options:
        kw["max_ongoing_requests"] = options["max_concurrent_queries"]
    if kw.get("ray_actor_options") is None and "ray_actor_options" in kw:
        kw["ray_actor_options"] = {}
    if "autoscaling_config" in options:
        kw["autoscaling_config"] = AutoscalingConfig.from_any(options["autoscaling_config"])
    if kw.get("num_replicas") == "auto":
        kw["num_replicas"] = None
        if kw.get("autoscaling_config") is None:
            kw["autoscaling_config"] = AutoscalingConfig(min_replicas=1, max_replicas=100)
    if kw.get("autoscaling_config") is not None and kw.get("num_replicas") not in (None, "auto") \
            and "num_replicas" in options:
        raise ValueError("num_replicas and autoscaling_config cannot both be set")
    if kw.get("autoscaling_config") is not None:
        kw["num_replicas"] = None
    if base is None:
        return DeploymentConfig(**kw)
    if kw.get("num_replicas") is not None:
        kw.setdefault("autoscaling_config", None)
    return dataclasses.replace(base, **kw)


# Ray's HTTPOptions fields Ember does not implement: given, they raise (never accepted and dropped).
_UNSUPPORTED_HTTP = ("root_path", "request_timeout_s", "ssl_keyfile", "ssl_certfile", "ssl_keyfile_password",
                     "ssl_ca_certs", "middlewares", "location", "num_cpus")
_PROXY_LIMITS = ("keep_alive_timeout_s", "max_body_bytes", "max_header_bytes", "max_header_fields",
                 "header_timeout_s", "max_connections")


@dataclass(frozen=True)
class HTTPOptions:
    """Ray Serve's HTTPOptions (`serve.start(http_options=...)`): where the HTTP proxy listens
    and the limits it enforces. A limit left None is the proxy's setting (its EMBER_SERVE_*
    variable, else the default below; docs/security.md):

    - keep_alive_timeout_s (Ray's; default 5 s, Ray's and uvicorn's): an idle keep-alive
      connection is closed after this long;
    - max_body_bytes (default 100 MiB): a bigger request body, declared or counted as a chunked
      body arrives, gets 413. Large enough for LLM prompts, images and audio clips; the proxy
      holds a body in memory while it forwards it, so gigabyte uploads belong in object storage;
    - max_header_bytes (default 64 KiB) and max_header_fields (default 100): a bigger request
      line plus headers, or more fields, get 431 (nginx/h11-like: no browser or SDK comes near);
    - header_timeout_s (default 30 s): a client that has not sent a request's complete headers
      this long after starting it is disconnected (slowloris);
    - max_connections (default 4096): a connection accepted while this many are open is closed
      at once; the open ones are served as before.

    Ray's root_path, request_timeout_s, ssl_* and the deprecated location/num_cpus/middlewares
    are not implemented: setting one raises ValueError naming it.
    """

    host: str | None = "127.0.0.1"
    port: int = 8000
    keep_alive_timeout_s: float | None = None
    max_body_bytes: int | None = None
    max_header_bytes: int | None = None
    max_header_fields: int | None = None
    header_timeout_s: float | None = None
    max_connections: int | None = None

    def __post_init__(self) -> None:
        for name in _PROXY_LIMITS:
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0):
                raise ValueError(f"HTTPOptions.{name} must be a positive number, got {v!r}")
        for name in ("max_body_bytes", "max_header_bytes", "max_header_fields", "max_connections"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), int):
                raise ValueError(f"HTTPOptions.{name} must be an integer, got {getattr(self, name)!r}")

    @classmethod
    def from_any(cls, value: HTTPOptions | dict[str, Any] | None) -> HTTPOptions:
        """From serve.start's http_options (an HTTPOptions, a dict of its fields, or None); an
        unknown or unimplemented field raises naming it."""
        if value is None:
            return cls()
        if isinstance(value, HTTPOptions):
            return value
        if not isinstance(value, dict):
            raise TypeError(f"http_options must be an HTTPOptions or a dict, got {type(value).__name__}")
        given = {k: v for k, v in value.items() if not (k in _UNSUPPORTED_HTTP and v in (None, "", []))}
        unsupported = sorted(set(given) & set(_UNSUPPORTED_HTTP))
        if unsupported:
            raise ValueError(f"http_options {unsupported} are not supported by Ember Serve")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(given) - known)
        if unknown:
            raise ValueError(f"unknown http_options {unknown}; known: {sorted(known)}")
        return cls(**given)

    def proxy_limits(self) -> dict[str, Any]:
        """The limits set here (not None), by ServeProxySettings field name."""
        return {n: getattr(self, n) for n in _PROXY_LIMITS if getattr(self, n) is not None}
