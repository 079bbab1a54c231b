"""Routers: the I/O around RouterCore. A RouteTable long-polls the controller for the routing
snapshot (apps → ingress deployment, deployment → replica handles and limits) and keeps one
Router per deployment; Router.acquire(model_id=...) hands out a replica (queueing while all are
at max_ongoing_requests, failing past max_queued_requests), preferring one that holds the
requested multiplexed model (the snapshot carries what each replica reported). Used on one
event loop: the proxy's, or the handle runtime's background loop in any other process.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import uuid
from typing import Any

import ember
from ember.serve.exceptions import BackPressureError

from .router_core import RouterCore

log = logging.getLogger(__name__)


class Router:
    """Replica choice for one deployment, on one event loop."""

    def __init__(self, dep_id: str, table: RouteTable) -> None:
        self.dep_id = dep_id
        self.table = table
        self.core: RouterCore[str] = RouterCore()
        self.handles: dict[str, Any] = {}
        # Queued requests in arrival order: (future, model id, matching deadline).
        self.waiters: collections.deque[tuple[asyncio.Future[str], str, float]] = collections.deque()
        self.router_id = uuid.uuid4().hex[:8]
        self._reporter: asyncio.Task[None] | None = None

    def update(self, info: dict[str, Any]) -> None:
        self.core.max_ongoing = info["max_ongoing"]
        self.core.max_queued = info["max_queued"]
        self.handles = dict(info["replicas"])
        self.core.set_replicas(list(self.handles))
        self.core.set_models(info.get("models", {}))
        self._wake()

    def _wake(self) -> None:
        """Hands replicas to waiting requests in arrival order; one waiting for its model's
        holders does not hold up the requests behind it."""
        kept: collections.deque[tuple[asyncio.Future[str], str, float]] = collections.deque()
        while self.waiters and self.core.has_room():
            f, model_id, deadline = self.waiters.popleft()
            if f.done():
                continue
            k = self.core.choose(model_id, deadline)
            if k is None:
                kept.append((f, model_id, deadline))
            else:
                f.set_result(k)
        kept.extend(self.waiters)
        self.waiters = kept

    async def acquire(self, timeout_s: float | None = None, model_id: str = "") -> tuple[str, Any]:
        """A replica with room: (key, actor handle), one holding model_id when one with room
        does (waiting up to the matching deadline for one). Release it with release(key)."""
        k = self.core.choose(model_id) if not self.waiters else None
        if k is not None:
            return k, self.handles[k]
        if not self.core.can_queue():
            raise BackPressureError(f"deployment {self.dep_id} has {self.core.queued} queued requests "
                                    f"(max_queued_requests={self.core.max_queued})")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[str] = loop.create_future()
        deadline = self.core.matching_deadline()
        self.waiters.append((fut, model_id, deadline))
        self.core.queued += 1
        if model_id:  # past its deadline it may go to any replica with room
            loop.call_later(max(deadline - self.core.now(), 0.0), self._wake)
        self._wake()
        if self._reporter is None or self._reporter.done():
            self._reporter = asyncio.ensure_future(self._report_demand())
        try:
            k = await asyncio.wait_for(fut, timeout_s)
        except BaseException:
            if fut.done() and not fut.cancelled():
                self.release(fut.result())
            raise
        finally:
            self.core.queued -= 1
        return k, self.handles[k]

    async def _report_demand(self) -> None:
        """While requests wait here (every replica full, or none yet: a cold start), tell the
        controller how many, so that autoscaling counts them."""
        last = -1
        while last != 0:
            last = self.core.queued
            try:
                c = await self.table.controller()
                await c.record_demand.remote(self.dep_id, self.router_id, last)
            except Exception as e:
                log.debug("record_demand: %s", e)
            await asyncio.sleep(0.25)

    def release(self, k: str) -> None:
        self.core.release(k)
        if self.waiters:
            self._wake()

    def drop(self, k: str) -> None:
        """The replica failed a call: stop routing to it until the next snapshot says otherwise."""
        self.handles.pop(k, None)
        self.core.set_replicas(list(self.handles))


class RouteTable:
    """The routing snapshot of this process, kept fresh by a long poll on the controller."""

    def __init__(self) -> None:
        self.version = -1
        self.apps: dict[str, dict[str, Any]] = {}
        self.routers: dict[str, Router] = {}
        self.prefixes: list[tuple[str, str]] = []  # (prefix, app) longest first
        self._controller: Any = None
        self._task: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()

    async def controller(self) -> Any:
        while self._controller is None:
            if not ember.is_initialized():  # never let a background lookup start a cluster
                raise RuntimeError("ember is not initialized")
            try:
                self._controller = await asyncio.to_thread(ember.get_actor, "SERVE_CONTROLLER", namespace="serve")
            except ValueError:
                await asyncio.sleep(0.2)
        return self._controller

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._watch())

    async def _watch(self) -> None:
        delay = 0.1
        while True:
            try:
                c = await self.controller()
                snap = await c.listen.remote(self.version, 30.0)
                self.apply(snap)
                delay = 0.1
            except asyncio.CancelledError:
                raise
            except Exception as e:  # controller restarting: look it up again
                if not ember.is_initialized():
                    return
                log.debug("route watch: %s", e)
                self._controller = None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    def apply(self, snap: dict[str, Any]) -> None:
        self.version = snap["version"]
        self.apps = snap["apps"]
        for dep_id, info in snap["deployments"].items():
            self.router(dep_id).update(info)
        for dep_id in list(self.routers):
            if dep_id not in snap["deployments"]:
                self.routers[dep_id].update({"max_ongoing": 1, "max_queued": 0, "replicas": {}})
        prefixes = [(a["route_prefix"], name) for name, a in self.apps.items() if a["route_prefix"] is not None]
        self.prefixes = sorted(prefixes, key=lambda p: -len(p[0]))
        self.ready.set()

    def router(self, dep_id: str) -> Router:
        r = self.routers.get(dep_id)
        if r is None:
            r = self.routers[dep_id] = Router(dep_id, self)
        return r

    def match(self, path: str) -> tuple[str, str] | None:
        """(route_prefix, app name) of the longest prefix matching the path."""
        for prefix, app in self.prefixes:
            if prefix == "/" or path == prefix or path.startswith(prefix.rstrip("/") + "/"):
                return prefix, app
        return None

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
