"""Declarative Serve: deploy a whole config (Ray's ServeDeploySchema), read the cluster's Serve
state in Ray's shapes, shut it all down. Used by `serve deploy`/`serve run config.yaml` (through
the dashboard's REST API or directly) and by the dashboard's `/api/serve/applications/`.

    deploy_config(config)   validate, start the controller/proxy, build each application in a task
                            with its runtime_env, deploy it (a changed config updates in place),
                            delete the applications the config no longer names
    details()               Ray's ServeInstanceDetails dict (GET /api/serve/applications/)
    status_from_details(d)  Ray's `serve status` dict (proxies, applications, target_capacity)
    shutdown()              every application, the proxy and the controller (DELETE)

Call with a connected driver (`ember.init(...)`); every call blocks.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Any

import ember
from ember.exceptions import RayTaskError

from . import api
from ._private import proxies
from ._private.app_build import build_specs
from ._private.controller import CONTROLLER_NAME
from .schema import SchemaError, ServeDeploySchema


class BuildError(ValueError):
    """An application of a config could not be imported or built (the message says which, and why)."""


def deploy_config(config: dict[str, Any] | ServeDeploySchema, *, wait: bool = False,
                  timeout_s: float = 120.0) -> list[str]:
    """Deploys every application of the config; returns their names. wait: until they are RUNNING
    (a failed one raises). Bad configs raise SchemaError (a ValueError) naming the field; an import
    or app builder that fails raises BuildError naming the application and the import path; either
    leaves the running applications as they were."""
    cfg = config if isinstance(config, ServeDeploySchema) else ServeDeploySchema.model_validate(config)
    built = []
    for app in cfg.applications:  # build them all before deploying any: one bad import changes nothing
        overrides = {d.name: d.options() for d in app.deployments}
        copies: list[str] = []
        try:
            task = ember.remote(build_specs).options(num_cpus=0, max_retries=0,
                                                     runtime_env=_snapshot_local_dirs(app.runtime_env, copies) or None)
            ingress, specs = ember.get(task.remote(app.import_path, dict(app.args), overrides, app.name,
                                                   bool(app.runtime_env), api._driver_import_paths()), timeout=timeout_s)
        except RayTaskError as e:
            cause = e.cause if e.cause is not None else e
            raise BuildError(f"application {app.name!r} ({app.import_path}) could not be built: "
                             f"{type(cause).__name__}: {cause}") from e
        finally:  # packaged and uploaded by now: replicas get the package's URI, not the copy
            for d in copies:
                shutil.rmtree(d, ignore_errors=True)
        built.append((app, ingress, specs))
    ctrl = api._controller()
    if cfg.proxy_location != "Disabled" and any(a.route_prefix is not None for a in cfg.applications):
        _ensure_proxy(cfg)
    for app, ingress, specs in built:
        ember.get(ctrl.deploy_app.remote(app.name, app.route_prefix, ingress, specs,
                                         app.model_dump(exclude_unset=True)), timeout=60)
    wanted = {a.name for a in cfg.applications}
    for name in ember.get(ctrl.status.remote(), timeout=30):
        if name not in wanted:
            api.delete(name, _blocking=False)
    if wait:
        deadline = time.monotonic() + timeout_s
        for app, _, _ in built:
            api._wait_running(ctrl, app.name, max(1.0, deadline - time.monotonic()))
            if app.route_prefix is not None and cfg.proxy_location != "Disabled":
                api._wait_routed(app.route_prefix, deadline)
    return [a.name for a in cfg.applications]


def _snapshot_local_dirs(env: dict[str, Any], copies: list[str]) -> dict[str, Any]:
    """The runtime_env with each local working_dir / py_modules directory replaced by a fresh copy
    (its path added to copies, for the caller to remove once the build task ran). A process
    packages a local path once and reuses that package for the path after, so a long-lived
    deployer (the dashboard) would ship the first version of a directory forever; a new path per
    deploy makes a redeploy after an edit ship the new code (and roll the replicas over to it),
    and an unchanged directory packages to the same URI (so the replicas stay). Ray's `local://`
    URIs (a directory that exists where the cluster runs; Ray's Serve config takes no plain local
    path) name a local directory here."""
    env = dict(env)
    if isinstance(env.get("working_dir"), str):
        env["working_dir"] = _snapshot(env["working_dir"], copies, keep_name=False)
    if isinstance(env.get("py_modules"), list):
        env["py_modules"] = [_snapshot(p, copies, keep_name=True) if isinstance(p, str) else p
                             for p in env["py_modules"]]
    return env


def _snapshot(path: str, copies: list[str], *, keep_name: bool) -> str:
    if path.startswith("local://"):
        path = path[len("local://"):]
    full = os.path.abspath(os.path.expanduser(path))
    if "://" in path or not os.path.isdir(full):
        return path  # a URI, a .zip/.whl or a module name: as given
    tmp = tempfile.mkdtemp(prefix="ember-serve-pkg-")
    copies.append(tmp)
    target = os.path.join(tmp, os.path.basename(full)) if keep_name else os.path.join(tmp, "wd")
    shutil.copytree(full, target, ignore=shutil.ignore_patterns(".git", "__pycache__", ".venv"))
    return target


def _ensure_proxy(cfg: ServeDeploySchema) -> None:
    """The running proxy when there is one (its port must be the config's, unless the config
    leaves http_options out); else start one where http_options say."""
    http = cfg.http_options
    found = proxies.running()
    if found:
        port = int(found[0]["port"])
        if "http_options" in cfg._set and "port" in http._set and http.port not in (0, port):
            raise SchemaError(f"config.http_options.port: Serve's HTTP proxy already listens on port {port}, "
                              f"not {http.port}; run `serve shutdown` first to move it")
        api._set_proxy((found[0]["host"], port))
        return
    api.start(http_options={"host": http.host, "port": http.port})


def _controller_info() -> dict[str, Any]:
    from ember.util.state import list_actors

    rows = list_actors(filters=[("name", "=", CONTROLLER_NAME), ("state", "=", "ALIVE")],
                       raise_on_missing_output=False)
    if not rows:
        return {}
    a = rows[0]
    return {"node_id": a.node_id, "actor_id": a.actor_id, "actor_name": CONTROLLER_NAME,
            "worker_id": getattr(a, "worker_id", None)}


def details() -> dict[str, Any]:
    """The cluster's Serve state in the shape of Ray's ServeInstanceDetails (what Ray's
    `serve status`/`serve config` read from GET /api/serve/applications/)."""
    out: dict[str, Any] = {"controller_info": {}, "proxy_location": None, "http_options": None,
                           "grpc_options": None, "proxies": {},
                           "applications": {}, "target_capacity": None}
    ctrl = api._controller(create=False)
    if ctrl is None:
        return out
    raw = ember.get(ctrl.status.remote(), timeout=30)
    out["controller_info"] = _controller_info()
    found = proxies.running()
    out["proxy_location"] = "HeadOnly" if found else "Disabled"  # one proxy per cluster
    if found:
        out["http_options"] = {"host": found[0]["host"], "port": int(found[0]["port"])}
    for p in found:
        pid = f"{p['hostname']}:{p['port']}"
        out["proxies"][pid] = {"node_id": pid, "node_ip": p["host"], "actor_name": "ember-serve-proxy",
                               "status": "HEALTHY"}
    for name, a in raw.items():
        deps = {}
        for dname, d in a["deployments"].items():
            deps[dname] = {
                "name": dname, "status": d["status"], "status_trigger": _trigger(d["status"]),
                "message": d["message"], "deployment_config": d["deployment_config"],
                "target_num_replicas": d["target"], "required_resources": {},
                "replicas": [{"replica_id": rid, "state": state, "actor_name": actor, "start_time_s": 0.0}
                             for rid, state, actor in d["replicas"]]}
        out["applications"][name] = {
            "name": name, "route_prefix": a["route_prefix"], "docs_path": None, "status": a["status"],
            "message": a["message"], "last_deployed_time_s": a["last_deployed_time_s"],
            "deployed_app_config": a["config"], "source": "declarative" if a["config"] else "imperative",
            "deployments": deps, "external_scaler_enabled": False}
    return out


def _trigger(status: str) -> str:
    return {"HEALTHY": "CONFIG_UPDATE_COMPLETED", "UPDATING": "CONFIG_UPDATE_STARTED",
            "DEPLOY_FAILED": "REPLICA_STARTUP_FAILED"}.get(status, "UNSPECIFIED")


def status_from_details(d: dict[str, Any]) -> dict[str, Any]:
    """Ray's `serve status` document from a details dict."""
    apps = {}
    for name, a in d.get("applications", {}).items():
        apps[name] = {"status": a["status"], "message": a["message"],
                      "last_deployed_time_s": a["last_deployed_time_s"],
                      "deployments": {dn: {"status": x["status"], "status_trigger": x["status_trigger"],
                                           "replica_states": _states(x["replicas"]), "message": x["message"]}
                                      for dn, x in a["deployments"].items()}}
    return {"proxies": {k: p["status"] for k, p in d.get("proxies", {}).items()}, "applications": apps,
            "target_capacity": d.get("target_capacity")}


def _states(replicas: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in replicas:
        out[r["state"]] = out.get(r["state"], 0) + 1
    return out


def shutdown() -> None:
    """Deletes every application and stops the proxy and the controller (Ray's DELETE)."""
    api.shutdown()
