"""The one parse/validate of resource amounts and resource dicts, used by every entry point:
task/actor options, `ember.init(...)`, `ember start --resources`, the raylet's `--resources`, the
container entry point's `EMBER_RESOURCES`, the raylet's lease requests and the GCS's node table.

Rules: an amount is an int or a float (not a bool), finite and >= 0; a resource dict maps
non-empty string names to amounts; a GPU amount above 1 is a whole number (below 1 it is a
fraction of one GPU). Every error names the resource and says where it came from. A value of the
wrong type raises `ResourceTypeError`, which is both a TypeError and a ValueError, so callers that
catch either keep working.
"""
from __future__ import annotations

import json
import math
from typing import Any, Iterable, Mapping

CPU = "CPU"
GPU = "GPU"
_EPS = 1e-9


class InvalidResourceError(ValueError):
    """A resource amount or a resource dict is not acceptable."""


class ResourceTypeError(InvalidResourceError, TypeError):
    """A resource amount is not a number, or a resource dict is not a dict."""


def amount(name: str, value: Any, *, source: str = "", label: str = "") -> float:
    """value as a float if it is a valid amount of resource `name`; else an error naming it.
    `source` says where the value came from (e.g. "--resources") for the message; `label`
    names the amount instead of the resource (an option such as "num_cpus")."""
    what = label or (f"{source}: resource {name!r}" if source else f"resource {name!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ResourceTypeError(f"{what} must be a number, got {type(value).__name__} {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise InvalidResourceError(f"{what} must be a finite number, got {value}")
    if v < 0:
        raise InvalidResourceError(f"{what} must be >= 0, got {value}")
    if name == GPU and v > 1 and abs(v - round(v)) > _EPS:
        raise InvalidResourceError(f"{what} above 1 must be a whole number (a fraction of one "
                                   f"GPU is fine), got {value}")
    return v


def validate(resources: Any, *, source: str = "resources",
             reserved: Iterable[str] = (), reserved_hint: str = "") -> dict[str, float]:
    """A resource dict checked and converted to {name: float}. Names in `reserved` (e.g. CPU and
    GPU, which have their own options) are refused with `reserved_hint` naming the right way."""
    if not isinstance(resources, Mapping):
        raise ResourceTypeError(f"{source} must be a dict of resource names to amounts, got "
                                f"{type(resources).__name__} {resources!r}")
    reserved = set(reserved)
    out: dict[str, float] = {}
    for name, value in resources.items():
        if not isinstance(name, str) or not name:
            raise InvalidResourceError(f"{source}: resource names must be non-empty strings, "
                                       f"got {name!r}")
        if name in reserved:
            raise InvalidResourceError(f"use {reserved_hint} instead of {source}={{'{name}': ...}}"
                                       if reserved_hint else f"{source} must not set {name!r}")
        out[name] = amount(name, value, source=source)
    return out


def parse_json(raw: str, *, source: str = "--resources", reserved: Iterable[str] = (),
               reserved_hint: str = "") -> dict[str, float]:
    """A resource dict given as JSON text (a flag or an environment variable), validated."""
    try:
        value = json.loads(raw)
    except ValueError as e:
        raise InvalidResourceError(f"{source} is not valid JSON ({e}): {raw!r}") from None
    if not isinstance(value, dict):
        raise InvalidResourceError(f"{source} must be a JSON object of numbers, got {raw!r}")
    return validate(value, source=source, reserved=reserved, reserved_hint=reserved_hint)
