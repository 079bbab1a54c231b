"""One settings object per service: a frozen dataclass whose fields (units in their names) are
the service's command line, spelled once.

`from_argv` parses a command line (a missing required flag fails naming it, exit code 2 as
argparse does; with `env_defaults` a field's variable, when set, is its default), `to_argv`
writes one (what `ember._private.node` and `docker/entrypoint.py` launch), `from_env` reads each
field from its EMBER_* variable (the container's way; a missing required variable raises
`SettingsError` naming it; unknown EMBER_* variables warn). A field's variable, default and help
come from the settings registry (ember_common.envvars) unless the field gives its own.
Flags are `--` + the field name with dashes; booleans are switches; dicts are JSON.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from . import envvars
from . import labels as kit_labels
from . import resources as kit_resources
from .envvars import SettingsError

__all__ = ["SettingsError", "setting", "ServiceSettings", "GcsSettings", "RayletSettings", "ObjmgrSettings",
           "ServeProxySettings", "DashboardSettings", "SERVICES", "known_env_vars"]

S = TypeVar("S", bound="ServiceSettings")


def setting(default: Any = dataclasses.MISSING, *, env: str | None = None, help: str = "") -> Any:
    """A settings field: its EMBER_* variable, its default (not given: the registry's default of
    its variable; none: required) and its help (not given: the registry's doc)."""
    var = envvars.VARS[env] if env else None
    if default is dataclasses.MISSING and var is not None and var.default is not envvars.REQUIRED:
        default = var.default
    meta = {"env": env, "help": help or (var.doc if var else "")}
    if isinstance(default, dict):
        return dataclasses.field(default_factory=lambda: dict(default), metadata=meta)
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _parse(kind: str, raw: str, name: str, field_name: str = "") -> Any:
    try:
        if kind in ("int", "int | None"):
            value = int(raw)
            if value < 0 and field_name.endswith(("port", "_bytes", "workers")):
                raise SettingsError(f"{name}={raw!r} is negative")
            return value
        if kind == "float":
            return float(raw)
        if kind == "bool":
            return envvars.parse_flag(raw)
        if kind == "dict[str, float]":
            return kit_resources.parse_json(raw, source=name)
    except SettingsError:
        raise
    except kit_resources.InvalidResourceError as e:
        raise SettingsError(str(e)) from None
    except ValueError as e:
        raise SettingsError(f"{name}={raw!r} is not a valid {kind}: {e}") from None
    return raw


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServiceSettings:
    """Flags every service has (`service.setup` reads them)."""

    PROG: ClassVar[str] = "ember-service"
    port_file: str | None = setting(None, help="write the bound port here once serving")
    die_with_parent: bool = setting(False, help="exit when the parent process exits (embedded cluster)")
    log_level: str = setting(env="EMBER_LOG_LEVEL")
    metrics_export_port: int = setting(0, help="serve Prometheus metrics on this port (0 = off)")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if (f.name.endswith(("port", "_bytes", "workers")) and isinstance(value, int)
                    and not isinstance(value, bool) and value < 0):
                raise SettingsError(f"{self.flag(f.name)} must be >= 0, got {value}")
            if f.name.endswith("port") and isinstance(value, int) and value > 65535:
                raise SettingsError(f"{self.flag(f.name)} must be at most 65535, got {value}")

    @staticmethod
    def flag(name: str) -> str:
        """The command-line flag of a field."""
        return "--" + name.replace("_", "-")

    @classmethod
    def parser(cls, env_defaults: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
        """The argparse parser of this service's flags; with `env_defaults`, a field whose
        variable is set (not empty) there takes that value as its default."""
        p = argparse.ArgumentParser(prog=cls.PROG, description=(cls.__doc__ or "").splitlines()[0])
        for f in dataclasses.fields(cls):
            kw: dict[str, Any] = {"dest": f.name, "help": f.metadata.get("help", "")}
            name = f.metadata.get("env")
            from_env = env_defaults.get(name, "") if env_defaults is not None and name else ""
            if f.type == "bool":
                default = _parse("bool", from_env, name or "", f.name) if from_env else False
                p.add_argument(cls.flag(f.name), action="store_true", default=default, **kw)
                continue
            if from_env:
                kw["default"] = from_env
            elif _required(f):
                kw["required"] = True
            else:
                kw["default"] = _default(f)
            p.add_argument(cls.flag(f.name), type=str, **kw)
        return p

    @classmethod
    def from_argv(cls: type[S], argv: Sequence[str] | None = None,
                  env_defaults: Mapping[str, str] | None = None) -> S:
        """Parses a command line: argparse's --help and errors (a missing or unknown flag exits
        with code 2 naming it); SettingsError naming the flag for a malformed value. With
        `env_defaults` (the driver services pass the environment) a flag not given takes its
        variable's value when that is set."""
        ns = cls.parser(env_defaults).parse_args(argv)
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            raw = getattr(ns, f.name)
            values[f.name] = (_parse(str(f.type), raw, cls.flag(f.name), f.name)
                              if isinstance(raw, str) and f.type != "str" else raw)
        return cls(**values)

    @classmethod
    def from_argv_or_exit(cls: type[S], argv: Sequence[str] | None = None,
                          env_defaults: Mapping[str, str] | None = None) -> S:
        """`from_argv` for a service's main(): a malformed value is one `error:` line on stderr
        and exit code 2."""
        try:
            return cls.from_argv(argv, env_defaults)
        except SettingsError as e:
            print(f"error: {e}", file=sys.stderr)
            raise SystemExit(2) from None

    @classmethod
    def from_env(cls: type[S], environ: Mapping[str, str] | None = None,
                 extra_known: Sequence[str] = (), **overrides: Any) -> S:
        """Reads each field from its EMBER_* variable; `overrides` win. SettingsError naming the
        variable when a required one is missing or a value is malformed; unknown EMBER_*
        variables (not in the registry or `extra_known`) warn."""
        env = envvars.environ() if environ is None else environ
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            name = f.metadata.get("env")
            if f.name in overrides:
                values[f.name] = overrides[f.name]
            elif name and env.get(name, "") != "":
                values[f.name] = _parse(str(f.type), env[name], name, f.name)
            elif _required(f):
                raise SettingsError(f"missing required setting {name or cls.flag(f.name)} "
                                    f"({cls.PROG} {cls.flag(f.name)})")
        unknown = set(overrides) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise TypeError(f"{cls.__name__} has no settings {sorted(unknown)}")
        envvars.warn_unknown(env, extra_known)
        return cls(**values)

    def to_argv(self) -> list[str]:
        """The command line that `from_argv` turns back into these settings (defaults left out)."""
        out: list[str] = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None or (not _required(f) and value == _default(f)):
                continue
            if f.type == "bool":
                out.append(self.flag(f.name))
            elif isinstance(value, dict):
                out += [self.flag(f.name), json.dumps(value, sort_keys=True)]
            else:
                out += [self.flag(f.name), str(value)]
        return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class GcsSettings(ServiceSettings):
    """Ember GCS service."""

    PROG: ClassVar[str] = "ember-gcs"
    host: str = setting("", help="interface to bind ('': the node's IP; 0.0.0.0: every interface)")
    port: int = setting(env="EMBER_GCS_PORT")
    storage: str = setting(env="EMBER_GCS_STORAGE")
    cluster_name: str = setting(env="EMBER_CLUSTER_NAME")
    session_dir: str = setting("", env="EMBER_SESSION_DIR")
    ha: bool = setting(env="EMBER_GCS_HA")
    leader_lease_s: int = setting(env="EMBER_GCS_LEADER_LEASE_S")
    advertise_address: str = setting(env="EMBER_GCS_ADVERTISE_ADDRESS")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RayletSettings(ServiceSettings):
    """Ember raylet (one per node)."""

    PROG: ClassVar[str] = "ember-raylet"
    gcs_address: str = setting(env="EMBER_GCS_ADDRESS")
    objmgr_address: str = setting(env="EMBER_OBJMGR_ADDRESS")
    node_id: str = setting(env="EMBER_NODE_ID")
    store_dir: str = setting(env="EMBER_STORE_DIR")
    session_dir: str = setting(env="EMBER_SESSION_DIR")
    resources: dict[str, float] = setting(env="EMBER_RESOURCES")
    object_store_memory_bytes: int = setting(env="EMBER_OBJECT_STORE_BYTES")
    node_ip: str = setting(env="EMBER_NODE_IP")
    host: str = setting("", help="interface to bind ('': the node's IP; 0.0.0.0: every interface)")
    port: int = setting(env="EMBER_RAYLET_PORT")
    head: bool = setting(env="EMBER_HEAD")
    num_prestart_workers: int | None = setting(None, help="workers to keep started (default: CPUs)")
    runtime_env_dir: str = setting(env="EMBER_RUNTIME_ENV_DIR")
    labels: str = setting("", help="the node's labels as a JSON object of str to str (ember start "
                                   "--labels); ray.io/node-id is set by the raylet")

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "resources",
                           kit_resources.validate(dict(self.resources), source="--resources"))
        if self.labels:
            try:
                kit_labels.parse_cli(self.labels)
            except ValueError as e:
                raise SettingsError(str(e)) from None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ObjmgrSettings(ServiceSettings):
    """Ember object manager (one per node)."""

    PROG: ClassVar[str] = "ember-objmgr"
    store_dir: str = setting(env="EMBER_STORE_DIR")
    capacity_bytes: int = setting(env="EMBER_OBJECT_STORE_BYTES")
    spill_dir: str | None = setting(env="EMBER_SPILL_DIR")
    fallback_dir: str = setting(env="EMBER_OBJECT_STORE_FALLBACK_DIR")
    gcs_address: str = setting("", env="EMBER_GCS_ADDRESS", help="GCS to follow for worker deaths")
    node_id: str = setting("", env="EMBER_NODE_ID")
    host: str = setting("", help="interface to bind ('': the node's IP; 0.0.0.0: every interface)")
    port: int = setting(env="EMBER_OBJMGR_PORT")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServeProxySettings(ServiceSettings):
    """Ember Serve HTTP proxy."""

    PROG: ClassVar[str] = "ember-serve-proxy"
    gcs_address: str = setting("", env="EMBER_ADDRESS", help="HOST:PORT of the GCS (default: $EMBER_ADDRESS)")
    host: str = setting("0.0.0.0", help="interface to bind")
    port: int = setting(8000, help="HTTP port to bind (0 = any)")
    connect_timeout_s: float = setting(120.0, help="how long to keep trying to reach the cluster at start-up")
    # The HTTP limits (ember_serve_proxy.limits). The body limit is generous on purpose (LLM prompts,
    # image and audio uploads pass; a client cannot make the proxy hold gigabytes), the rest are
    # nginx/uvicorn-like defaults no ordinary client comes near.
    max_body_bytes: int = setting(env="EMBER_SERVE_MAX_BODY_BYTES")
    max_header_bytes: int = setting(env="EMBER_SERVE_MAX_HEADER_BYTES")
    max_header_fields: int = setting(env="EMBER_SERVE_MAX_HEADER_FIELDS")
    header_timeout_s: float = setting(env="EMBER_SERVE_HEADER_TIMEOUT_S")
    keep_alive_timeout_s: float = setting(env="EMBER_SERVE_KEEP_ALIVE_TIMEOUT_S")
    max_connections: int = setting(env="EMBER_SERVE_MAX_CONNECTIONS")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DashboardSettings(ServiceSettings):
    """Ember dashboard (web UI + REST)."""

    PROG: ClassVar[str] = "ember-dashboard"
    gcs_address: str = setting("", env="EMBER_ADDRESS", help="HOST:PORT of the GCS (default: $EMBER_ADDRESS)")
    host: str = setting("127.0.0.1", help="interface to listen on (default loopback)")
    port: int = setting(8265, help="HTTP port to bind (0 = any)")
    log_dir: str | None = setting(None, help="the session's log directory (names the session; the logs "
                                            "page reads every node's files through its raylet)")
    trace_dir: str | None = setting(env="EMBER_TRACE_DIR")
    connect_timeout_s: float = setting(120.0, help="how long to keep trying to reach the cluster at start-up")


SERVICES: tuple[type[ServiceSettings], ...] = (GcsSettings, RayletSettings, ObjmgrSettings, ServeProxySettings,
                                               DashboardSettings)


def known_env_vars() -> set[str]:
    """Every registered EMBER_* variable (ember_common.envvars)."""
    return set(envvars.known())
