"""ServeController: the detached actor that owns Serve's desired state and reconciles it.

Applications and their deployments arrive from `serve.run` (deploy_app); a control loop ticks
every deployment (autoscaling, rolling updates, health checks, replacing dead replicas); every
change bumps a version that routers (the proxy, DeploymentHandles) long-poll with `listen`, so
no request path ever asks the controller anything. The desired state is written to the GCS KV
(namespace "serve"), so a restarted controller (max_restarts=-1) picks up its applications and
re-attaches to the replicas that are still alive. The controller also starts the embedded HTTP
proxy (`python -m ember_serve_proxy`, a child process of the controller's worker) on request.
"""
from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import cloudpickle
import psutil

import ember
from ember._private.doors import internal_kv as kv

from .deployment_state import NAMESPACE, DeploymentSpec, DeploymentState, Replica
from .placement_runtime import find_replica_group, remove_replica_group
from .reconcile import RUNNING

log = logging.getLogger(__name__)
CONTROLLER_NAME = "SERVE_CONTROLLER"
KV_KEY = b"controller_state"
TICK_S = 0.05
# How long a restarted controller waits for its proxy's old port to be free.
PROXY_PORT_WAIT_S = 60.0


def _port_free(host: str, port: int) -> bool:
    """Whether host:port can be bound now, as the proxy binds it (SO_REUSEADDR: connections
    of a previous proxy in TIME_WAIT do not count)."""
    if not port:
        return True
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _holder(port: int) -> str:
    """Who listens on port, for the warning (a process of this user), else 'another process'."""
    try:
        for c in psutil.net_connections("tcp"):
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
                return f"pid {c.pid}: {' '.join(psutil.Process(c.pid).cmdline())[:200]}"
    except (psutil.Error, OSError):
        pass
    return "another process"


def _kick() -> None:
    """After a restart, call this controller once so that its control loop (and the embedded
    proxy) start even if no driver or router calls it soon."""
    for _ in range(100):
        try:
            ember.get(ember.get_actor(CONTROLLER_NAME, namespace=NAMESPACE).ping.remote(), timeout=30)
            return
        except Exception as e:
            log.debug("controller kick: %s", e)
            time.sleep(0.2)


class ServeController:
    def __init__(self) -> None:
        self.apps: dict[str, dict[str, Any]] = {}  # name → {route_prefix, ingress, deployments: {name: state}}
        self.version = 0
        self._cond: asyncio.Condition | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self.proxy: subprocess.Popen[bytes] | None = None
        self.proxy_opts: dict[str, Any] | None = None
        self.proxy_port = 0
        self._dirty = False
        self._stopped = False
        self._proxy_lock = asyncio.Lock()
        self._restore()

    # ------------------------------------------------------------------ persistence
    def _restore(self) -> None:
        blob = kv._internal_kv_get(KV_KEY, namespace=NAMESPACE)
        if blob is None:
            return
        saved = cloudpickle.loads(blob)
        for name, app in saved["apps"].items():
            deps = {}
            for dname, d in app["deployments"].items():
                st = DeploymentState(d["spec"], d["target"], self._changed)
                st.update(d["spec"])
                st.target = d["target"]
                for rid, (actor_name, version, *rest) in d["replicas"].items():
                    # its placement group (placement_group_bundles) is found again by its name
                    pg = find_replica_group(actor_name) if d["spec"].config.placement_group_bundles else None
                    try:
                        h = ember.get_actor(actor_name, namespace=NAMESPACE)
                    except Exception:  # gone while the controller was down: the reconciler replaces it
                        if pg is not None:
                            remove_replica_group(pg, actor_name)
                        continue
                    st.replicas[rid] = Replica(rid, actor_name, version, RUNNING, time.monotonic(), h, pg=pg,
                                               node_id=rest[0] if rest else None)
                deps[dname] = st
            self.apps[name] = {"route_prefix": app["route_prefix"], "ingress": app["ingress"], "deployments": deps,
                               "config": app.get("config"), "deployed_at": app.get("deployed_at", 0.0)}
        self.proxy_opts = saved.get("proxy")
        log.info("controller restored %d application(s) from the GCS KV", len(self.apps))
        threading.Thread(target=_kick, name="serve-controller-kick", daemon=True).start()

    def _persist(self) -> None:
        state = {"apps": {
            name: {"route_prefix": a["route_prefix"], "ingress": a["ingress"], "config": a.get("config"),
                   "deployed_at": a.get("deployed_at", 0.0), "deployments": {
                dn: {"spec": st.spec, "target": st.target,
                     "replicas": {r.replica_id: (r.actor_name, r.version, r.node_id)
                                  for r in st.replicas.values()}}
                for dn, st in a["deployments"].items()}}
            for name, a in self.apps.items()}, "proxy": self.proxy_opts}
        kv._internal_kv_put(KV_KEY, cloudpickle.dumps(state), overwrite=True, namespace=NAMESPACE)

    # ------------------------------------------------------------------ loop
    def _ensure_started(self) -> None:
        if self._loop_task is None:
            self._cond = asyncio.Condition()
            self._loop_task = asyncio.ensure_future(self._run())
            if self.proxy_opts is not None and self.proxy is None:
                asyncio.ensure_future(self._restart_proxy(dict(self.proxy_opts)))

    async def _restart_proxy(self, opts: dict[str, Any]) -> None:
        """Brings the proxy back on its old port. The previous controller's proxy may still hold
        that port for a moment while it stops (it dies with its parent), so wait (up to
        PROXY_PORT_WAIT_S) until the port can be bound before starting one: a proxy started
        on a busy port would only exit saying so, again and again."""
        deadline = time.monotonic() + PROXY_PORT_WAIT_S
        warned = False
        while True:
            try:
                if not _port_free(opts["host"], opts["port"]):
                    if not warned:
                        log.warning("the HTTP proxy's port %s on %s is still in use (%s): waiting up to "
                                    "%g s for it", opts["port"], opts["host"], _holder(opts["port"]),
                                    PROXY_PORT_WAIT_S)
                        warned = True
                    raise OSError(f"port {opts['port']} on {opts['host']} is still in use")
                async with self._proxy_lock:
                    if self.proxy is None or self.proxy.poll() is not None:
                        await self._start_proxy(**opts)
                return
            except Exception as e:
                if time.monotonic() > deadline or self._stopped:
                    log.warning("could not restart the HTTP proxy: %s", e)
                    return
                await asyncio.sleep(0.2)

    def _changed(self) -> None:
        self.version += 1
        if self._cond is not None:
            asyncio.ensure_future(self._notify())
        self._dirty = True

    async def _notify(self) -> None:
        assert self._cond is not None
        async with self._cond:
            self._cond.notify_all()

    async def _run(self) -> None:
        while not self._stopped:
            try:
                now = time.monotonic()
                for app_name, app in list(self.apps.items()):
                    for dname, st in list(app["deployments"].items()):
                        st.tick(now)
                        if st.deleting and not st.replicas and not app.get("deleting"):
                            del app["deployments"][dname]  # removed by a redeploy, now drained
                            self._changed()
                    if app.get("deleting") and not any(st.replicas for st in app["deployments"].values()):
                        del self.apps[app_name]
                        self._changed()
                if self._dirty:
                    self._dirty = False
                    self._persist()
            except Exception:
                log.exception("serve control loop")
            await asyncio.sleep(TICK_S)

    # ------------------------------------------------------------------ API for serve.* and routers
    async def ping(self) -> int:
        self._ensure_started()
        return os.getpid()

    async def deploy_app(self, name: str, route_prefix: str | None, ingress: str,
                         specs: list[DeploymentSpec], app_config: dict[str, Any] | None = None) -> None:
        """Deploys or updates an application; app_config is the config it came from (a declarative
        deploy: `serve config` shows it), None for `serve.run`."""
        self._ensure_started()
        for other, a in self.apps.items():
            if other != name and route_prefix is not None and a["route_prefix"] == route_prefix \
                    and not a.get("deleting"):
                raise ValueError(f"route_prefix {route_prefix!r} is already used by application {other!r}")
        app = self.apps.get(name)
        if app is None:
            app = {"route_prefix": route_prefix, "ingress": ingress, "deployments": {}}
            self.apps[name] = app
        app["deleting"] = False  # a redeploy while it was being deleted takes its replicas back
        app["route_prefix"], app["ingress"] = route_prefix, ingress
        app["config"], app["deployed_at"] = app_config, time.time()
        deps: dict[str, DeploymentState] = app["deployments"]
        wanted = {s.name for s in specs}
        for s in specs:
            st = deps.get(s.name)
            if st is None:
                st = DeploymentState(s, s.config.initial_target(), self._changed)
                st.update(s)
                deps[s.name] = st
            else:
                st.deleting = False
                st.update(s)
        for dname, st in deps.items():
            if dname not in wanted:
                st.deleting = True
        self._changed()

    async def delete_app(self, name: str) -> None:
        self._ensure_started()
        app = self.apps.get(name)
        if app is None:
            return
        app["deleting"] = True
        for st in app["deployments"].values():
            st.deleting = True
        self._changed()

    async def status(self) -> dict[str, Any]:
        self._ensure_started()
        out = {}
        for name, app in self.apps.items():
            deps = {}
            for dname, st in app["deployments"].items():
                deps[dname] = st.describe()
            statuses = {d["status"] for d in deps.values()}
            status = ("DELETING" if app.get("deleting") else "DEPLOY_FAILED" if "DEPLOY_FAILED" in statuses
                      else "RUNNING" if statuses <= {"HEALTHY"} else "DEPLOYING")
            msg = "; ".join(d["message"] for d in deps.values() if d["message"])
            out[name] = {"status": status, "message": msg, "route_prefix": app["route_prefix"],
                         "deployments": deps, "ingress": app["ingress"], "config": app.get("config"),
                         "last_deployed_time_s": app.get("deployed_at", 0.0)}
        return out

    def _snapshot(self) -> dict[str, Any]:
        apps, deps = {}, {}
        for name, app in self.apps.items():
            if not app.get("deleting"):
                apps[name] = {"route_prefix": app["route_prefix"], "ingress": f"{name}#{app['ingress']}"}
            for st in app["deployments"].values():
                c = st.spec.config
                handles = st.running_handles()
                deps[st.dep_id] = {"max_ongoing": c.max_ongoing_requests, "max_queued": c.max_queued_requests,
                                   "replicas": handles,
                                   "models": {rid: list(ids) for rid, ids in st.models.items() if rid in handles}}
        return {"version": self.version, "apps": apps, "deployments": deps}

    async def listen(self, after_version: int, timeout_s: float = 30.0) -> dict[str, Any]:
        """Long poll: returns the routing snapshot once its version is above after_version."""
        self._ensure_started()
        assert self._cond is not None
        if self.version <= after_version:
            async with self._cond:
                try:
                    await asyncio.wait_for(self._cond.wait_for(lambda: self.version > after_version), timeout_s)
                except asyncio.TimeoutError:
                    pass
        return self._snapshot()

    async def record_model_ids(self, dep_id: str, replica_id: str, model_ids: list[str]) -> None:
        """A replica's multiplexed models (loaded or loading) changed: routers learn it from the
        next snapshot and prefer that replica for those ids. Not persisted (a restarted
        controller learns them again from the replicas' next change)."""
        app, _, dname = dep_id.partition("#")
        st = self.apps.get(app, {}).get("deployments", {}).get(dname)
        if st is None or replica_id not in st.replicas:
            return
        for rid in [r for r in st.models if r not in st.replicas]:  # replicas gone since
            del st.models[rid]
        ids = tuple(sorted(model_ids))
        if st.models.get(replica_id, ()) != ids:
            st.models[replica_id] = ids
            self.version += 1  # (a routing change only: nothing to persist)
            if self._cond is not None:
                await self._notify()

    async def record_demand(self, dep_id: str, router_id: str, queued: int) -> None:
        """A router has requests queued (no replica with room, or none at all: scale from zero);
        autoscaling adds them to the replicas' ongoing requests. 0 clears the report."""
        app, _, dname = dep_id.partition("#")
        st = self.apps.get(app, {}).get("deployments", {}).get(dname)
        if st is not None:
            if queued > 0:
                st.demand[router_id] = (time.monotonic(), queued)
            else:
                st.demand.pop(router_id, None)

    # ------------------------------------------------------------------ HTTP proxy
    async def start_proxy(self, host: str, port: int, limits: dict[str, Any] | None = None) -> int:
        """Starts the embedded proxy (once); returns its port. limits: HTTPOptions' limits, by
        ServeProxySettings field name (passed to the proxy as flags)."""
        self._ensure_started()
        async with self._proxy_lock:
            if self.proxy is not None and self.proxy.poll() is None:
                return self.proxy_port
            return await self._start_proxy(host, port, limits)

    async def _start_proxy(self, host: str, port: int, limits: dict[str, Any] | None = None) -> int:
        gcs_address = ember.get_runtime_context().gcs_address
        fd, port_file = tempfile.mkstemp(prefix="ember-serve-proxy-", suffix=".port")
        os.close(fd)
        os.unlink(port_file)
        cmd = [sys.executable, "-m", "ember_serve_proxy", "--gcs-address", gcs_address, "--host", host,
               "--port", str(port), "--port-file", port_file, "--die-with-parent"]
        for name, value in (limits or {}).items():
            cmd += ["--" + name.replace("_", "-"), str(value)]
        self.proxy = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if os.path.exists(port_file):
                with open(port_file) as f:
                    text = f.read().strip()
                if text:
                    os.unlink(port_file)
                    self.proxy_port = int(text)
                    self.proxy_opts = {"host": host, "port": self.proxy_port, "limits": dict(limits or {})}
                    self._persist()
                    return self.proxy_port
            if self.proxy.poll() is not None:
                raise RuntimeError(f"the Serve HTTP proxy exited with code {self.proxy.returncode} "
                                   f"(is port {port} on {host} already in use?)")
            await asyncio.sleep(0.02)
        self._stop_proxy(grace_s=2)  # never left behind holding the port
        raise RuntimeError("the Serve HTTP proxy did not start within 60 s")

    def _stop_proxy(self, grace_s: float = 10) -> None:
        """Ends the proxy process (SIGTERM, then SIGKILL after grace_s)."""
        if self.proxy is not None and self.proxy.poll() is None:
            self.proxy.terminate()
            try:
                self.proxy.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.proxy.kill()
                self.proxy.wait()

    async def shutdown(self) -> None:
        """Stops every application and the proxy; waits (bounded) for replicas to go."""
        self._ensure_started()
        for name in list(self.apps):
            await self.delete_app(name)
        deadline = time.monotonic() + 30
        while self.apps and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        self._stop_proxy()
        self.proxy = None
        self.proxy_opts = None
        self._stopped = True
        kv._internal_kv_del(KV_KEY, namespace=NAMESPACE)
