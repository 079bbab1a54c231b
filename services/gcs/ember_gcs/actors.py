"""ActorManager: the GCS side of actors — registration, placement, restarts, names, death.
The rules (restart accounting, death causes, lifetimes) are `actor_policy.ActorPolicy`'s, pure;
this class is the driver that persists, leases, pushes and executes its decisions.

Creation: RegisterActor records the actor (state PENDING_CREATION, persisted) and starts a
creation loop: lease a dedicated worker from the creator's node's raylet (following spillback,
through the kit's RayletClient; no raylet or a failed lease -> retry under the kit's backoff),
push the creation task (the worker runs __init__ and becomes the actor), then mark it ALIVE with
the worker's address and a new incarnation. Callers long-poll GetActorInfo for the next
incarnation. When the worker dies (reported by its raylet) or its node dies, the actor restarts
while max_restarts allows (-1: forever), else it is DEAD with the cause. The lease is held for the
actor's lifetime; killing the actor returns it as broken, which kills the worker.
"""
from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import grpc

from ember_common import backoff, rpc, tracing
from ember_common.proto import common_pb2, core_worker_pb2, core_worker_pb2_grpc, raylet_pb2
from ember_common.raylet_client import LeaseGrant, RayletClient
from ember_common.rpc import AlreadyExists, NotFound

from .actor_policy import ActorPolicy, Decision, Die, Restart
from .storage import Storage

log = logging.getLogger(__name__)

ACTORS = "actors"
A = common_pb2.ActorInfo


class ActorManager:
    def __init__(self, storage: Storage, nodes: dict[str, common_pb2.NodeInfo]) -> None:
        self.storage = storage
        self.policy = ActorPolicy()
        self.nodes = nodes  # the GCS node table (shared with GcsCore)
        self.actors: dict[bytes, common_pb2.ActorInfo] = {}
        self.names: dict[tuple[str, str], bytes] = {}
        self.by_worker: dict[str, bytes] = {}
        self._changed = asyncio.Condition()
        self._creating: dict[bytes, asyncio.Task[None]] = {}
        self._channels = rpc.ChannelPool()
        self.raylets = RayletClient(channel_for=self._channels.get)

    async def close(self) -> None:
        """Stops creation loops and closes channels."""
        for t in self._creating.values():
            t.cancel()
        await self._channels.close()

    async def load(self) -> None:
        """After a restart: reload every actor; resume creations that were under way."""
        for blob in (await self.storage.get_all(ACTORS)).values():
            a = common_pb2.ActorInfo.FromString(blob)
            self.actors[a.actor_id] = a
            if a.state != A.DEAD:
                if a.name:
                    self.names[(a.namespace, a.name)] = a.actor_id
                if a.state == A.ALIVE:
                    self.by_worker[a.address.worker_id] = a.actor_id
                else:
                    self._start_creation(a)
        log.info("loaded %d actors from storage", len(self.actors))

    async def _save(self, a: common_pb2.ActorInfo) -> None:
        await self.storage.put(ACTORS, a.actor_id, a.SerializeToString())
        async with self._changed:
            self._changed.notify_all()

    # ------------------------------------------------------------------ API
    async def register(self, spec: common_pb2.TaskSpec) -> common_pb2.ActorInfo:
        c = spec.actor_creation
        if not spec.actor_id:
            raise ValueError("actor_id is required")
        if spec.actor_id in self.actors:
            return self.actors[spec.actor_id]
        key = (c.namespace, c.name)
        if c.name and key in self.names:
            raise AlreadyExists(f"Actor with name '{c.name}' already exists in the namespace "
                                f"'{c.namespace}'")
        a = common_pb2.ActorInfo(actor_id=spec.actor_id, state=A.PENDING_CREATION, name=c.name,
                                 namespace=c.namespace, class_name=c.class_name, job_id=spec.job_id,
                                 creation_spec=spec)
        if c.name:
            self.names[key] = a.actor_id
        self.actors[a.actor_id] = a
        await self._save(a)
        self._start_creation(a)
        return a

    async def get(self, actor_id: bytes, wait: bool, after: int, timeout_s: float) -> common_pb2.ActorInfo:
        a = self.actors.get(actor_id)
        if a is None:
            raise NotFound(f"actor {actor_id.hex()} is unknown")
        if not wait:
            return a

        def ready() -> bool:
            return a.state == A.DEAD or (a.state == A.ALIVE and a.incarnation > after)

        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(ready), timeout_s if timeout_s > 0 else None)
            except asyncio.TimeoutError:
                pass
        return a

    def get_named(self, name: str, namespace: str) -> common_pb2.ActorInfo:
        actor_id = self.names.get((namespace, name))
        if actor_id is None:
            raise NotFound(f"Failed to look up actor with name '{name}' in namespace '{namespace}'")
        return self.actors[actor_id]

    async def kill(self, actor_id: bytes, no_restart: bool, out_of_scope: bool = False) -> None:
        """ember.kill(): the actor dies (no_restart) or its worker is killed and it restarts.
        out_of_scope (from its owner): no handle is left, a non-detached actor dies."""
        a = self.actors.get(actor_id)
        if a is None:
            raise NotFound(f"actor {actor_id.hex()} is unknown")
        if a.state == A.DEAD:
            return
        if out_of_scope:
            d = self.policy.out_of_scope(a)
            if d is not None:
                await self._execute(a, d)
            return
        await self._execute(a, self.policy.killed(a, no_restart))
        await self._release_lease(a)

    async def on_worker_failure(self, worker_id: str, reason: str, intentional: bool) -> None:
        """A worker exited: the actor it hosted restarts or dies; actors it owned die."""
        actor_id = self.by_worker.pop(worker_id, None)
        if actor_id is not None:
            a = self.actors[actor_id]
            await self._execute(a, self.policy.worker_died(a, worker_id, reason, intentional))
        for a in list(self.actors.values()):
            await self._execute(a, self.policy.owner_died(a, worker_id))

    async def on_node_dead(self, node_id: str) -> None:
        """A node died: its actors restart elsewhere or die."""
        for a in list(self.actors.values()):
            d = self.policy.node_died(a, node_id)
            if d is not None:
                self.by_worker.pop(a.address.worker_id, None)
            await self._execute(a, d)

    async def on_job_finished(self, job_id: bytes) -> None:
        """A job ended: its non-detached actors die."""
        for a in list(self.actors.values()):
            await self._execute(a, self.policy.job_finished(a, job_id))

    # ------------------------------------------------------------------ lifecycle
    async def _execute(self, a: common_pb2.ActorInfo, d: Decision | None) -> None:
        """Carries out a policy decision: persist, (re)start creation, return the lease."""
        if d is None:
            return
        if isinstance(d, Die):
            t = self._creating.pop(a.actor_id, None)
            if t is not None and t is not asyncio.current_task():
                t.cancel()
            self.by_worker.pop(a.address.worker_id, None)
            self.policy.apply(a, d)
            if a.name and self.names.get((a.namespace, a.name)) == a.actor_id:
                del self.names[(a.namespace, a.name)]
            log.info("actor %s (%s) is DEAD: %s", a.actor_id.hex()[:8], a.class_name,
                     d.cause.splitlines()[0])
            await self._save(a)
            if d.release_lease:
                await self._release_lease(a)
            return
        self.policy.apply(a, d)
        if isinstance(d, Restart):
            log.info("actor %s (%s) restarting (%d): %s", a.actor_id.hex()[:8], a.class_name,
                     a.num_restarts, d.why)
            await self._save(a)
            self._start_creation(a)

    async def _release_lease(self, a: common_pb2.ActorInfo) -> None:
        if not a.lease_id or not a.raylet_address:
            return
        lease_id, addr = a.lease_id, a.raylet_address
        a.lease_id = b""
        try:
            await self.raylets.return_worker(lease_id, disconnect=True, address=addr, timeout_s=5)
        except rpc.ServiceError as e:  # its node is gone: so is the worker
            log.debug("returning actor lease failed: %s", e)

    def _start_creation(self, a: common_pb2.ActorInfo) -> None:
        task = asyncio.ensure_future(self._create(a))
        self._creating[a.actor_id] = task
        aid = a.actor_id

        def done(t: asyncio.Task[None]) -> None:
            if self._creating.get(aid) is t:
                self._creating.pop(aid, None)

        task.add_done_callback(done)

    def _first_raylet(self, a: common_pb2.ActorInfo) -> str | None:
        owner = self.nodes.get(a.creation_spec.actor_creation.owner_node_id)
        if owner is not None and owner.state == common_pb2.NodeInfo.ALIVE:
            return owner.raylet_address
        alive = [n for n in self.nodes.values() if n.state == common_pb2.NodeInfo.ALIVE]
        return alive[0].raylet_address if alive else None

    async def _create(self, a: common_pb2.ActorInfo) -> None:
        if not tracing.enabled():
            await self._create_untraced(a)
            return
        # In the trace of the call that created the actor, restarts included.
        what = "restart" if a.num_restarts else "create"
        attrs: dict[str, Any] = {"ember.actor_id": a.actor_id.hex(), "ember.actor.class": a.class_name,
                                 "ember.actor.restarts": a.num_restarts}
        with tracing.span(f"actor {what} {a.class_name}",
                          context=tracing.extract_task(a.creation_spec), **attrs) as sp:
            await self._create_untraced(a)
            sp.set_attribute("ember.actor.state", A.State.Name(a.state))
            if a.state == A.ALIVE:
                sp.set_attribute("ember.worker_id", a.address.worker_id)
                sp.set_attribute("ember.node_id", a.address.node_id)
            elif a.state == A.DEAD:
                tracing.set_error(sp, a.death_cause)

    async def _create_untraced(self, a: common_pb2.ActorInfo) -> None:
        spec = a.creation_spec
        attempts = backoff.Attempts(backoff.FOREVER)  # no raylet yet, or a lease that failed
        while a.state != A.DEAD:
            addr = self._first_raylet(a)
            lease_id = os.urandom(16)
            lease = None
            if addr is not None:
                try:
                    lease = await self._lease(a, lease_id, addr)
                except rpc.Infeasible as e:
                    await self._execute(a, self.policy.unschedulable(a, str(e)))
                    return
            if lease is None:
                await asyncio.sleep(attempts.failed() or backoff.FOREVER.max_s)
                continue
            grant, addr = lease.grant, lease.raylet_address
            w = grant.worker_address
            spec.gpu_ids[:] = list(grant.gpu_ids)
            spec.attempt = a.num_restarts
            a.lease_id, a.raylet_address = lease_id, addr
            stub = core_worker_pb2_grpc.CoreWorkerStub(self._channels.get(f"{w.ip}:{w.port}"))
            push = spec
            if tracing.enabled():  # __init__ runs as a child of this creation span
                push = common_pb2.TaskSpec()
                push.CopyFrom(spec)
                tracing.inject_task(push)
            try:
                reply = await stub.PushTask(core_worker_pb2.PushTaskRequest(spec=push),
                                            metadata=tracing.metadata())
            except grpc.aio.AioRpcError as e:
                log.warning("actor %s: worker died during creation (%s)", a.actor_id.hex()[:8], e.code().name)
                await self._release_lease(a)
                d = self.policy.creation_worker_died(a, e.code().name)
                await self._execute(a, d)
                if isinstance(d, Die):
                    return
                continue
            if reply.is_application_error:
                await self._execute(a, self.policy.creation_failed(reply.error_message))
                return
            a.state = A.ALIVE
            a.address.CopyFrom(w)
            a.pid = grant.pid
            a.incarnation += 1
            self.by_worker[w.worker_id] = a.actor_id
            await self._save(a)
            return

    async def _lease(self, a: common_pb2.ActorInfo, lease_id: bytes, addr: str) -> LeaseGrant | None:
        """Leases a dedicated worker for the actor, starting at addr and following spillback.
        None when no raylet answered (the caller retries later); Infeasible when no node can
        ever host the actor."""
        spec = a.creation_spec
        request = raylet_pb2.RequestWorkerLeaseRequest(
            lease_id=lease_id, resources=spec.resources, job_id=spec.job_id, name=spec.name,
            actor_id=a.actor_id, placement_group_id=spec.placement_group_id,
            placement_group_bundle_index=spec.placement_group_bundle_index,
            serialized_runtime_env=spec.serialized_runtime_env, label_selector=spec.labels.label_selector,
            fallback_label_selectors=spec.labels.fallback_strategy,
            retriable=spec.actor_creation.max_restarts != 0)
        try:
            return await self.raylets.request_worker_lease(
                request, address=addr, retry=backoff.NO_RETRY, metadata=tracing.metadata(),
                keep_trying=lambda: a.state != A.DEAD)
        except rpc.Infeasible:
            raise
        except rpc.ServiceError as e:
            log.info("actor %s: lease request to %s failed (%s)", a.actor_id.hex()[:8], addr, e)
            return None
