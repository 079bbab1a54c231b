"""serve.run / start / status / delete / shutdown / get_app_handle / get_deployment_handle."""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

import ember

from ._private.controller import CONTROLLER_NAME, ServeController
from ._private.deployment_state import NAMESPACE, DeploymentSpec
from .config import HTTPOptions
from .deployment import Application, Deployment
from .handle import DeploymentHandle, _reset_runtime, cached_handle

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8000
_proxy_address: tuple[str, int] | None = None
_proxy_session = 0  # the cluster connection _proxy_address belongs to


def _set_proxy(addr: tuple[str, int] | None) -> None:
    global _proxy_address, _proxy_session
    from .handle import _session

    _proxy_address = addr
    _proxy_session = _session() if addr is not None else 0


def _current_proxy() -> tuple[str, int] | None:
    from .handle import _session

    if _proxy_address is None or not ember.is_initialized():
        return None
    return _proxy_address if _proxy_address is not None and _proxy_session == _session() else None


def _controller(create: bool = True) -> Any:
    if not ember.is_initialized():
        if not create:
            return None
        ember.init()
    try:
        return ember.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
    except ValueError:
        if not create:
            return None
    c = ember.remote(ServeController).options(
        name=CONTROLLER_NAME, namespace=NAMESPACE, lifetime="detached", max_restarts=-1, max_task_retries=-1,
        max_concurrency=1000, num_cpus=0, get_if_exists=True).remote()
    ember.get(c.ping.remote(), timeout=60)
    return c


_PROXY_LOCATIONS = ("Disabled", "HeadOnly", "EveryNode", "NoServer")


def _not_implemented(where: str, **given: Any) -> None:
    """Raises ValueError naming the Ray parameters given a value Ember does not implement."""
    named = sorted(k for k, v in given.items() if v)
    if named:
        raise ValueError(f"{where}: {', '.join(named)} not implemented by Ember Serve "
                         "(leave them at their defaults)")


def start(proxy_location: str | None = None, http_options: HTTPOptions | dict[str, Any] | None = None,
          grpc_options: Any = None, logging_config: Any = None, tracing_config: Any = None,
          controller_options: Any = None, *, detached: bool = True) -> None:
    """Starts Serve (the controller, and the HTTP proxy unless proxy_location is "Disabled").
    http_options: an HTTPOptions or a dict of its fields (where to listen, the proxy's limits).
    proxy_location: Ray's ProxyLocation ("EveryNode", the default, "HeadOnly" or "Disabled");
    Ember runs one proxy for the cluster, so EveryNode and HeadOnly both start that one.
    grpc_options, logging_config, tracing_config and controller_options are not implemented
    (given, they raise ValueError), nor is
    detached=False (Serve always outlives the driver that started it, as in Ray 2)."""
    if isinstance(proxy_location, (dict, HTTPOptions)) and http_options is None:
        raise TypeError("serve.start's first parameter is proxy_location; pass http_options=... by keyword")
    loc = getattr(proxy_location, "value", proxy_location)  # Ray's ProxyLocation enum or its name
    if loc is not None and loc not in _PROXY_LOCATIONS:
        raise ValueError(f"proxy_location must be one of {list(_PROXY_LOCATIONS[:3])}, got {proxy_location!r}")
    _not_implemented("serve.start", grpc_options=grpc_options is not None,
                     logging_config=logging_config is not None, tracing_config=tracing_config is not None,
                     controller_options=controller_options is not None, detached=detached is not True)
    opts = HTTPOptions.from_any(http_options)
    c = _controller()
    if loc in ("Disabled", "NoServer"):
        return
    host, port = opts.host or DEFAULT_HOST, int(opts.port)
    bound = ember.get(c.start_proxy.remote(host, port, opts.proxy_limits()), timeout=90)
    _set_proxy((host, bound))


def _use_or_start_proxy() -> None:
    """A proxy already registered in the cluster (a standalone one under compose, or one an
    earlier driver started) serves the new application; otherwise start the embedded one."""
    from ._private import proxies

    found = proxies.running()
    if found:
        _set_proxy((found[0]["host"], int(found[0]["port"])))
    else:
        start(http_options={"host": DEFAULT_HOST, "port": DEFAULT_PORT})


def proxy_address() -> tuple[str, int] | None:
    """(host, port) of the HTTP proxy this driver started or found (port 0 asks for any free port)."""
    return _current_proxy()


def _flatten(root: Application, app_name: str) -> list[DeploymentSpec]:
    """Every deployment of the application graph; bound Applications among the arguments become
    DeploymentHandles."""
    specs: dict[str, DeploymentSpec] = {}
    seen: dict[int, str] = {}

    def visit(node: Application) -> DeploymentHandle:
        if id(node) in seen:
            return DeploymentHandle(seen[id(node)], app_name)
        d = node.deployment
        name, n = d.name, 1
        while name in seen.values():  # one deployment bound twice: Name, Name_1, Name_2... as Ray's
            name, n = f"{d.name}_{n}", n + 1
        seen[id(node)] = name
        args = tuple(_convert(a) for a in node.args)
        kwargs = {k: _convert(v) for k, v in node.kwargs.items()}
        try:
            ser = cloudpickle.dumps(d.func_or_class)
            arg_bytes = cloudpickle.dumps((args, kwargs))
        except Exception as e:
            raise TypeError(f"deployment {d.name!r} or its bound arguments cannot be pickled: {e}") from e
        c = d.config  # what the replica actor runs with: a change restarts the replicas
        placement = (c.placement_group_bundles, c.placement_group_strategy, c.max_replicas_per_node)
        h = hashlib.sha1(ser + arg_bytes + repr((sorted(c.ray_actor_options.items()), placement)).encode())
        version = d.version or h.hexdigest()[:16]
        specs[name] = DeploymentSpec(app_name, name, ser, args, kwargs, d.config, version,
                                     import_paths=_driver_import_paths())
        return DeploymentHandle(name, app_name)

    def _convert(v: Any) -> Any:
        if isinstance(v, Application):
            return visit(v)
        if isinstance(v, Deployment):
            raise TypeError(f"pass {v.name}.bind(...) rather than the deployment {v.name} itself")
        if isinstance(v, (list, tuple)):
            return type(v)(_convert(x) for x in v)
        if isinstance(v, dict):
            return {k: _convert(x) for k, x in v.items()}
        return v

    visit(root)
    return list(specs.values())


def _driver_import_paths() -> tuple[str, ...]:
    """This process's own import paths (not the interpreter's): script dir and cwd."""
    import os
    import sys

    paths = [os.path.abspath(p) for p in sys.path if p and "site-packages" not in p and "/lib/python" not in p]
    return tuple(dict.fromkeys(paths + [os.getcwd()]))


def run(target: Application, blocking: bool = False, name: str = "default", route_prefix: str | None = "/",
        logging_config: Any = None, _local_testing_mode: bool = False, external_scaler_enabled: bool = False,
        controller_options: Any = None, *, host: str | None = None, port: int | None = None, _timeout_s: float = 120.0) -> DeploymentHandle:
    """Deploys (or updates) an application and waits until it is RUNNING and this driver's HTTP
    proxy routes its prefix (so a request sent right after never gets a 404); returns its handle.
    host/port (Ember's, as in the seed article) start the HTTP proxy there; default 127.0.0.1:8000.
    Ray's logging_config, _local_testing_mode, external_scaler_enabled and controller_options
    are not implemented:
    given a value, they raise ValueError naming them."""
    _not_implemented("serve.run", logging_config=logging_config is not None,
                     _local_testing_mode=bool(_local_testing_mode),
                     external_scaler_enabled=bool(external_scaler_enabled),
                     controller_options=controller_options is not None)
    if isinstance(target, Deployment):
        target = target.bind()
    if not isinstance(target, Application):
        raise TypeError(f"serve.run expects an application (MyDeployment.bind(...)), got {type(target).__name__}")
    if route_prefix is not None and not route_prefix.startswith("/"):
        raise ValueError(f"route_prefix must start with '/', got {route_prefix!r}")
    if route_prefix is not None and len(route_prefix) > 1:
        route_prefix = route_prefix.rstrip("/")
    if target.deployment.route_prefix is not None and route_prefix == "/":
        route_prefix = target.deployment.route_prefix
    from ember.util.client import client as client_mode

    remote = client_mode.active()
    if remote is not None:  # client mode (ray://): deploy from the session's driver on the head
        return remote.serve_run(target, {"blocking": blocking, "name": name,  # type: ignore[return-value]
                                         "route_prefix": route_prefix, "host": host, "port": port,
                                         "_timeout_s": _timeout_s})
    specs = _flatten(target, name)
    c = _controller()
    if route_prefix is not None and (host is not None or port is not None):
        start(http_options={"host": host or DEFAULT_HOST, "port": DEFAULT_PORT if port is None else port})
    elif route_prefix is not None and _current_proxy() is None:
        _use_or_start_proxy()
    ember.get(c.deploy_app.remote(name, route_prefix, target.deployment.name, specs), timeout=60)
    deadline = time.monotonic() + _timeout_s
    _wait_running(c, name, _timeout_s)
    if route_prefix is not None:
        _wait_routed(route_prefix, deadline)
    handle = cached_handle(target.deployment.name, name)
    if blocking:
        while True:
            time.sleep(3600)
    return handle


def _wait_running(c: Any, name: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        st = ember.get(c.status.remote(), timeout=30).get(name)
        if st is not None and st["status"] == "RUNNING":
            return
        if st is not None and st["status"] == "DEPLOY_FAILED":
            raise RuntimeError(f"application {name!r} failed to deploy: {st['message']}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"application {name!r} is not RUNNING after {timeout_s}s: {st}")
        time.sleep(0.05)


def _wait_routed(route_prefix: str, deadline: float) -> None:
    """Polls the proxy's `/-/routes` until it lists route_prefix (its table follows the controller
    by a long poll, so it can trail the application's RUNNING by a moment). A proxy this driver
    cannot reach (one registered under another container's address) is not waited for."""
    import json
    import urllib.request

    from ember_common import auth

    addr = _current_proxy()
    if addr is None:
        return
    host = "127.0.0.1" if addr[0] in ("0.0.0.0", "") else addr[0]
    url = f"http://{host}:{addr[1]}/-/routes"
    unreachable_until = time.monotonic() + 5.0
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the cluster's own proxy, no http_proxy
    while True:
        try:
            req = urllib.request.Request(url, headers=auth.http_headers())  # an admin view: token
            with direct.open(req, timeout=5) as r:
                if route_prefix in json.loads(r.read()):
                    return
            unreachable_until = float("inf")  # it answers: wait for the route until the deadline
        except (OSError, ValueError):
            if time.monotonic() > unreachable_until:
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the HTTP proxy at {host}:{addr[1]} does not route {route_prefix!r} "
                               "although the application is RUNNING")
        time.sleep(0.05)


@dataclass
class DeploymentStatus:
    name: str
    status: str
    message: str
    replica_states: dict[str, int]


@dataclass
class ApplicationStatus:
    status: str
    message: str
    route_prefix: str | None
    deployments: dict[str, DeploymentStatus] = field(default_factory=dict)


@dataclass
class ServeStatus:
    applications: dict[str, ApplicationStatus] = field(default_factory=dict)
    proxies: dict[str, str] = field(default_factory=dict)


def status() -> ServeStatus:
    c = _controller(create=False)
    if c is None:
        return ServeStatus()
    raw = ember.get(c.status.remote(), timeout=30)
    out = ServeStatus()
    for name, a in raw.items():
        deps = {d: DeploymentStatus(d, v["status"], v["message"], v["replica_states"])
                for d, v in a["deployments"].items()}
        out.applications[name] = ApplicationStatus(a["status"], a["message"], a["route_prefix"], deps)
    if _current_proxy() is not None:
        out.proxies["local"] = "HEALTHY"
    return out


def delete(name: str, _blocking: bool = True) -> None:
    """Deletes an application; waits until its replicas are gone."""
    c = _controller(create=False)
    if c is None:
        return
    ember.get(c.delete_app.remote(name), timeout=30)
    deadline = time.monotonic() + 60
    while _blocking and name in ember.get(c.status.remote(), timeout=30) and time.monotonic() < deadline:
        time.sleep(0.05)


def shutdown() -> None:
    """Deletes every application, stops the proxy and the controller."""
    c = _controller(create=False)
    _reset_runtime()
    _set_proxy(None)
    if c is None:
        return
    try:
        ember.get(c.shutdown.remote(), timeout=60)
    finally:
        ember.kill(c, no_restart=True)


def get_app_handle(name: str) -> DeploymentHandle:
    c = _controller(create=False)
    st = ember.get(c.status.remote(), timeout=30).get(name) if c is not None else None
    if st is None:
        raise ValueError(f"Application {name!r} does not exist")
    return cached_handle(st["ingress"], name)


def get_deployment_handle(deployment_name: str, app_name: str | None = None) -> DeploymentHandle:
    c = _controller(create=False)
    apps = ember.get(c.status.remote(), timeout=30) if c is not None else {}
    if app_name is None:
        from ._private.replica import _context

        app_name = _context.app_name if _context is not None else ("default" if "default" in apps else
                                                                   next(iter(apps), "default"))
    if app_name not in apps or deployment_name not in apps[app_name]["deployments"]:
        raise ValueError(f"Deployment {deployment_name!r} does not exist in application {app_name!r}")
    return cached_handle(deployment_name, app_name)
