"""Owner-side task submission: dependency resolution, worker leases, pushes and retries.

Tasks with the same resource shape share a queue. For a queue with work, the submitter asks the
local raylet for worker leases (ember_common.raylet_client follows spillback redirects to other
raylets and retries under the kit's backoff policy), pushes tasks
straight to leased workers over gRPC, reuses a lease for the next queued task of the same shape,
and gives it back when the queue stays empty for `lease_linger_s`. No GCS round trip per task.
Runs entirely on the CoreWorker's loop thread.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import os
from typing import TYPE_CHECKING, Any, Callable

import grpc

from ember import exceptions as exc
from ember_common.proto import common_pb2, core_worker_pb2, raylet_pb2

from ember_common import rpc, tracing

if TYPE_CHECKING:
    from .core_worker import CoreWorker
    from .object_ref import ObjectRef

log = logging.getLogger(__name__)

SchedulingKey = tuple[tuple[str, float], ...]


class TaskEntry:
    __slots__ = ("spec", "arg_refs", "retries_left", "key", "cancelled", "lease", "pending_deps")

    def __init__(self, spec: common_pb2.TaskSpec, arg_refs: list[ObjectRef], retries_left: int | None,
                 key: SchedulingKey = ()) -> None:
        self.spec = spec
        self.arg_refs = arg_refs  # keeps top-level argument objects alive until the task ends
        self.retries_left = retries_left
        self.key: SchedulingKey = key  # resource shape (tasks only)
        self.cancelled = False
        self.lease: Lease | None = None
        self.pending_deps = 0


class Lease:
    __slots__ = ("lease_id", "raylet_address", "worker_address", "stub", "gpu_ids", "inflight",
                 "linger", "dead")

    def __init__(self, lease_id: bytes, raylet_address: str, grant: raylet_pb2.Grant, stub: Any) -> None:
        self.lease_id = lease_id
        self.raylet_address = raylet_address
        a = grant.worker_address
        self.worker_address = f"{a.ip}:{a.port}"
        self.stub = stub
        self.gpu_ids = list(grant.gpu_ids)
        self.inflight = 0
        self.linger: asyncio.TimerHandle | None = None
        self.dead = False


class SchedulingQueue:
    __slots__ = ("tasks", "leases", "pending_requests")

    def __init__(self) -> None:
        self.tasks: collections.deque[TaskEntry] = collections.deque()
        self.leases: list[Lease] = []
        self.pending_requests: dict[bytes, str] = {}  # lease_id -> raylet address


class TaskSubmitter:
    def __init__(self, core: CoreWorker) -> None:
        self.core = core
        self.cfg = core.config
        self.queues: dict[SchedulingKey, SchedulingQueue] = {}
        self.tasks: dict[bytes, TaskEntry] = {}  # task_id -> entry, until done
        self._closing = False
        self._warned_infeasible: set[SchedulingKey] = set()

    # -------------------------------------------------------------- submission
    def submit(self, entry: TaskEntry) -> None:
        """Loop thread: resolves owned top-level arguments, then queues the task."""
        self.tasks[entry.spec.task_id] = entry
        self.resolve_then(entry, self._enqueue)

    def resolve_then(self, entry: TaskEntry, then: Callable[[TaskEntry], None]) -> None:
        """Inlines the values of owned top-level ref arguments (waiting for them if needed),
        then calls then(entry). Refs to shared-memory objects and borrowed refs stay refs."""
        waits = []
        for i, arg in enumerate(entry.spec.args):
            if arg.HasField("ref") and arg.ref.owner.worker_id == self.core.worker_id:
                oid = arg.ref.object_id
                obj = self.core._objects.get(oid)
                if obj is None:
                    waits.append((i, oid))
                else:
                    _resolve_arg(entry.spec.args[i], obj)
        if waits:
            entry.pending_deps = len(waits)
            asyncio.ensure_future(self._resolve(entry, waits, then))
        else:
            then(entry)

    async def _resolve(self, entry: TaskEntry, waits: list[tuple[int, bytes]],
                       then: Callable[[TaskEntry], None]) -> None:
        refs = {r._id: r for r in entry.arg_refs}
        for i, oid in waits:
            _resolve_arg(entry.spec.args[i], await self.core.wait_object(refs[oid], None))
        entry.pending_deps = 0
        if entry.cancelled:
            return
        then(entry)

    def _enqueue(self, entry: TaskEntry) -> None:
        q = self.queues.get(entry.key)
        if q is None:
            q = self.queues[entry.key] = SchedulingQueue()
        q.tasks.append(entry)
        self._pump(q)

    def _pump(self, q: SchedulingQueue) -> None:
        limit = self.cfg.max_tasks_in_flight_per_worker
        for lease in q.leases:
            while q.tasks and lease.inflight < limit and not lease.dead:
                if lease.linger is not None:
                    lease.linger.cancel()
                    lease.linger = None
                self._push(q, lease, q.tasks.popleft())
        want = min(len(q.tasks), self.cfg.max_pending_lease_requests) - len(q.pending_requests)
        for _ in range(want):
            lease_id = os.urandom(16)
            q.pending_requests[lease_id] = self.core.raylet_address
            asyncio.ensure_future(self._request_lease(q, lease_id, self.core.raylet_address))
        if not q.tasks and q.pending_requests:
            for lease_id, addr in list(q.pending_requests.items()):
                asyncio.ensure_future(self._cancel_lease_request(addr, lease_id))

    async def _cancel_lease_request(self, addr: str, lease_id: bytes) -> None:
        try:
            await self.core.raylet.cancel_worker_lease(lease_id, address=addr, timeout_s=10)
        except rpc.ServiceError:
            pass  # the raylet is gone; so is the request

    # -------------------------------------------------------------- leases
    async def _request_lease(self, q: SchedulingQueue, lease_id: bytes, addr: str) -> None:
        resources = dict(q.tasks[0].spec.resources) if q.tasks else None
        name = q.tasks[0].spec.name if q.tasks else ""
        if resources is None:
            q.pending_requests.pop(lease_id, None)
            return
        try:
            granted = await self.core.raylet.request_worker_lease(
                raylet_pb2.RequestWorkerLeaseRequest(
                    lease_id=lease_id, resources=resources, job_id=self.core.job_id, name=name,
                    owner_worker_id=self.core.worker_id),
                address=addr, keep_trying=lambda: not self._closing,
                on_hop=lambda a: q.pending_requests.__setitem__(lease_id, a),
                metadata=tracing.metadata_from(q.tasks[0].spec.trace_context) if q.tasks else None)
        except rpc.Infeasible as e:
            q.pending_requests.pop(lease_id, None)
            self._fail_queue(q, exc.TaskUnschedulableError(str(e)))
            return
        except rpc.ServiceError as e:
            q.pending_requests.pop(lease_id, None)
            if not self._closing:
                why = "is unreachable" if rpc.is_transient(e) else "refused the lease request"
                self._fail_queue(q, exc.RaySystemError(f"the local raylet at {addr} {why}: {e}"))
            return
        q.pending_requests.pop(lease_id, None)
        if granted is not None:
            lease = Lease(lease_id, granted.raylet_address, granted.grant,
                          self.core.worker_stub(_addr(granted.grant.worker_address)))
            q.leases.append(lease)
            if not q.tasks:
                self._return_lease(q, lease, disconnect=False)
            else:
                self._pump(q)
        else:  # cancelled
            self._pump(q)

    def _fail_queue(self, q: SchedulingQueue, error: BaseException) -> None:
        while q.tasks:
            self._finish_with_error(q.tasks.popleft(), error)

    def _return_lease(self, q: SchedulingQueue, lease: Lease, disconnect: bool) -> None:
        if lease in q.leases:
            q.leases.remove(lease)
        if lease.linger is not None:
            lease.linger.cancel()
            lease.linger = None
        asyncio.ensure_future(self._send_return(lease, disconnect))

    async def _send_return(self, lease: Lease, disconnect: bool) -> None:
        try:
            await self.core.raylet.return_worker(lease.lease_id, disconnect,
                                                 address=lease.raylet_address, timeout_s=10)
        except rpc.ServiceError:
            pass  # the raylet died; the lease died with it

    def _maybe_linger(self, q: SchedulingQueue, lease: Lease) -> None:
        if lease.inflight or q.tasks or lease.dead:
            return
        if self._closing or self.cfg.lease_linger_s <= 0:
            self._return_lease(q, lease, disconnect=False)
        elif lease.linger is None:
            lease.linger = self.core.loop.call_later(
                self.cfg.lease_linger_s, self._linger_expired, q, lease)

    def _linger_expired(self, q: SchedulingQueue, lease: Lease) -> None:
        lease.linger = None
        if not lease.inflight and not q.tasks:
            self._return_lease(q, lease, disconnect=False)

    # -------------------------------------------------------------- pushes
    def _push(self, q: SchedulingQueue, lease: Lease, entry: TaskEntry) -> None:
        lease.inflight += 1
        entry.lease = lease
        spec = entry.spec
        del spec.gpu_ids[:]
        spec.gpu_ids.extend(lease.gpu_ids)
        asyncio.ensure_future(self._do_push(q, lease, entry))

    async def _do_push(self, q: SchedulingQueue, lease: Lease, entry: TaskEntry) -> None:
        try:
            reply = await self.core.task_streams.push(lease.worker_address, entry.spec)
        except grpc.aio.AioRpcError as e:
            reply = None
            err = e
        lease.inflight -= 1
        entry.lease = None
        if reply is None:
            if not lease.dead:
                lease.dead = True
                self._return_lease(q, lease, disconnect=True)
            self._on_worker_failure(q, entry, lease, err)
        else:
            self._on_reply(q, entry, reply)
            self._maybe_linger(q, lease)
        self._pump(q)

    def _on_reply(self, q: SchedulingQueue, entry: TaskEntry, reply: core_worker_pb2.PushTaskReply) -> None:
        if entry.cancelled:
            self._finish_with_error(entry, exc.TaskCancelledError(entry.spec.task_id.hex()))
            return
        if reply.is_application_error and entry.retries_left != 0 and self._should_retry(entry, reply):
            entry.retries_left -= 1
            entry.spec.attempt += 1
            q.tasks.appendleft(entry)
            return
        self.complete(entry, reply)

    def complete(self, entry: TaskEntry, reply: core_worker_pb2.PushTaskReply) -> None:
        """Records a finished task's results (or, for a generator, its item count)."""
        self.tasks.pop(entry.spec.task_id, None)
        if entry.spec.streaming:
            st = self.core.generators.get(entry.spec.task_id)
            if st is not None:
                st.finish(reply.num_streamed)
            return
        if reply.nested:  # refs nested in the results: the results hold them
            self.core.refs.take_nested(reply.nested)
        for ret in reply.returns:
            self.core.set_object(ret)

    def _should_retry(self, entry: TaskEntry, reply: core_worker_pb2.PushTaskReply) -> bool:
        allowed = entry.spec.retry_exceptions
        return bool(allowed)

    def _on_worker_failure(self, q: SchedulingQueue, entry: TaskEntry, lease: Lease,
                           err: grpc.aio.AioRpcError) -> None:
        if entry.cancelled:
            self._finish_with_error(entry, exc.TaskCancelledError(entry.spec.task_id.hex()))
        elif entry.retries_left != 0 and not self._closing:
            entry.retries_left -= 1
            entry.spec.attempt += 1
            log.info("task %s: worker %s died (%s); retrying (attempt %d)", entry.spec.name,
                     lease.worker_address, err.code().name, entry.spec.attempt + 1)
            q.tasks.appendleft(entry)
        else:
            self._finish_with_error(entry, exc.WorkerCrashedError(
                f"The worker running {entry.spec.name}() died unexpectedly ({err.code().name}: "
                f"{err.details()}); retries exhausted after {entry.spec.attempt + 1} attempt(s)."))

    def _finish_with_error(self, entry: TaskEntry, error: BaseException) -> None:
        self.tasks.pop(entry.spec.task_id, None)
        if entry.spec.streaming:
            st = self.core.generators.get(entry.spec.task_id)
            if st is not None:
                st.fail(entry.spec.task_id, error)
            return
        for oid in entry.spec.return_ids:
            self.core.set_error(oid, error)

    # -------------------------------------------------------------- cancel / shutdown
    async def cancel(self, task_id: bytes, force: bool) -> bool:
        entry = self.tasks.get(task_id)
        if entry is None:
            return False
        entry.cancelled = True
        q = self.queues.get(entry.key)
        if q is not None and entry in q.tasks:
            q.tasks.remove(entry)
            self._finish_with_error(entry, exc.TaskCancelledError(task_id.hex()))
            return True
        if entry.pending_deps:
            self._finish_with_error(entry, exc.TaskCancelledError(task_id.hex()))
            return True
        lease = entry.lease
        if lease is not None:
            try:
                await lease.stub.CancelTask(core_worker_pb2.CancelTaskRequest(task_id=task_id, force=force),
                                            timeout=10)
            except grpc.aio.AioRpcError:
                pass  # the worker is gone; the push fails and reports the cancellation
        return True

    async def shutdown(self) -> None:
        self._closing = True
        pending = []
        for q in self.queues.values():
            for lease in list(q.leases):
                q.leases.remove(lease)
                if lease.linger is not None:
                    lease.linger.cancel()
                pending.append(self._send_return(lease, disconnect=False))
            for lease_id, addr in list(q.pending_requests.items()):
                pending.append(self._cancel_lease_request(addr, lease_id))
        await asyncio.gather(*pending)


def _resolve_arg(arg: common_pb2.TaskArg, obj: common_pb2.ReturnObject) -> None:
    """An owned argument is ready: inline small values; tell the worker where big ones are."""
    if obj.in_plasma:
        arg.ref.resolved.CopyFrom(obj)
    else:
        arg.value.CopyFrom(obj.value)


def _addr(a: common_pb2.Address) -> str:
    return f"{a.ip}:{a.port}"
