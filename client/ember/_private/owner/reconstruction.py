"""Reconstruction: the I/O driver of the lineage policy (lineage.py), on the core loop.

`get` of an owned object whose every copy in shared memory is lost (its node died, or the pull
from it failed) calls `Reconstructor.recover(oid)`. The policy says whether and how the task that
made it runs again; this module then

1. looks at the task's owned arguments: one whose value is gone (freed since, or in shared
   memory on nodes that are all dead) is rebuilt first, the same way, recursively;
2. forgets the lost entries of the returns (so `get` waits for the new ones) and resubmits the
   task through the task submitter's public entry (`TaskSubmitter.submit`: the usual argument
   resolution, leases and retries), holding its argument refs until it ends;
3. tells the policy when the run ended (its first referenced return is stored, a value or an
   error), so that a later loss may start another run.

Concurrent gets of a lost object share one run (`InFlight`). A `reconstruct <name>` span wraps
each run (tracing on), with the re-execution's submit span under it; the count of runs is the
`ember_object_reconstructions_total` metric (metrics on) and `Lineage.stats()`.
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Protocol

import grpc

from ember import exceptions as exc
from ember_common import metrics, tracing
from ember_common.proto import common_pb2, objmgr_pb2, objmgr_pb2_grpc

from ..objects.object_ref import ObjectRef, OwnerAddress
from ..objects.serialization import deserialize_proto
from .lineage import InFlight, Lineage, is_put, task_of
from .task_queue import TaskEntry

if TYPE_CHECKING:
    from .memory_store import MemoryStore
    from .reference_table import ReferenceTable
    from .task_submitter import TaskSubmitter

log = logging.getLogger(__name__)
PROBE_TIMEOUT_S = 2.0  # an object manager that does not answer this soon counts as lost
MAX_DEPTH = 100  # arguments rebuilt recursively, at most this deep
# A get rebuilds one lost object at most this many times (each run draws on max_retries too).
MAX_RECOVERIES = 10


_counted: list[Lineage] = []  # the lineage the metric reads: this process's current core's


def register_metric(lineage: Lineage) -> None:
    """The reconstructions counter in this process's metrics registry (once per process; a
    later core's lineage replaces the one it reads; no-op while metrics are off)."""
    first = not _counted
    _counted[:] = [lineage]
    if first and metrics.enabled():
        metrics.gauge("ember_object_reconstructions_total",
                      "Lost objects this owner started rebuilding from their lineage",
                      lambda: float(_counted[0].reconstructions))
    elif first:
        _counted.clear()  # metrics off: nothing registered, try again with the next core


class ReconstructorCore(Protocol):
    """What reconstruction needs of the core worker (CoreWorker, in core_worker.py)."""

    address: OwnerAddress
    node_id: str
    worker_id: str
    loop: asyncio.AbstractEventLoop
    ref_table: ReferenceTable
    store: MemoryStore
    submitter: TaskSubmitter

    def channel(self, address: str) -> grpc.aio.Channel: ...

    async def nodes(self, max_age_s: float = 0.0) -> dict[str, common_pb2.NodeInfo]: ...

    async def wait_object(self, ref: ObjectRef, timeout: float | None) -> common_pb2.ReturnObject: ...

    async def materialize_async(self, entry: common_pb2.ReturnObject, owner: OwnerAddress | None = None) -> Any: ...


class Reconstructor:
    """Rebuilds lost owned objects from their lineage (loop thread only)."""

    def __init__(self, core: ReconstructorCore) -> None:
        self.core = core
        self.lineage = core.ref_table.lineage
        register_metric(self.lineage)

    def record(self, entry: TaskEntry) -> None:
        """A normal task finished with a return in shared memory: its owner keeps what
        rebuilding the return needs while the return is referenced (actor calls and streams
        are not recorded)."""
        spec = entry.spec
        if spec.actor_id or spec.streaming:
            return
        self.lineage.record(spec, entry.key, entry.retry_allowlist, entry.retries_left,
                            self.core.ref_table.is_referenced)

    def recoverable(self, entry: common_pb2.ReturnObject, ref: ObjectRef) -> bool:
        """A task return in shared memory that this process owns (a put() value has no
        lineage: its loss is reported as it is)."""
        oid = ref.binary()
        return entry.in_plasma and not is_put(oid) and self.core.ref_table.owns(oid)

    async def read(self, entry: common_pb2.ReturnObject, ref: ObjectRef,
                   timeout: float | None) -> Any:
        """The value of entry; when every copy of the owned object is lost, its task runs
        again (lost arguments rebuilt first) and the new value is read."""
        core = self.core
        for _ in range(MAX_RECOVERIES):
            try:
                return await core.materialize_async(entry, ref.owner_address)
            except exc.ObjectLostError as e:
                if not self.recoverable(entry, ref):
                    raise
                lost = str(e)  # not the exception: its traceback would hold this frame's refs
            log.info("object %s is lost (%s); reconstructing it", ref.hex(), lost)
            try:
                await self.recover(ref.binary())
            except exc.ObjectLostError as why:  # say both: why it was lost, why not rebuilt
                raise type(why)(why.object_id, f"{why} [it was lost: {lost}]") from None
            entry = await core.wait_object(ref, timeout)
        raise exc.ObjectReconstructionFailedError(
            ref.hex(), f"Object {ref.hex()} was lost again after {MAX_RECOVERIES} reconstructions")

    async def recover(self, oid: bytes, depth: int = 0) -> None:
        """Starts rebuilding the owned object oid (or joins the run already going on); returns
        once its task is resubmitted. Raises an ObjectLostError subclass naming why it cannot
        be rebuilt. Afterwards `wait_object` gives the new entry."""
        plan = self.lineage.plan(oid)
        if isinstance(plan, InFlight):
            return
        spec = plan.spec
        try:
            if tracing.enabled():
                attrs: dict[str, Any] = {"ember.object_id": oid.hex(), "ember.attempt": spec.attempt,
                                         "ember.task_id": plan.task_id.hex()}
                with tracing.span(f"reconstruct {spec.name}", **attrs):
                    arg_refs = await self._prepare(spec, depth)
                    tracing.task_submitted(spec, f"submit {spec.name}", "ember.task_id", plan.task_id)
            else:
                arg_refs = await self._prepare(spec, depth)
        except BaseException:
            self.lineage.finished(plan.task_id)
            raise
        store = self.core.store
        for rid in spec.return_ids:
            store.pop(rid)
        log.info("reconstructing %s (task %s, attempt %d): object %s was lost", spec.name,
                 plan.task_id.hex(), spec.attempt + 1, oid.hex())
        entry = TaskEntry(spec, arg_refs, plan.retries_left, plan.key, plan.allowlist)
        watch = next((r for r in spec.return_ids if self.core.ref_table.is_referenced(r)), None)
        if watch is None:
            self.lineage.finished(plan.task_id)
        else:
            fut: asyncio.Future[common_pb2.ReturnObject] = self.core.loop.create_future()
            store.add_waiter(watch, fut)
            fut.add_done_callback(lambda _: self.lineage.finished(plan.task_id))
        self.core.submitter.submit(entry)

    def retry_after_lost_argument(self, entry: TaskEntry, error: common_pb2.ReturnObject) -> bool:
        """A task's worker could not fetch an argument (its reply's error, not the user's): when
        that argument is an owned task return that is lost, rebuild it and resubmit the task
        (one of the task's retries). True when that is under way."""
        spec = entry.spec
        if spec.actor_id or spec.streaming or entry.retries_left == 0:
            return False
        try:
            err = deserialize_proto(error.value)
            lost = bytes.fromhex(getattr(err, "object_id", "") or "")
        except Exception:
            return False
        if (not isinstance(err, exc.ObjectLostError) or isinstance(err, exc.OwnerDiedError)
                or is_put(lost) or not self.core.ref_table.owns(lost)
                or not any(r.binary() == lost for r in entry.arg_refs)
                or (task_of(lost) not in self.lineage)):
            return False
        if entry.retries_left is not None and entry.retries_left > 0:
            entry.retries_left -= 1
        spec.attempt += 1
        log.info("%s() could not fetch its argument %s (%s): rebuilding it, then retrying",
                 spec.name, lost.hex(), err)
        asyncio.ensure_future(self._rebuild_then_resubmit(entry, lost))
        return True

    async def _rebuild_then_resubmit(self, entry: TaskEntry, lost: bytes) -> None:
        submitter = self.core.submitter
        try:
            await self.recover(lost)
        except exc.ObjectLostError as why:
            submitter.finish_with_error(entry, why)
            return
        submitter.submit(entry)

    async def _prepare(self, spec: common_pb2.TaskSpec, depth: int) -> list[Any]:
        """The refs the rerun holds (its ref arguments); owned ones that are lost are rebuilt
        first and their stale locations cleared, so that the submitter resolves them again."""
        me = self.core.worker_id
        refs: list[Any] = []
        nodes: dict[str, bool] = {}
        for arg in spec.args:
            if not arg.HasField("ref"):
                continue
            r = arg.ref
            o = r.owner
            if o.worker_id != me:
                refs.append(ObjectRef(r.object_id, OwnerAddress(o.ip, o.port, o.worker_id, o.node_id),
                                      self.core))
                continue
            aid = r.object_id
            rt = self.core.ref_table
            if not rt.owns(aid):
                rt.add_owned(aid)  # its value was freed: owned again while the rerun needs it
            refs.append(ObjectRef(aid, self.core.address, self.core))
            r.ClearField("resolved")
            if not self.lineage.in_flight(task_of(aid)) and await self._lost(aid, nodes):
                if depth >= MAX_DEPTH:
                    raise exc.ObjectReconstructionFailedError(aid.hex(), (
                        f"Object {aid.hex()} is lost and cannot be reconstructed: more than "
                        f"{MAX_DEPTH} lost tasks deep in a chain of arguments"))
                await self.recover(aid, depth + 1)
        return refs

    async def _lost(self, oid: bytes, nodes: dict[str, bool]) -> bool:
        """No live copy of an owned object: no entry any more, or an entry in shared memory
        whose nodes are all dead."""
        entry = self.core.store.get(oid)
        if entry is None:
            return True
        if not entry.in_plasma:
            return False
        for nid in [entry.node_id, *self.core.store.copies(oid)]:
            if nid not in nodes:
                nodes[nid] = await self._node_alive(nid)
            if nodes[nid]:
                return False
        return True

    async def _node_alive(self, node_id: str) -> bool:
        """The GCS counts the node alive and its object manager answers."""
        if node_id == self.core.node_id:
            return True
        info = (await self.core.nodes(max_age_s=0.5)).get(node_id)
        if info is None or info.state != common_pb2.NodeInfo.ALIVE:
            return False
        stub = objmgr_pb2_grpc.ObjectManagerStub(self.core.channel(info.objmgr_address))
        try:
            await stub.GetStoreStats(objmgr_pb2.GetStoreStatsRequest(), timeout=PROBE_TIMEOUT_S)
        except grpc.aio.AioRpcError:
            return False
        return True
