"""The one registry of Ember's environment variables: every EMBER_* name with its type, default,
unit, one line of doc and the processes that read it (the table is `envvars_table.py`).

Every process reads its EMBER_* variables through this module, once where it starts (never per
task): `Config` (config.py) and the services' settings (settings.py) take their variables,
defaults and help from the table; docker/entrypoint.py its container defaults; other modules
call the functions below. docs/settings.md is generated from the table
(scripts/gen_settings_doc.py). tests/unit/gates/test_envvars.py fails on any other `os.environ` read
of an EMBER_* name, on a stale docs/settings.md and on a registered name nothing uses.

    get(name[, default])  the raw value, `os.environ.get` for a registered name
    value(name)           the value parsed to its type; the table's default when unset
    require(name)         the raw value; SettingsError naming the variable when unset
    parse(name, raw)      one raw string parsed to the variable's type (ValueError naming it)
    warn_unknown(env)     one RuntimeWarning per EMBER_* variable the table does not name

Asking for a name the table does not hold is a programming error (KeyError naming it).
EMBER_TEST_* variables are the tests' own knobs: never registered, never warned about.
Writing a variable into a child's environment needs no registry call.
"""
from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable, Mapping
from typing import Any, overload

from .envvars_table import REQUIRED, VARS, Var

__all__ = ["REQUIRED", "VARS", "Var", "SettingsError", "get", "value", "require", "parse", "environ",
           "known", "warn_unknown", "container_default", "container_only", "parse_flag"]

TEST_PREFIX = "EMBER_TEST_"


class SettingsError(ValueError):
    """A setting is missing or malformed (the message names it)."""


def _var(name: str) -> Var:
    try:
        return VARS[name]
    except KeyError:
        raise KeyError(f"{name} is not in the settings registry (ember_common/envvars_table.py)") from None


def environ() -> Mapping[str, str]:
    """The process environment (what `Config.from_env` and `from_env` read by default)."""
    return os.environ


@overload
def get(name: str) -> str | None: ...
@overload
def get(name: str, default: str) -> str: ...
def get(name: str, default: str | None = None) -> str | None:
    """The raw value of registered variable `name`, `default` when it is unset."""
    _var(name)
    return os.environ.get(name, default)


def require(name: str) -> str:
    """The raw value of `name`; SettingsError naming it when it is unset."""
    _var(name)
    raw = os.environ.get(name)
    if raw is None:
        raise SettingsError(f"missing required setting {name}")
    return raw


def value(name: str) -> Any:
    """`name` parsed to its type, or the table's default when unset (SettingsError when the
    variable is required)."""
    var = _var(name)
    raw = os.environ.get(name)
    if raw is not None:
        return parse(name, raw)
    if var.default is REQUIRED:
        raise SettingsError(f"missing required setting {name}")
    return var.default


def parse_flag(raw: str) -> bool:
    """1/true/yes/on or 0/false/no/off (or empty); ValueError otherwise."""
    low = raw.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(raw)


def parse(name: str, raw: str) -> Any:
    """`raw` as the type of variable `name` (int, float, bool, str or a JSON object of resource
    amounts); ValueError `NAME='raw' is not a valid KIND` when it is not one."""
    kind = _var(name).kind
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
        if kind == "bool":
            return parse_flag(raw)
        if kind == "json":
            from . import resources

            return resources.parse_json(raw, source=name)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a valid {kind}") from None
    return raw


def known() -> frozenset[str]:
    """Every registered name."""
    return _KNOWN


def warn_unknown(env: Mapping[str, str], extra_known: Iterable[str] = (), stacklevel: int = 3) -> None:
    """One RuntimeWarning per EMBER_* variable in `env` that the table does not name (a typo
    should not pass silently); EMBER_TEST_* and `extra_known` are left alone."""
    extra = set(extra_known)
    for key in env:
        if key.startswith("EMBER_") and key not in _KNOWN and key not in extra and not key.startswith(TEST_PREFIX):
            warnings.warn(f"unknown environment variable {key} (ignored)", RuntimeWarning, stacklevel=stacklevel)


def container_default(name: str) -> str:
    """What docker/entrypoint.py uses for `name` when the container is not given it: the
    table's container default, else its default ("" when it has none)."""
    var = _var(name)
    if var.container is not None:
        return var.container
    if var.default is None or var.default is REQUIRED:
        return ""
    if isinstance(var.default, bool):
        return "1" if var.default else "0"
    if isinstance(var.default, dict):
        return json.dumps(var.default)
    return str(var.default)


def container_only() -> tuple[str, ...]:
    """The variables the container entry point reads and no process under a service reads from
    its environment (no driver, worker or driver service): the entry point turns them into the
    service's flags and takes them out of its environment."""
    env_readers = {"driver", "worker", "serve-proxy", "dashboard"}
    return tuple(v.name for v in VARS.values() if "container" in v.readers and not env_readers & set(v.readers))


_KNOWN = frozenset(VARS)
