"""One settings object per service: a frozen dataclass whose fields (units in their names) are
the service's command line, spelled once.

`from_argv` parses a command line (a missing required flag fails naming it, exit code 2 as
argparse does), `to_argv` writes one (what `ember._private.node` and `docker/entrypoint.py`
launch), `from_env` reads each field from its EMBER_* variable (the container's way; a
missing required variable raises `SettingsError` naming it; unknown EMBER_* variables warn).
Flags are `--` + the field name with dashes; booleans are switches; dicts are JSON.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from . import config
from . import resources as kit_resources

S = TypeVar("S", bound="ServiceSettings")


class SettingsError(ValueError):
    """A setting is missing or malformed (the message names it)."""


def setting(default: Any = dataclasses.MISSING, *, env: str | None = None, help: str = "",
            factory: Any = None) -> Any:
    """A settings field: its default (none: required), its EMBER_* variable, its help."""
    meta = {"env": env, "help": help}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
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
            return config.parse_flag(raw)
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
    log_level: str = setting("INFO", env="EMBER_LOG_LEVEL", help="logging level")
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
    def parser(cls) -> argparse.ArgumentParser:
        """The argparse parser of this service's flags."""
        p = argparse.ArgumentParser(prog=cls.PROG, description=(cls.__doc__ or "").splitlines()[0])
        for f in dataclasses.fields(cls):
            kw: dict[str, Any] = {"dest": f.name, "help": f.metadata.get("help", "")}
            if f.type == "bool":
                p.add_argument(cls.flag(f.name), action="store_true", **kw)
                continue
            if _required(f):
                kw["required"] = True
            else:
                kw["default"] = _default(f)
            p.add_argument(cls.flag(f.name), type=str, **kw)
        return p

    @classmethod
    def from_argv(cls: type[S], argv: Sequence[str] | None = None) -> S:
        """Parses a command line: argparse's --help and errors (a missing or unknown flag exits
        with code 2 naming it); SettingsError naming the flag for a malformed value."""
        ns = cls.parser().parse_args(argv)
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            raw = getattr(ns, f.name)
            values[f.name] = (_parse(str(f.type), raw, cls.flag(f.name), f.name)
                              if isinstance(raw, str) and f.type != "str" else raw)
        return cls(**values)

    @classmethod
    def from_argv_or_exit(cls: type[S], argv: Sequence[str] | None = None) -> S:
        """`from_argv` for a service's main(): a malformed value is one `error:` line on stderr
        and exit code 2."""
        try:
            return cls.from_argv(argv)
        except SettingsError as e:
            print(f"error: {e}", file=sys.stderr)
            raise SystemExit(2) from None

    @classmethod
    def from_env(cls: type[S], environ: Mapping[str, str] | None = None,
                 extra_known: Sequence[str] = (), **overrides: Any) -> S:
        """Reads each field from its EMBER_* variable; `overrides` win. SettingsError naming the
        variable when a required one is missing or a value is malformed; unknown EMBER_*
        variables (not in any service's settings, the tunables or `extra_known`) warn."""
        env = os.environ if environ is None else environ
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
        known = known_env_vars() | set(extra_known)
        for key in env:
            if key.startswith("EMBER_") and key not in known and not key.startswith("EMBER_TEST_"):
                warnings.warn(f"unknown environment variable {key} (ignored)", RuntimeWarning, stacklevel=2)
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
    host: str = setting("0.0.0.0", help="interface to bind")
    port: int = setting(6379, env="EMBER_GCS_PORT", help="port to bind (0 = any)")
    storage: str = setting("memory", env="EMBER_GCS_STORAGE", help="'memory' or 'etcd://host:port'")
    cluster_name: str = setting("default", env="EMBER_CLUSTER_NAME", help="etcd key prefix of this cluster")
    session_dir: str = setting("", env="EMBER_SESSION_DIR", help="the session's directory")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RayletSettings(ServiceSettings):
    """Ember raylet (one per node)."""

    PROG: ClassVar[str] = "ember-raylet"
    gcs_address: str = setting(env="EMBER_GCS_ADDRESS", help="HOST:PORT of the GCS")
    objmgr_address: str = setting(env="EMBER_OBJMGR_ADDRESS", help="HOST:PORT of this node's object manager")
    node_id: str = setting(env="EMBER_NODE_ID", help="this node's id")
    store_dir: str = setting(env="EMBER_STORE_DIR", help="this node's object store directory")
    session_dir: str = setting(env="EMBER_SESSION_DIR", help="the session's directory (logs)")
    resources: dict[str, float] = setting(factory=dict, env="EMBER_RESOURCES",
                                          help='JSON, e.g. {"CPU": 4, "GPU": 1, "custom": 2}')
    object_store_memory_bytes: int = setting(0, env="EMBER_OBJECT_STORE_BYTES",
                                             help="size of this node's object store")
    node_ip: str = setting("127.0.0.1", env="EMBER_NODE_IP", help="the address other nodes reach")
    host: str = setting("0.0.0.0", help="interface to bind")
    port: int = setting(0, env="EMBER_RAYLET_PORT", help="port to bind (0 = any)")
    head: bool = setting(False, env="EMBER_HEAD", help="this is the head node")
    num_prestart_workers: int | None = setting(None, help="workers to keep started (default: CPUs)")
    runtime_env_dir: str = setting("", env="EMBER_RUNTIME_ENV_DIR",
                                   help="runtime-env cache: packages, pip venvs (default: <session_dir>/runtime_resources)")

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "resources",
                           kit_resources.validate(dict(self.resources), source="--resources"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ObjmgrSettings(ServiceSettings):
    """Ember object manager (one per node)."""

    PROG: ClassVar[str] = "ember-objmgr"
    store_dir: str = setting(env="EMBER_STORE_DIR", help="directory on a tmpfs (e.g. under /dev/shm)")
    capacity_bytes: int = setting(0, env="EMBER_OBJECT_STORE_BYTES", help="size of the arena")
    spill_dir: str | None = setting(None, env="EMBER_SPILL_DIR",
                                    help="where full-store objects go: a directory or a pyarrow.fs URI")
    gcs_address: str = setting("", env="EMBER_GCS_ADDRESS", help="GCS to follow for worker deaths")
    node_id: str = setting("", env="EMBER_NODE_ID", help="this node's id")
    host: str = setting("0.0.0.0", help="interface to bind")
    port: int = setting(0, env="EMBER_OBJMGR_PORT", help="port to bind (0 = any)")


SERVICES: tuple[type[ServiceSettings], ...] = (GcsSettings, RayletSettings, ObjmgrSettings)


def known_env_vars() -> set[str]:
    """Every EMBER_* variable something reads: the services' settings and the tunables."""
    return config.known_env_vars()


config.register_env_vars({f.metadata["env"] for cls in SERVICES for f in dataclasses.fields(cls)
                          if f.metadata.get("env")})
