"""Actor options, checked at the call site: `@ember.method(...)`, actor names, concurrency
groups, and the method table an actor class sends in its creation spec (ActorMethod protos)."""
from __future__ import annotations

import inspect
from typing import Any, Callable

from ember_common.proto import common_pb2

from .remote_function import streaming_default

STREAMING = -1  # ActorMethod.num_returns of a streaming generator method


def method(*args: Any, **options: Any) -> Any:
    """Decorates an actor method with options: `@ember.method(num_returns=2)`,
    `@ember.method(concurrency_group="io")` (a group declared by the class's
    `concurrency_groups`)."""
    if args:
        raise TypeError("use @ember.method(num_returns=...) with keyword arguments")
    for k in options:
        if k not in ("num_returns", "concurrency_group", "max_task_retries", "retry_exceptions"):
            raise ValueError(f"Invalid option keyword {k!r} for ember.method")
    group = options.get("concurrency_group")
    if group is not None and (not isinstance(group, str) or not group):
        raise ValueError(f"concurrency_group must be a non-empty str, got {group!r}")
    retries = call_retries(options, "ember.method")

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.__ember_num_returns__ = options.get("num_returns")  # type: ignore[attr-defined]
        fn.__ember_concurrency_group__ = group  # type: ignore[attr-defined]
        fn.__ember_retries__ = retries  # type: ignore[attr-defined]
        return fn

    return decorate


def check_name(name: Any) -> None:
    """Ray's rules for an actor name: None (unnamed) or a non-empty str."""
    if name is None:
        return
    if not isinstance(name, str):
        raise TypeError(f"actor name must be a str, got {type(name).__name__}")
    if not name:
        raise ValueError("Actor name cannot be an empty string.")


def concurrency_groups(groups: Any, cls_name: str) -> dict[str, int]:
    """Ray's `concurrency_groups`: a dict of group name -> max concurrency (an int >= 1)."""
    if groups in (None, {}, []):
        return {}
    if not isinstance(groups, dict):
        raise TypeError(f"concurrency_groups of actor class {cls_name} must be a dict of group "
                        f"name -> max concurrency, got {type(groups).__name__}")
    for name, limit in groups.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"concurrency group names of actor class {cls_name} must be "
                             f"non-empty strs, got {name!r}")
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"concurrency group {name!r} of actor class {cls_name}: the max "
                             f"concurrency must be an int >= 1, got {limit!r}")
    return dict(groups)


def call_retries(options: dict[str, Any], what: str) -> dict[str, Any]:
    """The per-call `max_task_retries` (int >= -1) and `retry_exceptions` (bool or exception
    classes) among options, checked as Ray checks them; only those given."""
    from ..owner.task_errors import check_retry_exceptions

    out = {}
    mtr = options.get("max_task_retries")
    if mtr is not None:
        if not isinstance(mtr, int) or isinstance(mtr, bool) or mtr < -1:
            raise ValueError(f"max_task_retries of {what} must be an int >= -1, got {mtr!r}")
        out["max_task_retries"] = mtr
    if options.get("retry_exceptions") is not None:
        check_retry_exceptions(options["retry_exceptions"], what)
        out["retry_exceptions"] = options["retry_exceptions"]
    return out


def method_retries(cls: type) -> dict[str, dict[str, Any]]:
    """Each method's `@ember.method(max_task_retries=..., retry_exceptions=...)`, by name."""
    out = {}
    for name, member in inspect.getmembers(cls):
        r = getattr(member, "__ember_retries__", None)
        if r:
            out[name] = r
    return out


def method_table(cls: type) -> list[common_pb2.ActorMethod]:
    """The actor's public methods (and __call__) with their options."""
    out = []
    for name, member in inspect.getmembers(cls):
        if name.startswith("__") and name != "__call__":
            continue
        if not (inspect.isfunction(member) or inspect.ismethod(member)):
            continue
        nr = streaming_default(member, getattr(member, "__ember_num_returns__", None))
        out.append(common_pb2.ActorMethod(
            name=name, num_returns=STREAMING if nr == "streaming" else nr,
            concurrency_group=getattr(member, "__ember_concurrency_group__", None) or "",
            is_async=inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member),
            is_generator=inspect.isgeneratorfunction(member) or inspect.isasyncgenfunction(member)))
    return out
