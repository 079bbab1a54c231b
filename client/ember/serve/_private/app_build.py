"""From an import path to an application: import the attribute, call an app builder with its
args (Ray's rules), apply a config's per-deployment overrides, and flatten the graph into the
specs the controller deploys. `build_specs` runs in a task with the application's runtime_env
(its working_dir and py_modules), as Ray builds config applications in the cluster."""
from __future__ import annotations

import importlib
import inspect
import sys
from types import FunctionType
from typing import Any

from ..deployment import Application


def import_attr(path: str) -> Any:
    """`module.sub:attr` or `module.sub.attr` (attr may be dotted after a colon)."""
    if ":" in path:
        mod_name, _, attr = path.partition(":")
    else:
        mod_name, _, attr = path.rpartition(".")
    if not mod_name or not attr:
        raise ValueError(f"import path {path!r} must be 'module.path:attribute' or 'module.path.attribute'")
    try:
        obj: Any = importlib.import_module(mod_name)
    except ImportError as e:
        raise ImportError(f"cannot import module {mod_name!r} of import path {path!r}: {e}") from e
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ImportError(f"module {mod_name!r} has no attribute {attr!r} (import path {path!r})") from None
    return obj


def call_builder(target: Any, args: dict[str, Any]) -> Application:
    """A bound application as is (args must be empty), or an app builder function called with the
    args dict (converted to its pydantic model when its one parameter is annotated with one)."""
    if isinstance(target, Application):
        if args:
            raise ValueError("arguments can only be passed to an application builder function, "
                             f"not to an already built application (got {sorted(args)})")
        return target
    if not isinstance(target, FunctionType):
        raise TypeError("expected a bound Serve application (MyDeployment.bind()) or an application builder "
                        f"function, got {type(target).__name__}")
    params = list(inspect.signature(target).parameters.values())
    if len(params) != 1:
        raise TypeError("an application builder function takes exactly one parameter, the dict of arguments")
    value: Any = args
    ann = params[0].annotation
    if isinstance(ann, str):
        ann = target.__globals__.get(ann, ann)
    if inspect.isclass(ann) and hasattr(ann, "model_validate") and "pydantic" in sys.modules:
        value = ann.model_validate(args)
    app = target(value)
    if not isinstance(app, Application):
        raise TypeError(f"the application builder {target.__name__} must return an Application "
                        f"(MyDeployment.bind()), got {type(app).__name__}")
    return app


def _nodes(root: Application) -> list[Application]:
    """Every Application node of the graph (root first), each once."""
    out: list[Application] = []
    seen: set[int] = set()

    def visit(v: Any) -> None:
        if isinstance(v, Application):
            if id(v) in seen:
                return
            seen.add(id(v))
            out.append(v)
            for a in (*v.args, *v.kwargs.values()):
                visit(a)
        elif isinstance(v, (list, tuple)):
            for x in v:
                visit(x)
        elif isinstance(v, dict):
            for x in v.values():
                visit(x)

    visit(root)
    return out


def apply_overrides(root: Application, overrides: dict[str, dict[str, Any]],
                    runtime_env: dict[str, Any] | None) -> None:
    """Each named deployment gets `.options(**its overrides)`; every deployment without a
    runtime_env of its own runs in the application's (Ray's inheritance). A named deployment
    that is not in the graph is an error naming it."""
    nodes = _nodes(root)
    names = {n.deployment.name for n in nodes}
    missing = sorted(set(overrides) - names)
    if missing:
        raise ValueError(f"the config names deployment(s) {missing} that the application does not have; "
                         f"its deployments are {sorted(names)}")
    for n in nodes:
        opts = dict(overrides.get(n.deployment.name, {}))
        if runtime_env:
            actor_opts = dict(opts.get("ray_actor_options") or n.deployment.config.ray_actor_options)
            if not actor_opts.get("runtime_env"):
                actor_opts["runtime_env"] = dict(runtime_env)
                opts["ray_actor_options"] = actor_opts
        if opts:
            n.deployment = n.deployment.options(**opts)


def build_specs(import_path: str, args: dict[str, Any], overrides: dict[str, dict[str, Any]], app_name: str,
                has_env: bool, import_paths: tuple[str, ...]) -> tuple[str, list[Any]]:
    """(ingress deployment name, specs) of one config application. Runs inside a task started with
    the application's runtime_env (has_env: it has one), which its replicas inherit with their
    packages already uploaded; import_paths are the deploying process's, tried after it."""
    import os

    import ember

    from ..api import _flatten

    runtime_env = dict(ember.get_runtime_context().runtime_env) if has_env else None

    for p in import_paths:
        if os.path.isdir(p) and p not in sys.path:
            sys.path.append(p)
    app = call_builder(import_attr(import_path), args)
    apply_overrides(app, overrides, runtime_env)
    pin_versions(app, import_path, args)
    return app.deployment.name, _flatten(app, app_name)


def pin_versions(root: Application, import_path: str, args: dict[str, Any]) -> None:
    """Gives each deployment without an explicit version one derived from what the config says
    its code is: the import path, the builder args, its name, its ray_actor_options and placement
    options (placement_group_*, max_replicas_per_node; ray_actor_options with the
    runtime_env's package URIs, which change with the code in a working_dir). A redeploy that
    changes only num_replicas, user_config, max_ongoing_requests or the like keeps the version,
    so the controller updates the running replicas in place (the hash of a class pickled by value
    differs between processes, so it cannot serve here)."""
    import hashlib
    import json

    for n in _nodes(root):
        d = n.deployment
        if d.version is not None:
            continue
        c = d.config
        key = json.dumps([import_path, args, d.name, c.ray_actor_options, c.placement_group_bundles,
                          c.placement_group_strategy, c.max_replicas_per_node], sort_keys=True, default=repr)
        n.deployment = d.options(version=hashlib.sha1(key.encode()).hexdigest()[:16])
