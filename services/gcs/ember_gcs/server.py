"""The GCS gRPC service: a thin shell over GcsCore."""
from __future__ import annotations

import argparse
import asyncio
import logging
from typing import Any

from ember_common import metrics, rpc, service
from ember_common.config import get_config
from ember_common.rpc import rpc_errors
from ember_common.proto import common_pb2, gcs_pb2, gcs_pb2_grpc

from .core import GcsCore, kv_table
from .storage import open_storage

log = logging.getLogger(__name__)


class GcsServicer(gcs_pb2_grpc.GcsServicer):
    def __init__(self, core: GcsCore) -> None:
        self.core = core

    @rpc_errors
    async def RegisterNode(self, request: Any, context: Any) -> Any:
        await self.core.register_node(request.node)
        return gcs_pb2.RegisterNodeReply(cluster_id=self.core.cluster_id)

    @rpc_errors
    async def Heartbeat(self, request: Any, context: Any) -> Any:
        known = self.core.heartbeat(request.node_id, dict(request.available_resources),
                                    dict(request.total_resources))
        return gcs_pb2.HeartbeatReply(known=known)

    @rpc_errors
    async def UnregisterNode(self, request: Any, context: Any) -> Any:
        await self.core.mark_dead(request.node_id, request.reason or "stopped")
        return gcs_pb2.UnregisterNodeReply()

    @rpc_errors
    async def GetAllNodes(self, request: Any, context: Any) -> Any:
        return gcs_pb2.GetAllNodesReply(nodes=list(self.core.nodes.values()))

    async def Subscribe(self, request: Any, context: Any) -> Any:
        async for msg in self.core.subscribe(set(request.channels), request.job_id):
            yield msg

    @rpc_errors
    async def PublishLogs(self, request: Any, context: Any) -> Any:
        for batch in request.batches:
            self.core.publish_logs(batch)
        return gcs_pb2.PublishLogsReply()

    @rpc_errors
    async def AddJob(self, request: Any, context: Any) -> Any:
        return gcs_pb2.AddJobReply(job_id=await self.core.add_job(request.job))

    @rpc_errors
    async def MarkJobFinished(self, request: Any, context: Any) -> Any:
        await self.core.mark_job_finished(request.job_id)
        return gcs_pb2.MarkJobFinishedReply()

    @rpc_errors
    async def GetAllJobs(self, request: Any, context: Any) -> Any:
        return gcs_pb2.GetAllJobsReply(jobs=await self.core.all_jobs())

    @rpc_errors
    async def RegisterActor(self, request: Any, context: Any) -> Any:
        return gcs_pb2.RegisterActorReply(actor=await self.core.actors.register(request.creation_spec))

    @rpc_errors
    async def GetActorInfo(self, request: Any, context: Any) -> Any:
        a = await self.core.actors.get(request.actor_id, request.wait_for_change,
                                       request.after_incarnation, request.timeout_s)
        return gcs_pb2.GetActorInfoReply(actor=a)

    @rpc_errors
    async def GetNamedActor(self, request: Any, context: Any) -> Any:
        return gcs_pb2.GetActorInfoReply(actor=self.core.actors.get_named(request.name, request.namespace))

    @rpc_errors
    async def GetAllActors(self, request: Any, context: Any) -> Any:
        return gcs_pb2.GetAllActorsReply(actors=list(self.core.actors.actors.values()))

    @rpc_errors
    async def KillActor(self, request: Any, context: Any) -> Any:
        await self.core.actors.kill(request.actor_id, request.no_restart)
        return gcs_pb2.KillActorReply()

    @rpc_errors
    async def ReportWorkerFailure(self, request: Any, context: Any) -> Any:
        await self.core.actors.on_worker_failure(request.worker_id, request.reason, request.intentional)
        self.core.publish_worker_death(request.worker_id, request.node_id, request.reason)
        return gcs_pb2.ReportWorkerFailureReply()

    @rpc_errors
    async def KVGet(self, request: Any, context: Any) -> Any:
        v = await self.core.storage.get(kv_table(request.namespace), request.key)
        return gcs_pb2.KVGetReply(found=v is not None, value=v or b"")

    @rpc_errors
    async def KVPut(self, request: Any, context: Any) -> Any:
        added = await self.core.storage.put(kv_table(request.namespace), request.key, request.value,
                                            request.overwrite)
        return gcs_pb2.KVPutReply(added=added)

    @rpc_errors
    async def KVDel(self, request: Any, context: Any) -> Any:
        table = kv_table(request.namespace)
        if request.del_by_prefix:
            n = await self.core.storage.delete_prefix(table, request.key)
        else:
            n = int(await self.core.storage.delete(table, request.key))
        return gcs_pb2.KVDelReply(deleted_num=n)

    @rpc_errors
    async def KVKeys(self, request: Any, context: Any) -> Any:
        return gcs_pb2.KVKeysReply(keys=await self.core.storage.keys(kv_table(request.namespace),
                                                                     request.prefix))

    @rpc_errors
    async def KVExists(self, request: Any, context: Any) -> Any:
        v = await self.core.storage.get(kv_table(request.namespace), request.key)
        return gcs_pb2.KVExistsReply(exists=v is not None)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="ember-gcs", description="Ember GCS service")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=6379)
    p.add_argument("--storage", default="memory", help="'memory' or 'etcd://host:port'")
    p.add_argument("--cluster-name", default="default", help="etcd key prefix of this cluster")
    p.add_argument("--session-dir", default="")
    service.add_common_flags(p)
    return p.parse_args(argv)


async def serve(ns: argparse.Namespace, stop: asyncio.Event) -> None:
    cfg = get_config()
    storage = open_storage(ns.storage, ns.cluster_name)
    try:
        await storage.start()
    except rpc.Unavailable as e:  # e.g. etcd unreachable: one line and exit 1 (service.run)
        raise ConnectionError(str(e)) from None
    core = GcsCore(storage, cfg.node_death_timeout_s, cluster_id=ns.cluster_name)
    await core.load()
    register_metrics(core)
    server, port, health = rpc.build_server(
        [lambda s: gcs_pb2_grpc.add_GcsServicer_to_server(GcsServicer(core), s)],
        host=ns.host, port=ns.port)
    await server.start()
    await rpc.mark_serving(health, ["ember.Gcs"])
    if metrics.bound_port:  # "" host: the GCS's own address (ember status fills it in)
        host = "" if ns.host in ("0.0.0.0", "::") else ns.host
        await core.storage.put(kv_table(metrics.KV_NAMESPACE), b"gcs",
                               f"{host}:{metrics.bound_port}".encode(), True)
    rpc.write_port_file(ns.port_file, port)
    log.info("GCS serving on %s:%d (storage %s)", ns.host, port, ns.storage)
    deaths = asyncio.ensure_future(core.detect_deaths(stop))
    await stop.wait()
    log.info("GCS stopping")
    core.close_subscriptions()
    await server.stop(1.0)
    await core.actors.close()
    deaths.cancel()
    await storage.close()


def register_metrics(core: GcsCore) -> None:
    """Live gauges of the cluster tables (no-op unless --metrics-export-port is set)."""
    if not metrics.enabled():
        return

    def by_state(items: Any, names: Any) -> dict[tuple[str, ...], float]:
        counts = {(name,): 0.0 for name in names.keys()}
        for item in items:
            counts[(names.Name(item.state),)] += 1
        return counts

    metrics.gauge("ember_actors_total", "Actors by state",
                  lambda: by_state(core.actors.actors.values(), common_pb2.ActorInfo.State), ("state",))
    metrics.gauge("ember_nodes_total", "Nodes by state",
                  lambda: by_state(core.nodes.values(), common_pb2.NodeInfo.State), ("state",))


def main(argv: list[str] | None = None) -> int:
    ns = parse_args(argv)
    service.setup(ns, "gcs")
    return service.run(lambda stop: serve(ns, stop))
