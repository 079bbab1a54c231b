"""Validation of @remote / .options(...) arguments: unknown names and bad values fail at the
call site with a message naming the option."""
from __future__ import annotations

from typing import Any

from ember_common import labels as kit_labels
from ember_common import resources as kit_resources

from ..runtime_env import validation as runtime_env_validation
from . import scheduling

TASK_OPTIONS = {
    "num_cpus", "num_gpus", "memory", "resources", "max_retries", "retry_exceptions",
    "num_returns", "name", "scheduling_strategy", "runtime_env", "accelerator_type",
    "placement_group", "placement_group_bundle_index", "placement_group_capture_child_tasks",
    "_metadata", "label_selector", "fallback_strategy", "enable_task_events", "object_store_memory",
}
ACTOR_OPTIONS = {
    "num_cpus", "num_gpus", "memory", "resources", "max_restarts", "max_task_retries",
    "max_concurrency", "name", "namespace", "lifetime", "get_if_exists", "scheduling_strategy",
    "runtime_env", "accelerator_type", "placement_group", "placement_group_bundle_index",
    "placement_group_capture_child_tasks", "max_pending_calls", "concurrency_groups",
    "_metadata", "label_selector", "fallback_strategy", "enable_task_events", "object_store_memory",
    "allow_out_of_order_execution",
}


# Ray options Ember knows but does not implement yet: setting them must not pass silently.
UNSUPPORTED: dict[str, str] = {}


def validate(options: dict[str, Any], allowed: set[str], what: str) -> None:
    """Checks @remote / .options(...) keywords and values; ValueError/TypeError name the option."""
    for k in options:
        if k not in allowed:
            raise ValueError(f"Invalid option keyword {k!r} for {what}. Valid ones are: "
                             f"{', '.join(sorted(allowed))}")
    for k, feature in UNSUPPORTED.items():
        v = options.get(k)
        if v not in (None, "default", {}, []):
            raise ValueError(f"{k}={v!r} for {what}: {feature} are not supported by Ember yet")
    # label_selector: Ray's syntax (keys, `v`, `!v`, `in(a,b)`, `!in(a,b)`), checked once here.
    if options.get("label_selector") is not None:
        kit_labels.parse_selector(options["label_selector"], f"label_selector of {what}")
    fallback_selectors(options.get("fallback_strategy"), what)
    # runtime_env: the fields and their types (paths are checked when the task is submitted).
    runtime_env_validation.validate(options.get("runtime_env"), f"runtime_env of {what}")
    # Strategy, placement group and bundle index: checked here (without the caller's context;
    # the submission resolves the parent's group again).
    scheduling.resolve(options, what)
    # The kit's one resource check: a wrong type is a TypeError (and a ValueError), a negative,
    # NaN or infinite amount a ValueError, each naming the option.
    for k, resource in (("num_cpus", "CPU"), ("num_gpus", "GPU"), ("memory", "memory")):
        v = options.get(k)
        if v is not None:
            kit_resources.amount(resource, v, label=k)
    res = options.get("resources")
    if res is not None:
        kit_resources.validate(res, source="resources", reserved=("CPU", "GPU"),
                               reserved_hint="num_cpus/num_gpus")
    for k in ("max_retries", "max_restarts", "max_task_retries"):
        count(options.get(k), k, what)
    name = options.get("name")
    if name is not None and not isinstance(name, str):
        raise TypeError(f"The type of keyword 'name' of {what} must be a str, got "
                        f"{type(name).__name__}")
    nr = options.get("num_returns")
    if nr is not None and nr not in ("streaming", "dynamic") and (
            not isinstance(nr, int) or isinstance(nr, bool) or nr < 0):
        raise ValueError(f"num_returns must be an int >= 0, got {nr!r}")


def fallback_selectors(strategy: Any, what: str) -> list[dict[str, str]]:
    """Ray's fallback_strategy checked: a list of dicts whose one option is `label_selector`
    (ValueError naming the problem); the selectors, in order."""
    if strategy is None:
        return []
    if not isinstance(strategy, list):
        raise ValueError(f"fallback_strategy of {what} must be a list of dicts, got {type(strategy).__name__}")
    out = []
    for i, entry in enumerate(strategy):
        if not isinstance(entry, dict) or not entry:
            raise ValueError(f"fallback_strategy[{i}] of {what} must be a non-empty dict, got {entry!r}")
        unknown = sorted(k for k in entry if k != "label_selector")
        if unknown:
            raise ValueError(f"fallback_strategy[{i}] of {what}: unsupported option(s) {unknown}; "
                             "only 'label_selector' is supported")
        kit_labels.parse_selector(entry["label_selector"], f"fallback_strategy[{i}] of {what}")
        out.append(dict(entry["label_selector"] or {}))
    return out


def count(value: Any, key: str, what: str) -> None:
    """Ray's check of a retry or restart count: an int (TypeError otherwise), >= -1 (-1:
    forever; ValueError otherwise). None: not given."""
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"The type of keyword {key!r} of {what} must be an int, got "
                        f"{type(value).__name__}")
    if value < -1:
        raise ValueError(f"The keyword {key!r} of {what} only accepts -1 (forever), 0 or a "
                         f"positive int, got {value}")


def resource_request(options: dict[str, Any], default_cpus: float) -> dict[str, float]:
    """The scheduling resources of a task or actor from its options."""
    req: dict[str, float] = {}
    cpus = options.get("num_cpus")
    cpus = default_cpus if cpus is None else cpus
    if cpus:
        req["CPU"] = float(cpus)
    if options.get("num_gpus"):
        req["GPU"] = float(options["num_gpus"])
    if options.get("memory"):
        req["memory"] = float(options["memory"])
    for k, v in (options.get("resources") or {}).items():
        if v:
            req[k] = float(v)
    return req
