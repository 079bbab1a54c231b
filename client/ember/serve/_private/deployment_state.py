"""One deployment's live state inside the controller: its replicas (actors), health checks,
autoscaling and the rolling-update steps decided by `reconcile.reconcile`."""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

import ember
from ember.serve.config import DeploymentConfig
from ember.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from .autoscaling import AutoscalingPolicy
from .placement import choose_node, replica_request
from .placement_runtime import alive_nodes, remove_replica_group, replica_placement_group
from .reconcile import RUNNING, STARTING, STOPPING, ReplicaView, reconcile
from .replica import ServeReplica

log = logging.getLogger(__name__)
NAMESPACE = "serve"
MAX_START_FAILURES = 3


@dataclass
class Replica:
    replica_id: str
    actor_name: str
    version: str
    state: str
    started_at: float
    handle: Any = None
    ongoing: int = 0
    task: asyncio.Task[None] | None = None
    pg: Any = None  # its placement group (placement_group_bundles), removed when it stops
    node_id: str | None = None  # the node it is pinned to (max_replicas_per_node)


@dataclass
class DeploymentSpec:
    """What the driver sent: the code, its arguments and its config."""

    app: str
    name: str
    serialized_def: bytes
    init_args: tuple[Any, ...]
    init_kwargs: dict[str, Any]
    config: DeploymentConfig
    version: str
    # The deploying driver's import paths (script dir, cwd): replicas add them before loading the
    # class, so deployments defined in modules next to the driver's script import as on Ray.
    import_paths: tuple[str, ...] = ()


@dataclass
class DeploymentState:
    spec: DeploymentSpec
    target: int
    on_change: Callable[[], None]
    replicas: dict[str, Replica] = field(default_factory=dict)
    policy: AutoscalingPolicy | None = None
    failures: int = 0
    # replica id → the multiplexed model ids it reported (loaded or loading), for the routers
    models: dict[str, tuple[str, ...]] = field(default_factory=dict)
    message: str = ""
    deleting: bool = False
    demand: dict[str, tuple[float, int]] = field(default_factory=dict)
    _next_health: float = 0.0
    _retry_after: float = 0.0

    @property
    def dep_id(self) -> str:
        return f"{self.spec.app}#{self.spec.name}"

    def update(self, spec: DeploymentSpec) -> None:
        """A redeploy: new code/config. Replicas of another version are replaced by a rolling update;
        a user_config change alone is applied in place."""
        old = self.spec
        self.spec = spec
        cfg = spec.config
        if cfg.autoscaling_config is not None:
            if self.policy is None or self.policy.config != cfg.autoscaling_config:
                self.policy = AutoscalingPolicy(cfg.autoscaling_config)
                self.target = max(cfg.autoscaling_config.min_replicas,
                                  min(cfg.autoscaling_config.max_replicas, self.target))
        else:
            self.policy = None
            self.target = cfg.initial_target()
        self.failures, self.message = 0, ""
        if old.version == spec.version and old.config.user_config != cfg.user_config:
            for r in self.replicas.values():
                if r.state == RUNNING and r.handle is not None:
                    asyncio.ensure_future(self._reconfigure(r, cfg.user_config))

    async def _reconfigure(self, r: Replica, user_config: Any) -> None:
        try:
            await r.handle.reconfigure.remote(user_config)
        except Exception as e:
            log.warning("reconfigure of %s failed: %s", r.replica_id, e)

    def status(self) -> str:
        running = sum(1 for r in self.replicas.values() if r.state == RUNNING and r.version == self.spec.version)
        if self.failures >= MAX_START_FAILURES:
            return "DEPLOY_FAILED"
        if running >= self.target and not any(r.version != self.spec.version and r.state != STOPPING
                                              for r in self.replicas.values()):
            return "HEALTHY"
        return "UPDATING"

    def describe(self) -> dict[str, Any]:
        """Status, replica counts by state, the replicas and the config in effect (for status())."""
        counts: dict[str, int] = {}
        for r in self.replicas.values():
            counts[r.state] = counts.get(r.state, 0) + 1
        c = self.spec.config
        cfg = {"name": self.spec.name, "num_replicas": c.num_replicas, "max_ongoing_requests": c.max_ongoing_requests,
               "max_queued_requests": c.max_queued_requests, "user_config": c.user_config,
               "autoscaling_config": dataclasses.asdict(c.autoscaling_config) if c.autoscaling_config else None,
               "graceful_shutdown_wait_loop_s": c.graceful_shutdown_wait_loop_s,
               "graceful_shutdown_timeout_s": c.graceful_shutdown_timeout_s,
               "health_check_period_s": c.health_check_period_s, "health_check_timeout_s": c.health_check_timeout_s,
               "ray_actor_options": dict(c.ray_actor_options),
               "placement_group_bundles": c.placement_group_bundles,
               "placement_group_strategy": c.placement_group_strategy,
               "max_replicas_per_node": c.max_replicas_per_node}
        return {"status": self.status(), "message": self.message, "replica_states": counts, "target": self.target,
                "replicas": [(r.replica_id, r.state, r.actor_name) for r in self.replicas.values()],
                "deployment_config": {k: v for k, v in cfg.items() if v is not None or k == "user_config"}}

    def total_ongoing(self, now: float) -> int:
        queued = sum(n for t, n in self.demand.values() if now - t < 1.0)
        return sum(r.ongoing for r in self.replicas.values() if r.state == RUNNING) + queued

    # ------------------------------------------------------------------ control tick
    def tick(self, now: float) -> None:
        """One reconciliation step: autoscale, then start/stop replicas towards the target."""
        if self.policy is not None and not self.deleting:
            new_target = self.policy.decide(now, self.target, self.total_ongoing(now))
            if new_target != self.target:
                log.info("autoscaling %s: %d -> %d replicas", self.dep_id, self.target, new_target)
                self.target = new_target
        target = 0 if self.deleting else self.target
        views = [ReplicaView(r.replica_id, r.version, r.state, r.started_at) for r in self.replicas.values()]
        d = reconcile(self.spec.version, target, views, now)
        for rid in d.stop:
            self.stop_replica(rid)
        if d.start and now >= self._retry_after and self.failures < MAX_START_FAILURES:
            for _ in range(d.start):
                if self.start_replica(now) is None:
                    break
        if now >= self._next_health:
            self._next_health = now + self._health_period()
            for r in list(self.replicas.values()):
                if r.state == RUNNING and (r.task is None or r.task.done()):
                    r.task = asyncio.ensure_future(self._check(r))

    def _health_period(self) -> float:
        p = self.spec.config.health_check_period_s
        if self.policy is not None:
            p = min(p, self.policy.config.metrics_interval_s, 0.5)
        return max(0.05, p)

    def start_replica(self, now: float) -> Replica | None:
        """Starts one replica (of the current version); None when max_replicas_per_node leaves
        no node with room for it now (the next tick tries again)."""
        rid = uuid.uuid4().hex[:8]
        name = f"SERVE_REPLICA::{self.dep_id}#{rid}"
        s = self.spec
        opts = dict(s.config.ray_actor_options)  # num_cpus is always set (1 unless given)
        pg, node_id = None, None
        if s.config.placement_group_bundles is not None:
            try:
                pg = replica_placement_group(s.config, name)
            except Exception as e:  # refused by the GCS (e.g. a bundle no node could ever hold)
                self._start_failed(f"the placement group of replica {rid} of {self.dep_id} was refused: {e}")
                return None
            opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=0, placement_group_capture_child_tasks=True)
        elif s.config.max_replicas_per_node is not None:
            node_id = self._pick_node()
            if node_id is None:
                self.message = (f"no node has room for another replica of {self.dep_id} "
                                f"(max_replicas_per_node={s.config.max_replicas_per_node})")
                return None
            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=False)
        cls = ember.remote(ServeReplica).options(
            name=name, namespace=NAMESPACE, lifetime="detached", max_restarts=0,
            max_concurrency=max(1000, s.config.max_ongoing_requests * 2), **opts)
        handle = cls.remote(s.app, s.name, rid, s.serialized_def, s.init_args, s.init_kwargs, s.config.user_config,
                            s.import_paths)
        r = Replica(rid, name, s.version, STARTING, now, handle, pg=pg, node_id=node_id)
        self.replicas[rid] = r
        r.task = asyncio.ensure_future(self._wait_ready(r))
        return r

    async def _wait_ready(self, r: Replica) -> None:
        try:
            await r.handle.ready.remote()
        except Exception as e:
            self._start_failed(f"replica {r.replica_id} of {self.dep_id} failed to start: {e}")
            self.replicas.pop(r.replica_id, None)
            self._kill(r)
            self.on_change()
            return
        if r.state == STARTING:
            r.state = RUNNING
            self.failures = 0
            self.message = ""
            self.on_change()

    def _start_failed(self, message: str) -> None:
        self.failures += 1
        self.message = message
        log.warning("%s", message)
        self._retry_after = time.monotonic() + min(5.0, 0.5 * 2 ** self.failures)

    async def _check(self, r: Replica) -> None:
        timeout = self.spec.config.health_check_timeout_s
        try:
            r.ongoing = await asyncio.wait_for(asyncio.wrap_future(r.handle.check_health.remote().future()), timeout)
        except Exception as e:
            if r.state != RUNNING:
                return
            log.warning("replica %s of %s is unhealthy, replacing it: %s", r.replica_id, self.dep_id, e)
            self.replicas.pop(r.replica_id, None)
            self._kill(r)
            self.on_change()

    def stop_replica(self, rid: str) -> None:
        r = self.replicas.get(rid)
        if r is None or r.state == STOPPING:
            return
        was_running = r.state == RUNNING
        r.state = STOPPING
        if r.task is not None and not r.task.done():
            r.task.cancel()
        self.on_change()  # routers drop it now; in-flight requests finish below
        r.task = asyncio.ensure_future(self._drain_and_kill(r, was_running))

    async def _drain_and_kill(self, r: Replica, was_running: bool) -> None:
        cfg = self.spec.config
        try:
            if was_running:
                await asyncio.sleep(min(cfg.graceful_shutdown_wait_loop_s, 0.5))  # routers catch up
                await asyncio.wait_for(asyncio.wrap_future(
                    r.handle.drain.remote(cfg.graceful_shutdown_timeout_s).future()),
                    cfg.graceful_shutdown_timeout_s + 5)
        except Exception as e:
            log.debug("drain of %s: %s", r.replica_id, e)
        finally:
            self._kill(r)
            self.replicas.pop(r.replica_id, None)
            self.on_change()

    def _pick_node(self) -> str | None:
        cfg = self.spec.config
        assert cfg.max_replicas_per_node is not None
        on: dict[str, int] = {}
        for r in self.replicas.values():
            if r.node_id is not None and r.state != STOPPING:
                on[r.node_id] = on.get(r.node_id, 0) + 1
        return choose_node(alive_nodes(), on, cfg.max_replicas_per_node, replica_request(cfg.ray_actor_options))

    @staticmethod
    def _kill(r: Replica) -> None:
        try:
            ember.kill(r.handle, no_restart=True)
        except Exception as e:
            log.debug("kill %s: %s", r.actor_name, e)
        if r.pg is not None:
            remove_replica_group(r.pg, r.actor_name)
            r.pg = None

    def running_handles(self) -> dict[str, Any]:
        return {r.replica_id: r.handle for r in self.replicas.values() if r.state == RUNNING}
