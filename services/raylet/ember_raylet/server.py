"""The raylet gRPC service and process: serves leases and the node's log files (log_service),
registers the node with the GCS, heartbeats, follows the cluster view, and forwards worker
output (log monitor)."""
from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from typing import Any, Callable

from ember_common import backoff, kv_parts, metrics, resources, rpc, service
from ember_common import labels as kit_labels
from ember_common.config import get_config
from ember_common.gcs_client import GcsClient, SyncGcsClient
from ember_common.proto import common_pb2, gcs_pb2, logs_pb2_grpc, raylet_pb2, raylet_pb2_grpc
from ember_common.rpc import rpc_errors
from ember_common.settings import RayletSettings

from . import bundles, load_report
from . import memory_monitor as mem
from .log_monitor import LogMonitor
from .log_service import LogServiceServicer, StartedWorkers, WorkerPids
from .raylet import Raylet
from .resources import HeartbeatReport
from .scheduler import with_delta
from .worker_ledger import KV_NAMESPACE, LedgerWriter, WorkerLedger, ledger_key
from .worker_pool import WorkerState

log = logging.getLogger(__name__)
HEALTH_NAME = raylet_pb2.DESCRIPTOR.services_by_name["Raylet"].full_name  # "ember.Raylet"


class RayletServicer(raylet_pb2_grpc.RayletServicer):
    def __init__(self, raylet: Raylet, stop: asyncio.Event, pids: WorkerPids | None = None,
                 memory: mem.Monitor | None = None) -> None:
        self.raylet = raylet
        self.stop = stop
        self.memory = memory or mem.Monitor(mem.MemoryPolicy(
            node_id=raylet.node_id, node_ip=raylet.node_ip, usage_threshold=1.0, min_free_bytes=-1), 0)
        self.pids = pids or WorkerPids()  # for the log service: a worker's output by its pid

    @rpc_errors
    async def RegisterWorker(self, request: raylet_pb2.RegisterWorkerRequest, context: rpc.Context) -> Any:
        r = self.raylet
        r.register_worker(request.worker_id, request.pid, request.port)
        self.pids.add(request.pid, request.worker_id)
        return raylet_pb2.RegisterWorkerReply(node_id=r.node_id, gcs_address=r.gcs_address,
                                              objmgr_address=r.objmgr_address, store_dir=r.store_dir,
                                              session_dir=r.session_dir)

    @rpc_errors
    async def RequestWorkerLease(self, request: raylet_pb2.RequestWorkerLeaseRequest, context: rpc.Context) -> Any:
        self.memory.requested(request.lease_id, request.retriable)
        return await self.raylet.request_lease(request)

    @rpc_errors
    async def GetWorkerFailureCause(self, request: raylet_pb2.GetWorkerFailureCauseRequest,
                                    context: rpc.Context) -> raylet_pb2.GetWorkerFailureCauseReply:
        cause = self.memory.policy.failure_cause(request.lease_id)
        if cause is None:
            return raylet_pb2.GetWorkerFailureCauseReply()
        return raylet_pb2.GetWorkerFailureCauseReply(failure_cause=raylet_pb2.WorkerFailureCause(
            error_type=cause.error_type, error_message=cause.error_message,
            fail_task_immediately=cause.fail_task_immediately))

    @rpc_errors
    async def ReturnWorker(self, request: raylet_pb2.ReturnWorkerRequest, context: rpc.Context) -> Any:
        self.raylet.return_worker(request.lease_id, request.disconnect)
        return raylet_pb2.ReturnWorkerReply()

    @rpc_errors
    async def CancelWorkerLease(self, request: raylet_pb2.CancelWorkerLeaseRequest, context: rpc.Context) -> Any:
        return raylet_pb2.CancelWorkerLeaseReply(cancelled=self.raylet.cancel_lease(request.lease_id))

    @rpc_errors
    async def NotifyWorkerBlocked(self, request: raylet_pb2.NotifyWorkerBlockedRequest, context: rpc.Context) -> Any:
        await self.raylet.notify_blocked(request.worker_id, request.blocked)
        return raylet_pb2.NotifyWorkerBlockedReply()

    # The placement-group calls work through their groups in slices of about SLICE_BUNDLES
    # bundles, yielding to the event loop between slices (lease requests keep being served).
    @rpc_errors
    async def PrepareBundleResources(self, request: raylet_pb2.PrepareBundleResourcesRequest,
                                     context: rpc.Context) -> raylet_pb2.PrepareBundleResourcesReply:
        ok: list[bool] = []
        for part in bundles.slices(request.groups, lambda g: len(g.bundles)):
            ok += self.raylet.prepare_many([(g.placement_group_id, [(b.index, dict(b.resources)) for b in g.bundles],
                                             g.commit) for g in part])
            await asyncio.sleep(0)
        return raylet_pb2.PrepareBundleResourcesReply(success=ok)

    @rpc_errors
    async def CommitBundleResources(self, request: raylet_pb2.CommitBundleResourcesRequest,
                                    context: rpc.Context) -> raylet_pb2.CommitBundleResourcesReply:
        errors: list[str] = []
        for part in bundles.slices(request.groups, lambda g: len(g.bundle_indexes)):
            errors += self.raylet.commit_many([(g.placement_group_id, list(g.bundle_indexes)) for g in part])
            await asyncio.sleep(0)
        return raylet_pb2.CommitBundleResourcesReply(errors=errors)

    @rpc_errors
    async def CancelResourceReserve(self, request: raylet_pb2.CancelResourceReserveRequest,
                                    context: rpc.Context) -> raylet_pb2.CancelResourceReserveReply:
        # no indexes: every bundle of the group here, as many as a group may have
        for part in bundles.slices(request.groups, lambda g: len(g.bundle_indexes) or bundles.SLICE_BUNDLES):
            self.raylet.cancel_many([(g.placement_group_id, list(g.bundle_indexes)) for g in part])
            await asyncio.sleep(0)
        return raylet_pb2.CancelResourceReserveReply()

    @rpc_errors
    async def GetNodeStats(self, request: raylet_pb2.GetNodeStatsRequest, context: rpc.Context) -> Any:
        return self.raylet.stats()

    @rpc_errors
    async def Shutdown(self, request: raylet_pb2.ShutdownRequest, context: rpc.Context) -> Any:
        self.stop.set()
        return raylet_pb2.ShutdownReply()


class Heartbeats(threading.Thread):
    """Reports liveness and resources every heartbeat period, from its own thread over its own
    channel, so a busy event loop (a long request, a slow callback) never silences the node:
    the GCS declares a node dead after node_death_timeout_s without a heartbeat, killing its
    actors. Registers again when the GCS does not know the node (it restarted, or declared the
    node dead) and then calls `registered_again` (which must be thread-safe). What it reads of
    the raylet: the node id, and the resources through `NodeResources.snapshot` (thread-safe)."""

    def __init__(self, raylet: Raylet, node: common_pb2.NodeInfo,
                 registered_again: Callable[[], object]) -> None:
        super().__init__(name="raylet-heartbeats", daemon=True)
        self.node_id = raylet.node_id
        self.resources = raylet.resources
        self.period_s = raylet.cfg.heartbeat_period_s
        self.node = common_pb2.NodeInfo()
        self.node.CopyFrom(node)  # its own copy: the loop never shares a message with this thread
        self.registered_again = registered_again
        self.gcs = SyncGcsClient(raylet.gcs_address, timeout_s=max(self.period_s * 4, 2))
        self.report = HeartbeatReport(self.node_id)  # whole maps first, then what changed
        self._halt = threading.Event()  # not `_stop`: Thread.join calls its own _stop()

    def run(self) -> None:
        try:
            while True:
                self.beat()
                if self._halt.wait(self.period_s):
                    return
        finally:
            self.gcs.close()

    def beat(self) -> None:
        """One heartbeat (failures are logged: the next period is the retry)."""
        try:
            try:
                self.report.taken(self.gcs.send_heartbeat(self.report.build(*self.resources.snapshot())))
            except rpc.NotFound:
                self.report.forget()
                log.warning("the GCS does not know this node (restarted?): registering again")
                self.gcs.register_node(self.node, retry=backoff.NO_RETRY)
                self.registered_again()
        except rpc.ServiceError as e:
            self.report.forget()  # the GCS may or may not have taken it
            log.debug("heartbeat failed: %s", e)

    def stop(self) -> None:
        """Ends the thread after the heartbeat in flight (if any); waits for it."""
        self._halt.set()
        if self.is_alive():
            self.join(timeout=10)


class GcsLink:
    """Registration, the node feed and reports to the GCS (heartbeats run on their own thread:
    Heartbeats); survives GCS restarts by retrying."""

    def __init__(self, raylet: Raylet, node: common_pb2.NodeInfo) -> None:
        self.raylet = raylet
        self.node = node
        self.gcs = GcsClient(raylet.gcs_address, timeout_s=5)
        # Called after registering again: a GCS that declared the node dead deleted its ledger.
        self.on_registered_again: Callable[[], None] = lambda: None

    async def register(self, timeout_s: float) -> None:
        """Registers the node, retrying until timeout_s (the GCS may still be starting)."""
        try:
            await self.gcs.register_node(self.node, retry=backoff.SERVICE_RESTART.replace(
                initial_s=0.1, max_s=0.5, deadline_s=timeout_s))
        except rpc.ServiceError as e:
            raise ConnectionError(f"cannot register with the GCS at {self.raylet.gcs_address}: "
                                  f"{type(e).__name__}: {e}") from None

    def start_heartbeats(self, loop: asyncio.AbstractEventLoop) -> Heartbeats:
        """Starts the heartbeat thread (see Heartbeats); stop it with its `stop()`."""
        beats = Heartbeats(self.raylet, self.node, lambda: loop.call_soon_threadsafe(self.on_registered_again))
        beats.start()
        return beats

    async def follow_nodes(self, stop: asyncio.Event) -> None:
        """The cluster view (nodes) and deaths of lease owners (workers), from the GCS."""
        def on_message(msg: Any) -> None:
            if msg.HasField("node"):
                self.raylet.update_node(msg.node)
            elif msg.HasField("node_resources"):  # what changed; ignored until the record came
                d = msg.node_resources
                old = self.raylet.queue.cluster.get(d.node_id)
                if old is not None:
                    self.raylet.queue.update_node(with_delta(old, d.total_resources, d.available_resources,
                                                             d.removed_resources))
                    self.raylet.dispatch()
            elif msg.HasField("worker_death"):
                self.raylet.owner_died(msg.worker_death.worker_id)

        await self.gcs.follow(["nodes", "workers"], on_message, stop)

    def report_worker_death(self, worker_id: str, reason: str) -> None:
        """Tells the GCS a worker exited (in the background, retrying while it restarts)."""
        asyncio.ensure_future(self._report(worker_id, reason))

    async def _report(self, worker_id: str, reason: str) -> None:
        try:
            await self.gcs.report_worker_failure(worker_id, self.raylet.node_id, reason,
                                                 retry=backoff.SERVICE_RESTART.replace(max_s=2.0))
        except rpc.ServiceError as e:
            log.warning("could not report the exit of worker %s to the GCS: %s", worker_id, e)

    async def adopt_ledger(self, ledger: WorkerLedger, writer: LedgerWriter) -> None:
        """Reports the workers of this node's previous raylet dead (they died with it, unseen:
        see worker_ledger) and stores this raylet's ledger before any worker starts."""
        key = ledger_key(self.raylet.node_id)
        retry = backoff.SERVICE_RESTART.replace(max_s=1.0, deadline_s=30)
        try:
            previous = WorkerLedger.parse(await self.gcs.internal_kv_get(KV_NAMESPACE, key, timeout_s=10,
                                                                         retry=retry))
        except rpc.ServiceError as e:
            log.warning("could not read this node's worker ledger: %s", e)
            previous = []
        dead = ledger.inherit(previous)
        try:
            await writer.flush()
        except rpc.ServiceError as e:  # the writer loop retries
            log.warning("could not store this node's worker ledger: %s", e)
        if dead:
            log.warning("node %s: %d workers of the previous raylet died with it; reporting them",
                        self.raylet.node_id[:8], len(dead))
        for wid in dead:
            asyncio.ensure_future(self._report_inherited(wid, ledger, writer))

    async def _report_inherited(self, worker_id: str, ledger: WorkerLedger, writer: LedgerWriter) -> None:
        try:
            await self.gcs.report_worker_failure(worker_id, self.raylet.node_id,
                                                 "its raylet stopped (the worker died with it)",
                                                 retry=backoff.SERVICE_RESTART.replace(max_s=2.0))
        except rpc.ServiceError as e:  # stays in the ledger: the next raylet reports it
            log.warning("could not report the exit of worker %s to the GCS: %s", worker_id, e)
            return
        ledger.reported(worker_id)
        writer.kick()

    async def publish_logs(self, batches: list[gcs_pb2.LogBatch]) -> None:
        """Worker output to the drivers (the log monitor's sink)."""
        await self.gcs.publish_logs(batches)

    async def unregister(self) -> None:
        """Tells the GCS this node stops (best effort)."""
        try:
            await self.gcs.unregister_node(self.raylet.node_id, "node stopped", timeout_s=2,
                                           retry=backoff.NO_RETRY)
        except rpc.ServiceError as e:
            log.warning("could not tell the GCS that this node stops: %s", e)


def parse_args(argv: list[str] | None = None) -> RayletSettings:
    """The raylet's command line (ember_common.settings.RayletSettings)."""
    return RayletSettings.from_argv_or_exit(argv)


def node_labels(node_id: str, resources: dict[str, float], given: str) -> dict[str, str]:
    """This node's labels: Ray's defaults (ray.io/node-id; ray.io/accelerator-type from an
    `accelerator_type:<T>` resource), then those given (--labels, JSON; they may override the
    accelerator type, never the node id)."""
    out: dict[str, str] = {}
    types = [k.split(":", 1)[1] for k in resources if k.startswith("accelerator_type:")]
    if len(types) == 1:
        out[kit_labels.ACCELERATOR_TYPE] = types[0]
    out.update(kit_labels.parse_cli(given) if given else {})
    out[kit_labels.NODE_ID] = node_id
    return out


def parse_resources(raw: str) -> dict[str, float]:
    """--resources JSON, checked by the kit's one resource validation."""
    return resources.parse_json(raw, source="--resources")


async def serve(ns: RayletSettings, stop: asyncio.Event) -> None:
    cfg = get_config()
    labels = node_labels(ns.node_id, dict(ns.resources), ns.labels)
    raylet = Raylet(node_id=ns.node_id, config=cfg, resources=dict(ns.resources), labels=labels,
                    gcs_address=ns.gcs_address, objmgr_address=ns.objmgr_address,
                    store_dir=ns.store_dir, session_dir=ns.session_dir, node_ip=ns.node_ip,
                    num_prestart_workers=ns.num_prestart_workers, runtime_env_dir=ns.runtime_env_dir)
    register_metrics(raylet)
    pids = WorkerPids()
    memory = mem.from_settings(ns.node_id, ns.node_ip)
    server, port, health = rpc.build_server(
        [lambda s: raylet_pb2_grpc.add_RayletServicer_to_server(RayletServicer(raylet, stop, pids, memory), s),
         lambda s: logs_pb2_grpc.add_LogServiceServicer_to_server(
             LogServiceServicer(raylet.logs_dir, raylet.node_id, pids, stop), s)],
        host=ns.host or rpc.bind_host(ns.node_ip), port=ns.port)
    await server.start()
    raylet.address = f"{ns.node_ip}:{port}"
    node = common_pb2.NodeInfo(
        node_id=ns.node_id, raylet_address=raylet.address, objmgr_address=ns.objmgr_address,
        ip=ns.node_ip, hostname=socket.gethostname(), total_resources=raylet.resources.total,
        available_resources=raylet.resources.snapshot_available(), start_time=time.time(),
        is_head=ns.head, store_dir=ns.store_dir, object_store_memory=ns.object_store_memory_bytes,
        labels=labels)
    link = GcsLink(raylet, node)
    async def kv_get(uri: str) -> bytes | None:  # a package, stored whole or in parts (kv_parts)
        stored = await link.gcs.internal_kv_get("runtime_env", uri.encode(), timeout_s=60)
        keys = None if stored is None else kv_parts.parts_of(uri.encode(), stored)
        if stored is None or keys is None:
            return stored
        parts = [await link.gcs.internal_kv_get("runtime_env", k, timeout_s=60) for k in keys]
        return kv_parts.join(stored, parts)

    raylet.runtime_envs.kv_get = kv_get
    raylet.runtime_envs.on_failure = lambda: rpc.best_effort(link.gcs.internal_kv_put(
        "runtime_env", f"failures/{ns.node_id}".encode(),
        json.dumps(raylet.runtime_envs.failures[-5:]).encode(), timeout_s=10))
    ledger = WorkerLedger()
    writer = LedgerWriter(ledger, lambda blob: link.gcs.internal_kv_put(
        KV_NAMESPACE, ledger_key(ns.node_id), blob, timeout_s=10))
    started = StartedWorkers()
    raylet.new_worker_id = lambda: started.add(ledger.take_id())

    def on_worker_death(worker_id: str, reason: str) -> None:
        link.report_worker_death(worker_id, memory.policy.death_reason(worker_id) or reason)
        ledger.exited(worker_id)
        writer.kick()

    raylet.on_worker_death = on_worker_death
    link.on_registered_again = writer.rewrite
    await link.register(cfg.start_timeout_s / 2)
    await link.adopt_ledger(ledger, writer)
    raylet._prestart()
    beats = link.start_heartbeats(asyncio.get_running_loop())
    loops = [asyncio.ensure_future(c) for c in (
        raylet.reap_workers(stop), raylet.check_infeasible(stop), link.follow_nodes(stop), writer.run(stop),
        load_report.report_loop(raylet, ns.gcs_address, 2 * cfg.heartbeat_period_s,
                                max(2 * cfg.heartbeat_period_s, cfg.node_death_timeout_s / 3), raylet.clock, stop))]
    own = [f"{svc}-{ns.node_id[:8]}.{ext}" for svc in ("raylet", "objmgr") for ext in ("out", "err")]
    if ns.head:  # the head's raylet rotates the output of the cluster's services started there
        own += [f"{svc}.{ext}" for svc in ("gcs", "dashboard") for ext in ("out", "err")]
    monitor = LogMonitor(raylet.logs_dir, raylet.node_id, link.publish_logs,
                         lambda wid: raylet.workers[wid].pid if wid in raylet.workers else None,
                         max_lines_per_s=cfg.log_to_driver_max_lines_per_s, max_bytes=cfg.log_max_bytes,
                         backup_count=cfg.log_backup_count, own_files=tuple(own),
                         mine=started.__contains__)
    loops.append(asyncio.ensure_future(monitor.run(stop)))
    loops.append(asyncio.ensure_future(memory.run(raylet, stop)))
    await rpc.mark_serving(health, [HEALTH_NAME])
    await service.advertise_metrics(ns.gcs_address, f"raylet/{ns.node_id}", ns.node_ip)
    rpc.write_port_file(ns.port_file, port)
    log.info("raylet %s serving on %s with %s", ns.node_id[:8], raylet.address, raylet.resources.total)
    await stop.wait()
    log.info("raylet stopping")
    await raylet.shutdown_workers()
    await asyncio.to_thread(beats.stop)  # before unregistering: no heartbeat registers it again
    await link.unregister()
    await server.stop(0.5)
    for t in loops:
        t.cancel()
    await asyncio.gather(*loops, return_exceptions=True)
    await link.gcs.close()


def register_metrics(raylet: Raylet) -> None:
    """Live gauges of this node (no-op unless --metrics-export-port is set)."""
    if not metrics.enabled():
        return
    key = (raylet.node_id,)
    metrics.node_gauges(raylet.node_id, lambda: [1.0 - free for free in raylet.resources.gpus])
    metrics.gauge("ember_tasks_running", "Workers leased to tasks (each runs one task at a time)",
                  lambda: {key: sum(1 for ls in raylet.leases.values() if not ls.actor)}, ("node_id",))
    metrics.gauge("ember_tasks_queued", "Lease requests waiting for resources or a worker",
                  lambda: {key: len(raylet.queue)}, ("node_id",))

    def workers() -> dict[tuple[str, ...], float]:
        return {(raylet.node_id, st.value): float(raylet.pool.count(st))
                for st in (WorkerState.STARTING, WorkerState.IDLE, WorkerState.LEASED)}

    metrics.gauge("ember_workers", "Worker processes of this node by state", workers,
                  ("node_id", "state"))


def main(argv: list[str] | None = None) -> int:
    ns = parse_args(argv)
    service.setup(ns, "raylet")
    return service.run(lambda stop: serve(ns, stop))
