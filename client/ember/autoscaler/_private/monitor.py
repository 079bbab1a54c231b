"""The autoscaler's loop (Ray's StandardAutoscaler + monitor, in one class): every
`update_interval_s` it reads the cluster's demand from the GCS (GetClusterResourceState), the
provider's nodes, asks the policy (policy.py) what to launch and terminate, and carries that out
through the provider on launcher threads. Its state — launches in flight, recent failures,
demand no node type can hold — goes to the internal KV (namespace "autoscaler", key "status")
for `ember status` (status.py).

A provider node matches a GCS node by node id, else by IP; one that matches none is still
launching, and fails (is terminated, a failure recorded) after `launch_timeout_s`. Before a node
is removed its raylet is asked that nothing is leased or waiting there now (the load report may
be a period old). A node being terminated is out of the policy's view until its provider
forgets it.
"""
from __future__ import annotations

import collections
import json
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Callable

from ember_common.autoscaler_client import KV_NAMESPACE, STATUS_KEY
from ember_common.proto import autoscaler_pb2

from .config import ClusterConfig
from .policy import Decision, Demand, Node, PendingGroup, Policy
from .providers.base import LaunchError, NodeProvider, ProviderNode

log = logging.getLogger("ember.autoscaler")

State = autoscaler_pb2.GetClusterResourceStateReply
MAX_FAILURES = 20


def _expand(demands: Any) -> list[dict[str, float]]:
    return [dict(d.resources) for d in demands for _ in range(d.count)]


def demand_of(state: State) -> Demand:
    """The policy's demand from the GCS's reply."""
    shapes = [s for n in state.nodes for s in _expand(n.queued) + _expand(n.infeasible)]
    groups = [PendingGroup(g.strategy, _expand(g.bundles)) for g in state.pending_placement_groups]
    return Demand(shapes=shapes, groups=groups, requested=_expand(state.requested))


class Autoscaler:
    """One cluster's autoscaler. `update()` is one round; `run()` loops until stopped."""

    def __init__(self, config: ClusterConfig, provider: NodeProvider, *,
                 fetch_state: Callable[[], State], publish: Callable[[bytes], None],
                 has_objects: Callable[[str], bool], still_idle: Callable[[str], bool] = lambda addr: True,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.config = config
        self.provider = provider
        self.fetch_state = fetch_state
        self.publish = publish
        self.has_objects = has_objects  # objmgr address -> primary copies live there
        self.still_idle = still_idle  # raylet address -> nothing leased or queued there right now
        self.clock, self.wall = clock, wall
        self.policy = Policy(config.node_types(), max_workers=config.max_workers,
                             idle_timeout_s=config.idle_timeout_s, upscaling_speed=config.upscaling_speed)
        self._lock = threading.Lock()
        self._launching: dict[int, tuple[str, float]] = {}  # launch number -> (type, wall since)
        self._next = 0
        self._unjoined: dict[str, tuple[float, str]] = {}  # provider id -> (clock first seen unjoined, type)
        self._terminating: set[str] = set()
        self.failures: collections.deque[dict[str, Any]] = collections.deque(maxlen=MAX_FAILURES)
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="ember-autoscaler")
        self._inflight: set[Future[None]] = set()
        self.last: Decision | None = None

    # ------------------------------------------------------------------ one round
    def update(self) -> Decision:
        """Reads the cluster, decides, launches and terminates; returns the decision."""
        state = self.fetch_state()
        listed = self.provider.non_terminated_nodes()
        ids = {p.provider_id for p in listed}
        self._terminating &= ids
        for gone in [pid for pid in self._unjoined if pid not in ids]:  # vanished before joining
            del self._unjoined[gone]
        nodes, by_node = self._view(state, listed)
        d = self.policy.decide(nodes, demand_of(state))
        for name, n in sorted(d.launch.items()):
            log.info("adding %d node(s) of type %s", n, name)
            for _ in range(n):
                self._launch(name)
        raylets = {n.node_id: n.raylet_address for n in state.nodes}
        for t in list(d.terminate):
            p = by_node[t.node_id]
            if not self.still_idle(raylets[t.node_id]):  # work landed since its last report
                d.terminate.remove(t)
                continue
            log.info("removing node %s (%s): %s", t.node_id[:12], p.node_type, t.why)
            self._terminating.add(p.provider_id)
            self._submit(self._terminate, p)
        self.last = d
        self.publish(self.status(d, {nid: p.node_type for nid, p in by_node.items()}))
        return d

    def _view(self, state: State, pnodes: list[ProviderNode]) -> tuple[list[Node], dict[str, ProviderNode]]:
        """The policy's nodes: the GCS's (typed when a provider node matches; those being
        terminated left out) and the launching ones; launches that never joined are failed here."""
        ips: dict[str, list[str]] = collections.defaultdict(list)
        for n in state.nodes:
            ips[n.raylet_address.rsplit(":", 1)[0]].append(n.node_id)
        gcs_ids = {n.node_id for n in state.nodes}
        by_node: dict[str, ProviderNode] = {}
        unjoined = []
        for p in pnodes:
            nid = p.node_id if p.node_id in gcs_ids else (
                ips[p.ip][0] if not p.node_id and len(ips.get(p.ip, [])) == 1 else "")
            if nid:
                by_node[nid] = p
                self._unjoined.pop(p.provider_id, None)
            else:
                unjoined.append(p)
        now = self.clock()
        out: list[Node] = []
        for n in state.nodes:
            joined = by_node.get(n.node_id)
            if joined is not None and joined.provider_id in self._terminating:
                continue
            busy = not n.reported or n.leased > 0 or bool(n.queued) or bool(n.infeasible)
            idle_s = 0.0 if busy else n.idle_duration_s
            objects = (joined is not None and not busy and idle_s >= self.config.idle_timeout_s
                       and self.has_objects(n.objmgr_address))
            out.append(Node(n.node_id, joined.node_type if joined is not None else "", dict(n.total_resources),
                            dict(n.available_resources), idle_s=idle_s, busy=busy, has_objects=objects))
        for p in unjoined:
            if p.provider_id in self._terminating:
                continue
            since = self._unjoined.setdefault(p.provider_id, (now, p.node_type))[0]
            if now - since > self.config.launch_timeout_s:
                self._fail(p.node_type, f"node {p.provider_id} did not join the cluster within "
                                        f"{self.config.launch_timeout_s:g}s")
                self._unjoined.pop(p.provider_id, None)
                self._terminating.add(p.provider_id)
                self._submit(self._terminate, p)
                continue
            out.append(self._launching_node(p.provider_id, p.node_type))
        with self._lock:
            out += [self._launching_node(f"launch-{i}", t) for i, (t, _) in self._launching.items()]
        return out, by_node

    def _launching_node(self, node_id: str, node_type: str) -> Node:
        t = self.config.types.get(node_type)
        res = dict(t.resources) if t is not None else {}
        return Node(node_id, node_type, res, dict(res), launching=True)

    # ------------------------------------------------------------------ actions (threads)
    def _launch(self, name: str) -> None:
        with self._lock:
            n, self._next = self._next, self._next + 1
            self._launching[n] = (name, self.wall())
        self._submit(self._create, n, name)

    def _submit(self, fn: Callable[..., None], *args: Any) -> None:
        f = self._pool.submit(fn, *args)
        self._inflight.add(f)
        f.add_done_callback(self._inflight.discard)

    def settle(self, timeout_s: float = 60.0) -> None:
        """Waits for the launches and terminations in flight."""
        wait(list(self._inflight), timeout=timeout_s)

    def _create(self, n: int, name: str) -> None:
        t = self.config.types[name]
        try:
            self.provider.create_node(name, dict(t.resources), dict(t.node_config))
        except LaunchError as e:
            self._fail(name, str(e))
        except Exception as e:  # a provider bug must not stop the loop
            log.exception("launching a %s node failed", name)
            self._fail(name, f"{type(e).__name__}: {e}")
        finally:
            with self._lock:
                self._launching.pop(n, None)

    def _terminate(self, p: ProviderNode) -> None:
        try:
            self.provider.terminate_node(p.provider_id)
        except Exception as e:
            log.exception("terminating node %s failed", p.provider_id)
            self._fail(p.node_type, f"terminating {p.provider_id}: {type(e).__name__}: {e}")

    def _fail(self, node_type: str, message: str) -> None:
        log.warning("node of type %s failed: %s", node_type, message)
        with self._lock:
            self.failures.append({"node_type": node_type, "time": self.wall(), "message": message})

    # ------------------------------------------------------------------ state for `ember status`
    def status(self, d: Decision, node_types: dict[str, str]) -> bytes:
        """The JSON `ember status` shows: launches in flight, recent failures, infeasible demand,
        the node type of each node it manages."""
        with self._lock:
            pending = [{"node_type": t, "since": s, "state": "launching"} for t, s in self._launching.values()]
            failures = list(self.failures)
        now, wall = self.clock(), self.wall()
        pending += [{"node_type": t, "provider_id": pid, "since": wall - (now - since),
                     "state": "waiting to join"} for pid, (since, t) in self._unjoined.items()]
        return json.dumps({"time": wall, "cluster_name": self.config.cluster_name,
                           "pending_launches": pending, "recent_failures": failures,
                           "infeasible": d.infeasible, "terminating": sorted(self._terminating),
                           "node_types": node_types, "head_node_type": self.config.head_node_type,
                           "idle_timeout_s": self.config.idle_timeout_s}).encode()

    def run(self, stop: threading.Event) -> None:
        """Rounds every update_interval_s until stop; a failed round is logged and retried."""
        while not stop.is_set():
            try:
                self.update()
            except Exception as e:  # the GCS restarting, a provider hiccup: the next round
                log.warning("autoscaler round failed: %s: %s", type(e).__name__, e)
            stop.wait(self.config.update_interval_s)

    def close(self) -> None:
        """Waits for launches and terminations in flight, then closes the provider."""
        self._pool.shutdown(wait=True)
        self.provider.close()
        log.info("autoscaler stopped")


def _kv_publisher(address: str) -> Callable[[bytes], None]:
    from ember_common import backoff
    from ember_common.gcs_client import SyncGcsClient

    client = SyncGcsClient(address, retry=backoff.NO_RETRY, timeout_s=5)

    def publish(blob: bytes) -> None:
        client.internal_kv_put(KV_NAMESPACE, STATUS_KEY, blob, True)
    return publish


def _has_objects(objmgr_address: str) -> bool:
    """Whether a node's object store holds objects (in memory or spilled); True when it cannot
    be asked (keep the node rather than lose objects)."""
    import grpc

    from ember_common import rpc
    from ember_common.proto import objmgr_pb2, objmgr_pb2_grpc

    with rpc.sync_channel(objmgr_address) as ch:
        try:
            s = objmgr_pb2_grpc.ObjectManagerStub(ch).GetStoreStats(objmgr_pb2.GetStoreStatsRequest(), timeout=3)
        except grpc.RpcError:
            return True
        return s.num_objects + s.num_spilled > 0


def _still_idle(raylet_address: str) -> bool:
    """Asks the raylet itself, just before its node is removed, that nothing is leased, waiting
    or reserved there (its load report may be a period old); False when it cannot be asked."""
    import grpc

    from ember_common import rpc
    from ember_common.proto import raylet_pb2, raylet_pb2_grpc

    with rpc.sync_channel(raylet_address) as ch:
        try:
            s = raylet_pb2_grpc.RayletStub(ch).GetNodeStats(raylet_pb2.GetNodeStatsRequest(), timeout=3)
        except grpc.RpcError:
            return False
    free = all(abs(s.available_resources.get(k, 0.0) - v) < 1e-9 for k, v in s.total_resources.items())
    return free and s.queued_leases == 0 and not any(w.leased for w in s.workers) and not s.bundles


def build(config: ClusterConfig, gcs_address: str) -> Autoscaler:
    """An autoscaler for a running cluster, with the provider its config names."""
    from ember_common.autoscaler_client import fetch_cluster_resource_state

    from .providers import make_provider

    provider = make_provider(config.provider, config.cluster_name, gcs_address,
                             {t.name: t.node_config for t in config.types.values()
                              if t.name != config.head_node_type})
    return Autoscaler(config, provider, fetch_state=lambda: fetch_cluster_resource_state(gcs_address),
                      publish=_kv_publisher(gcs_address), has_objects=_has_objects, still_idle=_still_idle)
