"""The GCS's gRPC services (proto/gcs.proto), one thin servicer per domain over GcsCore.

Each method reads the request, calls the core and builds the reply; `rpc_errors` turns the
core's exceptions into status codes through the kit's one table (NotFound -> NOT_FOUND, ...).
No reply carries a status field. `add_all` registers every service on a server; `SERVICE_NAMES`
are their full names (marked SERVING in grpc.health.v1 together with "ember.Gcs").
"""
from __future__ import annotations

import logging
from typing import Any, AsyncIterator

import grpc

from ember_common import log_limit, rpc
from ember_common.proto import gcs_pb2, gcs_pb2_grpc, gcs_task_pb2, gcs_task_pb2_grpc
from ember_common.rpc import rpc_errors

from . import autoscaler_state
from .core import GcsCore
from .task_events import TaskEventStore, to_proto

log = logging.getLogger(__name__)
# PublishLogs batches dropped for naming unknown or ended jobs: a warning now and then, never a
# line per call (a caller can send them at will).
_LOG_DROPS = log_limit.LogBudget(per_s=0.1, burst=3)


class NodeInfoServicer(gcs_pb2_grpc.NodeInfoGcsServiceServicer):
    """Node membership, heartbeats and the node table."""

    def __init__(self, core: GcsCore) -> None:
        self.core = core

    @rpc_errors
    async def RegisterNode(self, request: gcs_pb2.RegisterNodeRequest, context: rpc.Context) -> gcs_pb2.RegisterNodeReply:
        await self.core.register_node(request.node)
        return gcs_pb2.RegisterNodeReply(cluster_id=self.core.cluster_id)

    @rpc_errors
    async def UnregisterNode(self, request: gcs_pb2.UnregisterNodeRequest, context: rpc.Context) -> gcs_pb2.UnregisterNodeReply:
        await self.core.mark_dead(request.node_id, request.reason or "stopped")
        return gcs_pb2.UnregisterNodeReply()

    @rpc_errors
    async def ReportHeartbeat(self, request: gcs_pb2.ReportHeartbeatRequest, context: rpc.Context) -> gcs_pb2.ReportHeartbeatReply:
        return gcs_pb2.ReportHeartbeatReply(resend_full=self.core.heartbeat_report(request))

    @rpc_errors
    async def GetAllNodeInfo(self, request: gcs_pb2.GetAllNodeInfoRequest, context: rpc.Context) -> gcs_pb2.GetAllNodeInfoReply:
        return gcs_pb2.GetAllNodeInfoReply(nodes=list(self.core.nodes.values()))


class JobInfoServicer(gcs_pb2_grpc.JobInfoGcsServiceServicer):
    """The job table."""

    def __init__(self, core: GcsCore) -> None:
        self.core = core

    @rpc_errors
    async def AddJob(self, request: gcs_pb2.AddJobRequest, context: rpc.Context) -> gcs_pb2.AddJobReply:
        return gcs_pb2.AddJobReply(job_id=await self.core.add_job(request.job))

    @rpc_errors
    async def MarkJobFinished(self, request: gcs_pb2.MarkJobFinishedRequest, context: rpc.Context) -> gcs_pb2.MarkJobFinishedReply:
        await self.core.mark_job_finished(request.job_id, request.end_state, request.end_message)
        return gcs_pb2.MarkJobFinishedReply()

    @rpc_errors
    async def GetAllJobInfo(self, request: gcs_pb2.GetAllJobInfoRequest, context: rpc.Context) -> gcs_pb2.GetAllJobInfoReply:
        return gcs_pb2.GetAllJobInfoReply(jobs=await self.core.all_jobs())


class ActorInfoServicer(gcs_pb2_grpc.ActorInfoGcsServiceServicer):
    """The actor table (core: ActorManager)."""

    def __init__(self, core: GcsCore) -> None:
        self.actors = core.actors

    @rpc_errors
    async def RegisterActor(self, request: gcs_pb2.RegisterActorRequest, context: rpc.Context) -> gcs_pb2.RegisterActorReply:
        return gcs_pb2.RegisterActorReply(actor=await self.actors.register(request.creation_spec))

    @rpc_errors
    async def GetActorInfo(self, request: gcs_pb2.GetActorInfoRequest, context: rpc.Context) -> gcs_pb2.GetActorInfoReply:
        a = await self.actors.get(request.actor_id, request.wait_for_change,
                                  request.after_incarnation, request.timeout_s)
        return gcs_pb2.GetActorInfoReply(actor=a)

    @rpc_errors
    async def GetNamedActorInfo(self, request: gcs_pb2.GetNamedActorInfoRequest, context: rpc.Context) -> gcs_pb2.GetNamedActorInfoReply:
        return gcs_pb2.GetNamedActorInfoReply(actor=self.actors.get_named(request.name, request.namespace))

    @rpc_errors
    async def GetAllActorInfo(self, request: gcs_pb2.GetAllActorInfoRequest, context: rpc.Context) -> gcs_pb2.GetAllActorInfoReply:
        return gcs_pb2.GetAllActorInfoReply(actors=list(self.actors.actors.values()))

    @rpc_errors
    async def KillActor(self, request: gcs_pb2.KillActorRequest, context: rpc.Context) -> gcs_pb2.KillActorReply:
        await self.actors.kill(request.actor_id, request.no_restart, request.out_of_scope)
        return gcs_pb2.KillActorReply()


class WorkerInfoServicer(gcs_pb2_grpc.WorkerInfoGcsServiceServicer):
    """Worker exits: actors on the worker restart or die; the death is published."""

    def __init__(self, core: GcsCore) -> None:
        self.core = core

    @rpc_errors
    async def ReportWorkerFailure(self, request: gcs_pb2.ReportWorkerFailureRequest, context: rpc.Context) -> gcs_pb2.ReportWorkerFailureReply:
        await self.core.actors.on_worker_failure(request.worker_id, request.reason, request.intentional)
        self.core.publish_worker_death(request.worker_id, request.node_id, request.reason)
        return gcs_pb2.ReportWorkerFailureReply()


class InternalKVServicer(gcs_pb2_grpc.InternalKVGcsServiceServicer):
    """The internal KV (core: InternalKV)."""

    def __init__(self, core: GcsCore) -> None:
        self.kv = core.kv

    @rpc_errors
    async def InternalKVGet(self, request: gcs_pb2.InternalKVGetRequest, context: rpc.Context) -> gcs_pb2.InternalKVGetReply:
        return gcs_pb2.InternalKVGetReply(value=await self.kv.get(request.namespace, request.key))

    @rpc_errors
    async def InternalKVPut(self, request: gcs_pb2.InternalKVPutRequest, context: rpc.Context) -> gcs_pb2.InternalKVPutReply:
        added = await self.kv.put(request.namespace, request.key, request.value, request.overwrite)
        return gcs_pb2.InternalKVPutReply(added=added)

    @rpc_errors
    async def InternalKVDel(self, request: gcs_pb2.InternalKVDelRequest, context: rpc.Context) -> gcs_pb2.InternalKVDelReply:
        n = await self.kv.delete(request.namespace, request.key, request.del_by_prefix)
        return gcs_pb2.InternalKVDelReply(deleted_num=n)

    @rpc_errors
    async def InternalKVKeys(self, request: gcs_pb2.InternalKVKeysRequest, context: rpc.Context) -> gcs_pb2.InternalKVKeysReply:
        return gcs_pb2.InternalKVKeysReply(keys=await self.kv.keys(request.namespace, request.prefix))

    @rpc_errors
    async def InternalKVExists(self, request: gcs_pb2.InternalKVExistsRequest, context: rpc.Context) -> gcs_pb2.InternalKVExistsReply:
        return gcs_pb2.InternalKVExistsReply(exists=await self.kv.exists(request.namespace, request.key))


class InternalPubSubServicer(gcs_pb2_grpc.InternalPubSubGcsServiceServicer):
    """Change feeds (nodes, workers, logs, driver liveness)."""

    def __init__(self, core: GcsCore) -> None:
        self.core = core

    @rpc_errors
    async def Subscribe(self, request: gcs_pb2.SubscribeRequest, context: rpc.Context) -> AsyncIterator[gcs_pb2.PubMessage]:
        async for msg in self.core.subscribe(set(request.channels), request.job_id):
            yield msg

    @rpc_errors
    async def PublishLogs(self, request: gcs_pb2.PublishLogsRequest, context: rpc.Context) -> gcs_pb2.PublishLogsReply:
        dropped = await self.core.publish_logs(list(request.batches))
        held = _LOG_DROPS.take() if dropped else None
        if held is not None:
            log.warning("PublishLogs from %s: dropped %d batches naming unknown or ended jobs%s",
                        context.peer(), dropped, log_limit.held_note(held, "such calls"))
        return gcs_pb2.PublishLogsReply()


class PlacementGroupServicer(gcs_pb2_grpc.PlacementGroupInfoGcsServiceServicer):
    """Placement groups (core: PlacementGroups)."""

    def __init__(self, core: GcsCore) -> None:
        self.pgs = core.pgs

    @rpc_errors
    async def CreatePlacementGroup(self, request: gcs_pb2.CreatePlacementGroupRequest,
                                   context: rpc.Context) -> gcs_pb2.CreatePlacementGroupReply:
        return gcs_pb2.CreatePlacementGroupReply(placement_group=await self.pgs.create(request.spec))

    @rpc_errors
    async def RemovePlacementGroup(self, request: gcs_pb2.RemovePlacementGroupRequest,
                                   context: rpc.Context) -> gcs_pb2.RemovePlacementGroupReply:
        await self.pgs.remove(request.placement_group_id)
        return gcs_pb2.RemovePlacementGroupReply()

    @rpc_errors
    async def CreatePlacementGroups(self, request: gcs_pb2.CreatePlacementGroupsRequest,
                                    context: rpc.Context) -> gcs_pb2.CreatePlacementGroupsReply:
        return gcs_pb2.CreatePlacementGroupsReply(errors=await self.pgs.create_many(request.specs))

    @rpc_errors
    async def RemovePlacementGroups(self, request: gcs_pb2.RemovePlacementGroupsRequest,
                                    context: rpc.Context) -> gcs_pb2.RemovePlacementGroupsReply:
        return gcs_pb2.RemovePlacementGroupsReply(
            not_found=await self.pgs.remove_many(request.placement_group_ids))

    @rpc_errors
    async def GetPlacementGroup(self, request: gcs_pb2.GetPlacementGroupRequest,
                                context: rpc.Context) -> gcs_pb2.GetPlacementGroupReply:
        return gcs_pb2.GetPlacementGroupReply(
            placement_group=self.pgs.manager.get(request.placement_group_id))

    @rpc_errors
    async def GetNamedPlacementGroup(self, request: gcs_pb2.GetNamedPlacementGroupRequest,
                                     context: rpc.Context) -> gcs_pb2.GetNamedPlacementGroupReply:
        return gcs_pb2.GetNamedPlacementGroupReply(
            placement_group=self.pgs.manager.get_named(request.name, request.namespace))

    @rpc_errors
    async def GetAllPlacementGroup(self, request: gcs_pb2.GetAllPlacementGroupRequest,
                                   context: rpc.Context) -> gcs_pb2.GetAllPlacementGroupReply:
        return gcs_pb2.GetAllPlacementGroupReply(placement_groups=list(self.pgs.manager.groups.values()))

    @rpc_errors
    async def WaitPlacementGroupUntilReady(self, request: gcs_pb2.WaitPlacementGroupUntilReadyRequest,
                                           context: rpc.Context) -> gcs_pb2.WaitPlacementGroupUntilReadyReply:
        ready, g, also = await self.pgs.wait_ready(request.placement_group_id, request.timeout_s,
                                                   request.also_report)
        return gcs_pb2.WaitPlacementGroupUntilReadyReply(ready=ready, placement_group=g, ready_ids=also)


class TaskInfoServicer(gcs_task_pb2_grpc.TaskInfoGcsServiceServicer):
    """Task events (core: TaskEventStore, proto/gcs_task.proto)."""

    def __init__(self, store: TaskEventStore, derived: Any = None) -> None:
        self.store = store
        self.derived = derived  # tracing.derived_spans() when this GCS exports execute spans

    @rpc_errors
    async def AddTaskEventData(self, request: gcs_task_pb2.AddTaskEventDataRequest,
                               context: rpc.Context) -> gcs_task_pb2.AddTaskEventDataReply:
        self.store.add_raw(request.batch, request.records_by_job, request.dropped_by_job)
        if request.spans > 0 and self.derived is not None:
            self.derived.add(request.batch, request.spans)
        return gcs_task_pb2.AddTaskEventDataReply()

    @rpc_errors
    async def GetTaskEvents(self, request: gcs_task_pb2.GetTaskEventsRequest,
                            context: rpc.Context) -> gcs_task_pb2.GetTaskEventsReply:
        rows, total = self.store.query([(f.column, f.predicate, f.value) for f in request.filters],
                                       request.limit)
        return gcs_task_pb2.GetTaskEventsReply(
            tasks=[to_proto(a) for a in rows], total=total, num_stored=self.store.stored(),
            dropped_by_job=self.store.dropped_by_job, num_dropped=self.store.num_dropped)

    @rpc_errors
    async def GetTaskSummary(self, request: gcs_task_pb2.GetTaskSummaryRequest,
                             context: rpc.Context) -> gcs_task_pb2.GetTaskSummaryReply:
        counts = self.store.summary([(f.column, f.predicate, f.value) for f in request.filters])
        names = gcs_task_pb2.TaskAttempt.State.Name
        summary = [gcs_task_pb2.TaskFuncSummary(func_name=name, type=typ,  # type: ignore[arg-type]
                                                state_counts={names(s): n for s, n in c.items()})
                   for (name, typ), c in sorted(counts.items())]
        return gcs_task_pb2.GetTaskSummaryReply(
            summary=summary, total=sum(sum(c.values()) for c in counts.values()),
            num_dropped=self.store.num_dropped)


# Health name of the GCS as a whole (docker/healthcheck.py asks for it), then each service's.
HEALTH_NAME = "ember.Gcs"  # SERVING on the GCS that serves (the leader of replicas)
REPLICA_HEALTH_NAME = "ember.GcsReplica"  # SERVING on every GCS process that is up, leader or not
SERVICE_NAMES = [gcs_pb2.DESCRIPTOR.services_by_name[name].full_name for name in (
    "NodeInfoGcsService", "JobInfoGcsService", "ActorInfoGcsService", "WorkerInfoGcsService",
    "InternalKVGcsService", "InternalPubSubGcsService", "PlacementGroupInfoGcsService")] + [autoscaler_state.SERVICE_NAME]
SERVICE_NAMES.append(gcs_task_pb2.DESCRIPTOR.services_by_name["TaskInfoGcsService"].full_name)


def add_all(core: GcsCore, server: grpc.aio.Server, tasks: TaskEventStore | None = None,
            derived: Any = None) -> None:
    """Registers every GCS service over core (and the task-event store, and the export of
    execute spans from task events when tracing is on: tracing.derived_spans) on server."""
    gcs_pb2_grpc.add_NodeInfoGcsServiceServicer_to_server(NodeInfoServicer(core), server)
    gcs_pb2_grpc.add_JobInfoGcsServiceServicer_to_server(JobInfoServicer(core), server)
    gcs_pb2_grpc.add_ActorInfoGcsServiceServicer_to_server(ActorInfoServicer(core), server)
    gcs_pb2_grpc.add_WorkerInfoGcsServiceServicer_to_server(WorkerInfoServicer(core), server)
    gcs_pb2_grpc.add_InternalKVGcsServiceServicer_to_server(InternalKVServicer(core), server)
    gcs_pb2_grpc.add_InternalPubSubGcsServiceServicer_to_server(InternalPubSubServicer(core), server)
    gcs_pb2_grpc.add_PlacementGroupInfoGcsServiceServicer_to_server(PlacementGroupServicer(core), server)
    autoscaler_state.add(core, server, stale_s=core.death_timeout_s)
    gcs_task_pb2_grpc.add_TaskInfoGcsServiceServicer_to_server(TaskInfoServicer(TaskEventStore() if tasks is None else tasks, derived), server)
