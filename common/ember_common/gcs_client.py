"""Typed clients of the GCS: one method per RPC of every GCS service (proto/gcs.proto).

`GcsClient` (asyncio) is what services and the core worker use; `SyncGcsClient` is a small
blocking facade for synchronous callers (the CLI, `ember.init` before the core worker runs).

Every method raises the `ember_common.rpc` exception of the status the GCS answered (NotFound,
AlreadyExists, InvalidArgument, Unavailable, ...), never a raw grpc error. RPCs the proto marks
idempotent are retried on Unavailable / DeadlineExceeded under the client's backoff policy (the
GCS may be restarting on etcd); a call can pass its own `retry=` policy (`backoff.NO_RETRY` for
one try) and `timeout_s=` (per try). AddJob and PublishLogs are never retried.

A replicated GCS (`ember-gcs --ha`): the address lists every replica, comma-separated. A client
calls one replica at a time (`gcs_leader.Replicas`): a follower's UNAVAILABLE names the leader
and the call goes there at once (even a non-idempotent one: a follower refuses before doing
anything); when a replica does not answer, an idempotent call goes on at once to the next
replica not tried yet in this attempt, and backs off only once none answered.
"""
from __future__ import annotations

import asyncio
import contextlib
from typing import Any, AsyncGenerator, Callable, Sequence

import grpc

from . import backoff, rpc
from .gcs_leader import Channels, Method, Replicas, Service, call_async, call_sync, go_again, parse_addresses
from .gcs_pg_client import PlacementGroupMethods
from .proto import common_pb2, gcs_pb2, gcs_pb2_grpc, gcs_task_pb2, gcs_task_pb2_grpc

DEFAULT_TIMEOUT_S = 30.0
# Reconnecting a subscription: until it works again (reset after every message).
FOLLOW_RETRY = backoff.Backoff(initial_s=0.2, max_s=2.0, deadline_s=None)


class GcsClient(PlacementGroupMethods):
    """The GCS's services behind one asyncio object (use it from one event loop)."""

    def __init__(self, address: str, *, retry: backoff.Backoff = backoff.SERVICE_RESTART,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.address = address
        self.retry = retry
        self.timeout_s = timeout_s
        self.replicas = Replicas(parse_addresses(address))
        self._channels = Channels(rpc.aio_channel, self.replicas)

        def service(stub_cls: Any) -> Any:
            return Service(self._channels, self.replicas, stub_cls)
        self._nodes = service(gcs_pb2_grpc.NodeInfoGcsServiceStub)
        self._jobs = service(gcs_pb2_grpc.JobInfoGcsServiceStub)
        self._actors = service(gcs_pb2_grpc.ActorInfoGcsServiceStub)
        self._workers = service(gcs_pb2_grpc.WorkerInfoGcsServiceStub)
        self._kv = service(gcs_pb2_grpc.InternalKVGcsServiceStub)
        self._pubsub = service(gcs_pb2_grpc.InternalPubSubGcsServiceStub)
        self._pgs = service(gcs_pb2_grpc.PlacementGroupInfoGcsServiceStub)
        self._tasks = service(gcs_task_pb2_grpc.TaskInfoGcsServiceStub)

    async def close(self) -> None:
        """Closes the channels (calls in flight fail)."""
        for channel in list(self._channels.by_address.values()):
            await channel.close()

    async def _call(self, method: Method, request: Any, *, idempotent: bool,
                    timeout_s: float | None, retry: backoff.Backoff | None,
                    metadata: Sequence[tuple[str, str]] | None = None) -> Any:
        timeout = self.timeout_s if timeout_s is None else timeout_s

        async def once() -> Any:
            return await call_async(self.replicas, method, request, idempotent=idempotent,
                                    timeout=timeout, metadata=metadata)

        policy = (retry or self.retry) if idempotent else backoff.NO_RETRY
        return await backoff.retry_async(once, policy, retry_on=rpc.is_transient)

    # ------------------------------------------------------------------ NodeInfoGcsService
    async def register_node(self, node: common_pb2.NodeInfo, *, timeout_s: float | None = None,
                            retry: backoff.Backoff | None = None) -> str:
        """Registers (or re-registers) a node; returns the cluster id."""
        reply = await self._call(self._nodes.RegisterNode, gcs_pb2.RegisterNodeRequest(node=node),
                                 idempotent=True, timeout_s=timeout_s, retry=retry)
        return str(reply.cluster_id)

    async def unregister_node(self, node_id: str, reason: str, *, timeout_s: float | None = None,
                              retry: backoff.Backoff | None = None) -> None:
        """Marks a node dead on a graceful stop. NotFound for an unknown node."""
        await self._call(self._nodes.UnregisterNode,
                         gcs_pb2.UnregisterNodeRequest(node_id=node_id, reason=reason),
                         idempotent=True, timeout_s=timeout_s, retry=retry)

    async def report_heartbeat(self, node_id: str, available: dict[str, float],
                               total: dict[str, float], *, timeout_s: float | None = None,
                               retry: backoff.Backoff | None = backoff.NO_RETRY) -> None:
        """One heartbeat (not retried by default: the next period is the retry). NotFound when
        the GCS does not know the node as alive: register again."""
        await self._call(self._nodes.ReportHeartbeat, gcs_pb2.ReportHeartbeatRequest(
            node_id=node_id, available_resources=available, total_resources=total),
            idempotent=True, timeout_s=timeout_s, retry=retry)

    async def get_all_node_info(self, *, timeout_s: float | None = None,
                                retry: backoff.Backoff | None = None) -> list[common_pb2.NodeInfo]:
        """Every node the GCS knows, alive and dead."""
        reply = await self._call(self._nodes.GetAllNodeInfo, gcs_pb2.GetAllNodeInfoRequest(),
                                 idempotent=True, timeout_s=timeout_s, retry=retry)
        return list(reply.nodes)

    # ------------------------------------------------------------------ JobInfoGcsService
    async def add_job(self, job: common_pb2.JobInfo, *, timeout_s: float | None = None) -> bytes:
        """Records a job; returns its new id (never retried: a retry would add another job)."""
        reply = await self._call(self._jobs.AddJob, gcs_pb2.AddJobRequest(job=job),
                                 idempotent=False, timeout_s=timeout_s, retry=None)
        return bytes(reply.job_id)

    async def mark_job_finished(self, job_id: bytes, end_state: str = "SUCCEEDED", end_message: str = "", *,
                                timeout_s: float | None = None, retry: backoff.Backoff | None = None) -> None:
        """Ends a job (SUCCEEDED, FAILED or STOPPED, and why). NotFound for an unknown job."""
        await self._call(self._jobs.MarkJobFinished, gcs_pb2.MarkJobFinishedRequest(
            job_id=job_id, end_state=end_state, end_message=end_message),
                         idempotent=True, timeout_s=timeout_s, retry=retry)

    async def get_all_job_info(self, *, timeout_s: float | None = None,
                               retry: backoff.Backoff | None = None) -> list[common_pb2.JobInfo]:
        """Every job, in id order."""
        reply = await self._call(self._jobs.GetAllJobInfo, gcs_pb2.GetAllJobInfoRequest(),
                                 idempotent=True, timeout_s=timeout_s, retry=retry)
        return list(reply.jobs)

    # ------------------------------------------------------------------ ActorInfoGcsService
    async def register_actor(self, spec: common_pb2.TaskSpec, *, timeout_s: float | None = None,
                             retry: backoff.Backoff | None = None,
                             metadata: Sequence[tuple[str, str]] | None = None) -> common_pb2.ActorInfo:
        """Records an actor and starts creating it (idempotent by spec.actor_id).
        AlreadyExists when its name is taken in its namespace."""
        reply: gcs_pb2.RegisterActorReply = await self._call(self._actors.RegisterActor,
                                 gcs_pb2.RegisterActorRequest(creation_spec=spec), idempotent=True,
                                 timeout_s=timeout_s, retry=retry, metadata=metadata)
        return reply.actor

    async def get_actor_info(self, actor_id: bytes, *, wait_for_change: bool = False,
                             after_incarnation: int = 0, wait_s: float = 0.0,
                             timeout_s: float | None = None,
                             retry: backoff.Backoff | None = None) -> common_pb2.ActorInfo:
        """An actor's record. With wait_for_change the GCS answers once the actor is ALIVE with
        an incarnation above after_incarnation, or DEAD, or after wait_s. NotFound for an
        unknown actor."""
        reply: gcs_pb2.GetActorInfoReply = await self._call(self._actors.GetActorInfo, gcs_pb2.GetActorInfoRequest(
            actor_id=actor_id, wait_for_change=wait_for_change, after_incarnation=after_incarnation,
            timeout_s=wait_s), idempotent=True, timeout_s=timeout_s, retry=retry)
        return reply.actor

    async def get_named_actor_info(self, name: str, namespace: str, *,
                                   timeout_s: float | None = None,
                                   retry: backoff.Backoff | None = None) -> common_pb2.ActorInfo:
        """The live actor with that name. NotFound when there is none."""
        reply: gcs_pb2.GetNamedActorInfoReply = await self._call(self._actors.GetNamedActorInfo, gcs_pb2.GetNamedActorInfoRequest(
            name=name, namespace=namespace), idempotent=True, timeout_s=timeout_s, retry=retry)
        return reply.actor

    async def get_all_actor_info(self, *, timeout_s: float | None = None,
                                 retry: backoff.Backoff | None = None) -> list[common_pb2.ActorInfo]:
        """Every actor the GCS knows."""
        reply = await self._call(self._actors.GetAllActorInfo, gcs_pb2.GetAllActorInfoRequest(),
                                 idempotent=True, timeout_s=timeout_s, retry=retry)
        return list(reply.actors)

    async def kill_actor(self, actor_id: bytes, no_restart: bool, *, out_of_scope: bool = False,
                         timeout_s: float | None = None,
                         retry: backoff.Backoff | None = None) -> None:
        """Kills an actor (restarting it unless no_restart); out_of_scope (from its owner): no
        handle is left, a non-detached actor dies. NotFound for an unknown actor."""
        await self._call(self._actors.KillActor, gcs_pb2.KillActorRequest(
            actor_id=actor_id, no_restart=no_restart, out_of_scope=out_of_scope),
            idempotent=True, timeout_s=timeout_s, retry=retry)

    # ------------------------------------------------------------------ TaskInfoGcsService
    async def add_task_event_data(self, batch: bytes, records_by_job: dict[str, int],
                                  dropped_by_job: dict[str, int], *, spans: int = 0,
                                  timeout_s: float | None = None) -> None:
        """Sends one serialized TaskEventBatch, its records per job (hex), the events the
        sender dropped and how many of its records carry spans for the GCS to export
        (tracing's derived spans); never retried (a reporter counts a batch that did not go as dropped).
        A core worker's reporter sends on this channel: no channel of its own (a blocking one
        would cost each worker private memory and its start a connection)."""
        req = gcs_task_pb2.AddTaskEventDataRequest(batch=batch, records_by_job=records_by_job,
                                                   dropped_by_job=dropped_by_job, spans=spans)
        await self._call(self._tasks.AddTaskEventData, req, idempotent=False, timeout_s=timeout_s,
                         retry=backoff.NO_RETRY)

    # ------------------------------------------------------------------ WorkerInfoGcsService
    async def report_worker_failure(self, worker_id: str, node_id: str, reason: str, *,
                                    intentional: bool = False, timeout_s: float | None = None,
                                    retry: backoff.Backoff | None = None) -> None:
        """Reports that a worker exited (its actors restart or die)."""
        await self._call(self._workers.ReportWorkerFailure, gcs_pb2.ReportWorkerFailureRequest(
            worker_id=worker_id, node_id=node_id, reason=reason, intentional=intentional),
            idempotent=True, timeout_s=timeout_s, retry=retry)

    # ------------------------------------------------------------------ InternalKVGcsService
    async def internal_kv_get(self, namespace: str, key: bytes, *, timeout_s: float | None = None,
                              retry: backoff.Backoff | None = None,
                              metadata: Sequence[tuple[str, str]] | None = None) -> bytes | None:
        """The value of key, or None when it is absent."""
        try:
            reply = await self._call(self._kv.InternalKVGet, gcs_pb2.InternalKVGetRequest(
                namespace=namespace, key=key), idempotent=True, timeout_s=timeout_s, retry=retry,
                metadata=metadata)
        except rpc.NotFound:
            return None
        return bytes(reply.value)

    async def internal_kv_put(self, namespace: str, key: bytes, value: bytes, overwrite: bool = True,
                              *, timeout_s: float | None = None, retry: backoff.Backoff | None = None,
                              metadata: Sequence[tuple[str, str]] | None = None) -> bool:
        """Stores value (with overwrite=False an existing value is kept); True if key was new."""
        reply = await self._call(self._kv.InternalKVPut, gcs_pb2.InternalKVPutRequest(
            namespace=namespace, key=key, value=value, overwrite=overwrite), idempotent=True,
            timeout_s=timeout_s, retry=retry, metadata=metadata)
        return bool(reply.added)

    async def internal_kv_del(self, namespace: str, key: bytes, del_by_prefix: bool = False, *,
                              timeout_s: float | None = None,
                              retry: backoff.Backoff | None = None) -> int:
        """Deletes key (or every key starting with it); returns how many were deleted."""
        reply = await self._call(self._kv.InternalKVDel, gcs_pb2.InternalKVDelRequest(
            namespace=namespace, key=key, del_by_prefix=del_by_prefix), idempotent=True,
            timeout_s=timeout_s, retry=retry)
        return int(reply.deleted_num)

    async def internal_kv_keys(self, namespace: str, prefix: bytes = b"", *,
                               timeout_s: float | None = None,
                               retry: backoff.Backoff | None = None) -> list[bytes]:
        """Keys of the namespace that start with prefix, sorted."""
        reply = await self._call(self._kv.InternalKVKeys, gcs_pb2.InternalKVKeysRequest(
            namespace=namespace, prefix=prefix), idempotent=True, timeout_s=timeout_s, retry=retry)
        return [bytes(k) for k in reply.keys]

    async def internal_kv_exists(self, namespace: str, key: bytes, *, timeout_s: float | None = None,
                                 retry: backoff.Backoff | None = None) -> bool:
        """Whether key is present."""
        reply = await self._call(self._kv.InternalKVExists, gcs_pb2.InternalKVExistsRequest(
            namespace=namespace, key=key), idempotent=True, timeout_s=timeout_s, retry=retry)
        return bool(reply.exists)

    # ------------------------------------------------------------------ InternalPubSubGcsService
    async def publish_logs(self, batches: list[gcs_pb2.LogBatch], *,
                           timeout_s: float | None = 5.0) -> None:
        """Publishes worker output to the jobs' drivers (never retried: lines would repeat)."""
        await self._call(self._pubsub.PublishLogs, gcs_pb2.PublishLogsRequest(batches=batches),
                         idempotent=False, timeout_s=timeout_s, retry=None)

    async def subscribe(self, channels: Sequence[str],
                        job_id: bytes = b"") -> AsyncGenerator[gcs_pb2.PubMessage, None]:
        """One subscription stream (ends or raises a ServiceError when the GCS goes away; see
        `follow` for a subscription that reconnects)."""
        address = self.replicas.current
        call = self._pubsub.Subscribe.at(address)(
            gcs_pb2.SubscribeRequest(channels=list(channels), job_id=job_id))
        try:
            async for msg in call:
                yield msg
        except grpc.aio.AioRpcError as e:
            go_again(self.replicas, address, e, False, set())  # the next subscription goes to the leader
            raise rpc.status_to_exception(e) from None
        finally:
            call.cancel()

    async def follow(self, channels: Sequence[str], handle: Callable[[gcs_pb2.PubMessage], None],
                     stop: asyncio.Event | None = None, job_id: bytes = b"",
                     policy: backoff.Backoff = FOLLOW_RETRY) -> None:
        """Passes every message on channels to handle, reconnecting with backoff after the
        stream breaks (the GCS may restart), until stop is set or the task is cancelled."""
        attempts = backoff.Attempts(policy)

        async def consume() -> None:
            try:
                async with contextlib.aclosing(self.subscribe(channels, job_id)) as stream:
                    async for msg in stream:
                        attempts.reset()
                        handle(msg)
            except rpc.ServiceError:
                pass

        while stop is None or not stop.is_set():
            if stop is None:
                await consume()
            else:  # stop ends an open stream too
                consumer = asyncio.ensure_future(consume())
                stopped = asyncio.ensure_future(stop.wait())
                try:
                    await asyncio.wait([consumer, stopped], return_when=asyncio.FIRST_COMPLETED)
                finally:
                    stopped.cancel()
                    if not consumer.done():
                        consumer.cancel()
                    await asyncio.gather(consumer, stopped, return_exceptions=True)
                if not consumer.cancelled() and consumer.exception() is not None:
                    raise consumer.exception()  # type: ignore[misc]  # handle() failed
                if stop.is_set():
                    return
            delay = attempts.failed()
            if delay is None:  # a policy with a deadline or attempt limit: keep its pace anyway
                delay = policy.max_s
            if stop is None:
                await asyncio.sleep(delay)
                continue
            try:
                await asyncio.wait_for(stop.wait(), delay)
            except asyncio.TimeoutError:
                pass


class SyncGcsClient:
    """A small blocking facade over the GCS for synchronous callers (the CLI, start-up code):
    the reads they need and AddJob, with the same errors and retry policy as GcsClient."""

    def __init__(self, address: str, *, retry: backoff.Backoff = backoff.SERVICE_RESTART,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.address = address
        self.retry = retry
        self.timeout_s = timeout_s
        self.replicas = Replicas(parse_addresses(address))
        self._channels = Channels(rpc.sync_channel, self.replicas)

        def service(stub_cls: Any) -> Any:
            return Service(self._channels, self.replicas, stub_cls)
        self._nodes = service(gcs_pb2_grpc.NodeInfoGcsServiceStub)
        self._jobs = service(gcs_pb2_grpc.JobInfoGcsServiceStub)
        self._actors = service(gcs_pb2_grpc.ActorInfoGcsServiceStub)
        self._kv = service(gcs_pb2_grpc.InternalKVGcsServiceStub)

    def close(self) -> None:
        """Closes the channels."""
        for channel in list(self._channels.by_address.values()):
            channel.close()

    def __enter__(self) -> SyncGcsClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: Any, request: Any, *, idempotent: bool,
              timeout_s: float | None, retry: backoff.Backoff | None) -> Any:
        timeout = self.timeout_s if timeout_s is None else timeout_s

        def once() -> Any:
            return call_sync(self.replicas, method, request, idempotent=idempotent, timeout=timeout)

        policy = (retry or self.retry) if idempotent else backoff.NO_RETRY
        return backoff.retry_sync(once, policy, retry_on=rpc.is_transient)

    def get_all_node_info(self, *, timeout_s: float | None = None,
                          retry: backoff.Backoff | None = None) -> list[common_pb2.NodeInfo]:
        """Every node the GCS knows, alive and dead."""
        return list(self._call(self._nodes.GetAllNodeInfo, gcs_pb2.GetAllNodeInfoRequest(),
                               idempotent=True, timeout_s=timeout_s, retry=retry).nodes)

    def unregister_node(self, node_id: str, reason: str, *, timeout_s: float | None = None,
                        retry: backoff.Backoff | None = None) -> None:
        """Marks a node dead. NotFound for an unknown node."""
        self._call(self._nodes.UnregisterNode, gcs_pb2.UnregisterNodeRequest(
            node_id=node_id, reason=reason), idempotent=True, timeout_s=timeout_s, retry=retry)

    def register_node(self, node: common_pb2.NodeInfo, *, timeout_s: float | None = None,
                      retry: backoff.Backoff | None = None) -> str:
        """Registers (or re-registers) a node; returns the cluster id."""
        return str(self._call(self._nodes.RegisterNode, gcs_pb2.RegisterNodeRequest(node=node),
                              idempotent=True, timeout_s=timeout_s, retry=retry).cluster_id)

    def report_heartbeat(self, node_id: str, available: dict[str, float], total: dict[str, float], *,
                         timeout_s: float | None = None,
                         retry: backoff.Backoff | None = backoff.NO_RETRY) -> None:
        """One heartbeat (a raylet's heartbeat thread; not retried by default). NotFound when the
        GCS does not know the node as alive: register again."""
        self._call(self._nodes.ReportHeartbeat, gcs_pb2.ReportHeartbeatRequest(
            node_id=node_id, available_resources=available, total_resources=total),
            idempotent=True, timeout_s=timeout_s, retry=retry)

    def send_heartbeat(self, request: gcs_pb2.ReportHeartbeatRequest, *, timeout_s: float | None = None,
                       retry: backoff.Backoff | None = backoff.NO_RETRY) -> gcs_pb2.ReportHeartbeatReply:
        """A heartbeat as built (a raylet's `HeartbeatReport`: whole maps or a delta); its reply
        says whether the GCS wants the whole maps next. NotFound as for report_heartbeat."""
        reply: gcs_pb2.ReportHeartbeatReply = self._call(self._nodes.ReportHeartbeat, request, idempotent=True,
                                                         timeout_s=timeout_s, retry=retry)
        return reply

    def get_all_job_info(self, *, timeout_s: float | None = None,
                         retry: backoff.Backoff | None = None) -> list[common_pb2.JobInfo]:
        """Every job, in id order."""
        return list(self._call(self._jobs.GetAllJobInfo, gcs_pb2.GetAllJobInfoRequest(),
                               idempotent=True, timeout_s=timeout_s, retry=retry).jobs)

    def get_all_actor_info(self, *, timeout_s: float | None = None,
                           retry: backoff.Backoff | None = None) -> list[common_pb2.ActorInfo]:
        """Every actor the GCS knows."""
        return list(self._call(self._actors.GetAllActorInfo, gcs_pb2.GetAllActorInfoRequest(),
                               idempotent=True, timeout_s=timeout_s, retry=retry).actors)

    def get_actor_info(self, actor_id: bytes, *, timeout_s: float | None = None,
                       retry: backoff.Backoff | None = None) -> common_pb2.ActorInfo:
        """An actor's record. NotFound for an unknown actor."""
        reply: gcs_pb2.GetActorInfoReply = self._call(
            self._actors.GetActorInfo, gcs_pb2.GetActorInfoRequest(actor_id=actor_id),
            idempotent=True, timeout_s=timeout_s, retry=retry)
        return reply.actor

    def add_job(self, job: common_pb2.JobInfo, *, timeout_s: float | None = None) -> bytes:
        """Records a job; returns its new id (never retried)."""
        return bytes(self._call(self._jobs.AddJob, gcs_pb2.AddJobRequest(job=job),
                                idempotent=False, timeout_s=timeout_s, retry=None).job_id)

    def internal_kv_get(self, namespace: str, key: bytes, *, timeout_s: float | None = None,
                        retry: backoff.Backoff | None = None) -> bytes | None:
        """The value of key, or None when it is absent."""
        try:
            reply = self._call(self._kv.InternalKVGet, gcs_pb2.InternalKVGetRequest(
                namespace=namespace, key=key), idempotent=True, timeout_s=timeout_s, retry=retry)
        except rpc.NotFound:
            return None
        return bytes(reply.value)

    def internal_kv_put(self, namespace: str, key: bytes, value: bytes, overwrite: bool = True, *,
                        timeout_s: float | None = None, retry: backoff.Backoff | None = None) -> bool:
        """Stores value; True if key was new."""
        return bool(self._call(self._kv.InternalKVPut, gcs_pb2.InternalKVPutRequest(
            namespace=namespace, key=key, value=value, overwrite=overwrite), idempotent=True,
            timeout_s=timeout_s, retry=retry).added)

    def internal_kv_keys(self, namespace: str, prefix: bytes = b"", *,
                         timeout_s: float | None = None,
                         retry: backoff.Backoff | None = None) -> list[bytes]:
        """Keys of the namespace that start with prefix, sorted."""
        return [bytes(k) for k in self._call(self._kv.InternalKVKeys, gcs_pb2.InternalKVKeysRequest(
            namespace=namespace, prefix=prefix), idempotent=True, timeout_s=timeout_s,
            retry=retry).keys]
