"""Owner-side task submission: the I/O driver of the task queue (task_queue.py).

Tasks with the same resource shape share a queue. The pure TaskQueue decides (lease requests,
pushes, retries, returns after `lease_linger_s` idle); this module resolves owned arguments,
carries out its instructions over gRPC (the kit's RayletClient follows spillback redirects and
retries under the kit's backoff policy; pushes go straight to leased workers on the task
stream) and feeds the outcomes back. No GCS round trip per task. Runs entirely on the
CoreWorker's loop thread.
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Callable, Protocol

import grpc

from ember import exceptions as exc
from ember_common import envvars, rpc, tracing
from ember_common.proto import common_pb2, core_worker_pb2, raylet_pb2

from .. import runtime_env
from ..api.scheduling import Placement
from ..telemetry import task_events
from . import task_errors
from .task_queue import (
    CancelLeaseRequest,
    Complete,
    Fail,
    GiveBack,
    Instruction,
    Lease,
    Push,
    RequestLease,
    ReturnLease,
    SchedulingKey,
    SetTimer,
    TaskEntry,
    TaskQueue,
)
from .task_queue_types import NODE_DIED, OUT_OF_MEMORY, DeathCause

if TYPE_CHECKING:
    from ember_common.config import Config
    from ember_common.proto import core_worker_pb2_grpc
    from ember_common.raylet_client import RayletClient

    from ..objects.object_ref import ObjectRef
    from ..transport.task_stream import TaskStreams
    from .generator import GeneratorState
    from .memory_store import MemoryStore
    from .references import References

log = logging.getLogger(__name__)
__all__ = ["SchedulingKey", "TaskEntry", "TaskSubmitter"]


class SubmitterCore(Protocol):
    """What the submitter needs of the core worker (CoreWorker, in core_worker.py)."""

    config: Config
    raylet_address: str
    raylet: RayletClient
    loop: asyncio.AbstractEventLoop
    job_id: bytes
    worker_id: str
    store: MemoryStore
    refs: References
    task_streams: TaskStreams
    generators: dict[bytes, GeneratorState]

    async def nodes(self, max_age_s: float = 0.0) -> dict[str, common_pb2.NodeInfo]: ...

    async def wait_object(self, ref: ObjectRef, timeout: float | None) -> common_pb2.ReturnObject: ...

    def worker_stub(self, address: str) -> core_worker_pb2_grpc.CoreWorkerAsyncStub: ...

    def set_object(self, ret: common_pb2.ReturnObject) -> None: ...

    def set_error(self, oid: bytes, error: BaseException) -> None: ...

    def record_lineage(self, entry: TaskEntry) -> None: ...

    def retry_after_lost_argument(self, entry: TaskEntry, reply: core_worker_pb2.PushTaskReply) -> bool: ...


class TaskSubmitter:
    """Carries out the TaskQueue's instructions; also finishes actor calls (complete/fail)."""

    def __init__(self, core: SubmitterCore) -> None:
        self.core = core
        cfg = core.config
        self.queue = TaskQueue(
            core.raylet_address, max_pending_lease_requests=cfg.max_pending_lease_requests,
            max_tasks_in_flight_per_worker=cfg.max_tasks_in_flight_per_worker,
            lease_linger_s=cfg.lease_linger_s, clock=core.loop.time,
            classify=task_errors.error_in_allowlist, pipeline_budget_s=cfg.pipeline_budget_s,
            task_oom_retries=int(envvars.value("EMBER_TASK_OOM_RETRIES")))
        self.tasks: dict[bytes, TaskEntry] = {}  # task_id -> entry, until done
        self._timer: asyncio.TimerHandle | None = None
        self._spread_next = 0  # round-robin position of SPREAD lease requests

    # -------------------------------------------------------------- submission
    def submit(self, entry: TaskEntry) -> None:
        """Loop thread: resolves owned top-level arguments, then queues the task."""
        self.tasks[entry.spec.task_id] = entry
        task_events.submitted(entry)
        self.resolve_then(entry, self._enqueue)

    def resolve_then(self, entry: TaskEntry, then: Callable[[TaskEntry], None]) -> None:
        """Inlines the values of owned top-level ref arguments (waiting for them if needed),
        then calls then(entry). Refs to shared-memory objects and borrowed refs stay refs."""
        waits = []
        me = self.core.worker_id
        get = self.core.store.get
        for i, arg in enumerate(entry.spec.args):
            if arg.HasField("ref") and arg.ref.owner.worker_id == me:
                oid = arg.ref.object_id
                obj = get(oid)
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
        refs = {r.binary(): r for r in entry.arg_refs}
        for i, oid in waits:
            _resolve_arg(entry.spec.args[i], await self.core.wait_object(refs[oid], None))
        entry.pending_deps = 0
        if entry.cancelled:
            return
        then(entry)

    def _enqueue(self, entry: TaskEntry) -> None:
        if entry.arg_refs:  # an argument that is a failed task's result fails this task now
            error = task_errors.failed_dependency(entry.spec)
            if error is not None:
                self.finish_with_error(entry, error)
                return
        task_events.record(entry, task_events.PENDING_NODE_ASSIGNMENT)
        self._run(self.queue.enqueue(entry))

    # -------------------------------------------------------------- instructions
    def _run(self, out: list[Instruction]) -> None:
        # isinstance chain, most frequent first (cheaper than `match` on this hot path).
        for ins in out:
            if isinstance(ins, Push):
                asyncio.ensure_future(self._do_push(ins.lease, ins.entry))
            elif isinstance(ins, Complete):
                self.complete(ins.entry, ins.reply)
            elif isinstance(ins, SetTimer):
                self._arm(ins.at)
            elif isinstance(ins, RequestLease):
                asyncio.ensure_future(self._request_lease(ins.key, ins.lease_id, ins.address))
            elif isinstance(ins, ReturnLease):
                asyncio.ensure_future(self._send_return(ins.lease, ins.disconnect))
            elif isinstance(ins, Fail):
                self.finish_with_error(ins.entry, ins.error)
            elif isinstance(ins, GiveBack):
                self.core.task_streams.give_back(ins.lease.worker_address)
            else:
                asyncio.ensure_future(self._cancel_lease_request(ins.address, ins.lease_id))

    def _arm(self, at: float) -> None:
        if self._timer is not None:
            if self._timer.when() <= at:
                return
            self._timer.cancel()
        self._timer = self.core.loop.call_at(at, self._expired)

    def _expired(self) -> None:
        self._timer = None
        self._run(self.queue.expire(self.core.loop.time()))

    async def _cancel_lease_request(self, addr: str, lease_id: bytes) -> None:
        try:
            await self.core.raylet.cancel_worker_lease(lease_id, address=addr, timeout_s=10)
        except rpc.ServiceError:
            pass  # the raylet is gone; so is the request

    async def _request_lease(self, key: SchedulingKey, lease_id: bytes, addr: str) -> None:
        spec = self.queue.request_started(key, lease_id)
        if spec is None:
            return
        request = raylet_pb2.RequestWorkerLeaseRequest(
            lease_id=lease_id, resources=dict(spec.resources), job_id=self.core.job_id,
            name=spec.name, owner_worker_id=self.core.worker_id,
            serialized_runtime_env=spec.serialized_runtime_env)
        if spec.HasField("labels"):  # read only when set: an empty field read would grow the spec
            request.label_selector.update(spec.labels.label_selector)
            request.fallback_label_selectors.extend(spec.labels.fallback_strategy)
        request.retriable = spec.max_retries != 0  # the memory monitor kills retriable work first
        placement = key[-1] if key and isinstance(key[-1], Placement) else None
        if placement is not None:
            if placement.pg_id:
                request.placement_group_id = placement.pg_id
                request.placement_group_bundle_index = placement.bundle_index
            else:
                try:
                    routed = await self._route(placement, request, spec.name)
                except exc.TaskUnschedulableError as e:
                    self._run(self.queue.lease_failed(key, lease_id, e))
                    return
                if routed is not None and routed != addr:
                    addr = routed
                    self.queue.request_moved(key, lease_id, addr)
        try:
            granted = await self.core.raylet.request_worker_lease(
                request, address=addr, keep_trying=lambda: not self.queue.closing,
                on_hop=lambda a: self.queue.request_moved(key, lease_id, a),
                metadata=tracing.metadata_from(spec.trace_parent))
        except rpc.Infeasible as e:
            # The raylet could not set up the runtime env: every queued task of this env fails
            # with RuntimeEnvSetupError (not retried: the same env would fail again).
            setup = runtime_env.setup_error_from(str(e))
            failure: BaseException = (exc.TaskUnschedulableError(str(e)) if setup is None else
                                      exc.RuntimeEnvSetupError(setup, task_name=spec.name))
            self._run(self.queue.lease_failed(key, lease_id, failure))
            return
        except rpc.ServiceError as e:
            error = None
            if not self.queue.closing:
                why = "is unreachable" if rpc.is_transient(e) else "refused the lease request"
                error = exc.RaySystemError(f"the local raylet at {addr} {why}: {e}")
            self._run(self.queue.lease_failed(key, lease_id, error))
            return
        if granted is None:  # cancelled
            self._run(self.queue.lease_cancelled(key, lease_id))
            return
        g = granted.grant
        task_events.leased(_addr(g.worker_address), g.worker_address.node_id, g.worker_address.worker_id, g.pid)
        self._run(self.queue.lease_granted(key, lease_id, granted.raylet_address,
                                           _addr(g.worker_address), list(g.gpu_ids), g.capacity))

    async def _route(self, placement: Placement, request: raylet_pb2.RequestWorkerLeaseRequest,
                     name: str) -> str | None:
        """The raylet to ask first for a node-affine or spread task (None: the home raylet).
        Hard affinity pins the request there (spillback_count 1: grant or queue, never spill)
        and fails when the node is dead or unknown; soft affinity starts there when it is
        alive; SPREAD starts at the alive nodes in turn."""
        nodes = await self.core.nodes(max_age_s=1.0)
        alive = sorted((n for n in nodes.values() if n.state == common_pb2.NodeInfo.ALIVE),
                       key=lambda n: n.node_id)
        if placement.spread:
            if not alive:
                return None
            self._spread_next = (self._spread_next + 1) % len(alive)
            request.prefer_here = True  # that raylet grants it if it fits (no hybrid spreading)
            return alive[self._spread_next].raylet_address
        node = nodes.get(placement.node_id)
        if node is not None and node.state == common_pb2.NodeInfo.ALIVE:
            if not placement.soft:
                request.spillback_count = 1
            request.prefer_here = True
            return node.raylet_address
        if placement.soft:
            return None
        state = "unknown to the cluster" if node is None else "dead"
        raise exc.TaskUnschedulableError(
            f"{name}() cannot be scheduled: NodeAffinitySchedulingStrategy(soft=False) names node "
            f"{placement.node_id}, which is {state}")

    async def _send_return(self, lease: Lease, disconnect: bool) -> None:
        try:
            await self.core.raylet.return_worker(lease.lease_id, disconnect,
                                                 address=lease.raylet_address, timeout_s=10)
        except rpc.ServiceError:
            pass  # the raylet died; the lease died with it

    async def _do_push(self, lease: Lease, entry: TaskEntry) -> None:
        task_events.pushed(entry, lease.worker_address)
        try:
            reply = await self.core.task_streams.push(lease.worker_address, entry.spec)
        except grpc.aio.AioRpcError as e:
            task_events.push_failed(entry, e.code().name, e.details() or "")
            cause = None if self.queue.closing else await self._death_cause(lease, entry)
            self._run(self.queue.push_failed(entry, e.code().name, e.details() or "", cause))
            return
        if reply.is_application_error:  # this attempt's error, before a retry is decided
            task_events.replied(entry, reply)
        self._run(self.queue.push_replied(entry, reply))

    async def _death_cause(self, lease: Lease, entry: TaskEntry) -> DeathCause | None:
        """Why the lease's worker died, from its raylet (as Ray's GetWorkerFailureCause): killed
        by the memory monitor, or the raylet itself is unreachable (the node died)."""
        try:
            cause = await self.core.raylet.get_worker_failure_cause(
                lease.lease_id, address=lease.raylet_address, timeout_s=5.0)
        except rpc.ServiceError as e:
            if not rpc.is_transient(e):
                return None  # e.g. an older raylet without the call: a plain worker crash
            return DeathCause(NODE_DIED, f"The node running {entry.spec.name}() died: its raylet "
                                         f"at {lease.raylet_address} is unreachable ({e})")
        if cause is None or cause.error_type != OUT_OF_MEMORY:
            return None
        return DeathCause(OUT_OF_MEMORY, cause.error_message, cause.fail_task_immediately)

    # -------------------------------------------------------------- results
    def complete(self, entry: TaskEntry, reply: core_worker_pb2.PushTaskReply) -> None:
        """Records a finished task's results (or, for a generator, its item count)."""
        if entry.arg_refs and not reply.is_application_error and reply.returns and \
                self.core.retry_after_lost_argument(entry, reply):
            return  # its worker could not fetch a lost owned argument: rebuilt, then resubmitted
        self.tasks.pop(entry.spec.task_id, None)
        task_events.replied(entry, reply)
        if entry.spec.streaming:
            st = self.core.generators.get(entry.spec.task_id)
            if st is not None:
                # items the worker could not report travel in the reply: they end the stream
                first = reply.num_streamed - len(reply.returns)
                for k, item in enumerate(reply.returns):
                    st.add(first + k, item)
                st.finish(reply.num_streamed)
            return
        if reply.nested:  # refs nested in the results: the results hold them
            self.core.refs.take_nested(reply.nested)
        shared = False
        for ret in reply.returns:
            self.core.set_object(ret)
            shared = shared or ret.in_plasma
        if shared:  # a return in shared memory can be lost with its node: keep its lineage
            self.core.record_lineage(entry)

    def finish_with_error(self, entry: TaskEntry, error: BaseException) -> None:
        """The task (or actor call) failed with error: its returns (or stream) raise it."""
        self.tasks.pop(entry.spec.task_id, None)
        task_events.failed(entry, error)
        if entry.spec.streaming:
            st = self.core.generators.get(entry.spec.task_id)
            if st is not None:
                st.fail(entry.spec.task_id, error)
            return
        for oid in entry.spec.return_ids:
            self.core.set_error(oid, error)

    # -------------------------------------------------------------- cancel / shutdown
    async def cancel(self, task_id: bytes, force: bool, recursive: bool = True) -> bool:
        """Cancels a task: dropped if still queued, else the worker is asked to stop it (and,
        recursive, to cancel what it submitted)."""
        entry = self.tasks.get(task_id)
        if entry is None:
            return False
        entry.cancelled = True
        if self.queue.remove(entry) or entry.pending_deps:
            self.finish_with_error(entry, exc.TaskCancelledError(task_id.hex()))
            return True
        # Pushed: the worker stops it once it runs. A push still on its way (not started there
        # yet) is asked again until it starts or ends (bounded: 400 x 50 ms).
        for _ in range(400):
            lease = entry.lease
            if lease is None or self.tasks.get(task_id) is not entry:
                break
            try:
                reply = await self.core.worker_stub(lease.worker_address).CancelTask(
                    core_worker_pb2.CancelTaskRequest(task_id=task_id, force=force, recursive=recursive),
                    timeout=10)
            except grpc.aio.AioRpcError:
                break  # the worker is gone; the push fails and reports the cancellation
            if reply.attempted:
                break
            await asyncio.sleep(0.05)
        return True

    async def shutdown(self) -> None:
        """Returns every lease and cancels every lease request."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending = []
        for ins in self.queue.shutdown():
            if isinstance(ins, ReturnLease):
                pending.append(self._send_return(ins.lease, ins.disconnect))
            elif isinstance(ins, CancelLeaseRequest):
                pending.append(self._cancel_lease_request(ins.address, ins.lease_id))
        await asyncio.gather(*pending)


def _resolve_arg(arg: common_pb2.TaskArg, obj: common_pb2.ReturnObject) -> None:
    """An owned argument is ready: inline small values; tell the worker where big ones are."""
    if obj.in_plasma:
        arg.ref.resolved.CopyFrom(obj)
    else:
        arg.value.CopyFrom(obj.value)


def _addr(a: common_pb2.Address) -> str:
    return f"{a.ip}:{a.port}"
