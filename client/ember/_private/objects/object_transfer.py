"""Where an object's shared-memory copies are and how they move: the transfer half of ObjectAPI.

`ObjectTransfer` is mixed into CoreWorker through `ObjectAPI` (object_api.py), whose reads call
`_pull` for a value in shared memory on another node. It makes the object local (from the
nearest live node holding a copy), reports the new copy to the object's owner (who tells later
readers), and, on the owner's side, keeps the Frees that nodes missed (dead in this owner's
view, or the call failed) and sends them once each node is alive again (missed_frees.py). The
state it reads is created by CoreWorker, as ObjectAPI's is.
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import grpc

from ember import exceptions as exc
from ember_common import rpc, tracing
from ember_common.proto import common_pb2, core_worker_pb2, core_worker_pb2_grpc, objmgr_pb2, objmgr_pb2_grpc

from ..owner.memory_store import MemoryStore
from ..owner.missed_frees import MissedFrees
from ..owner.reference_table import ReferenceTable
from .object_ref import OwnerAddress

log = logging.getLogger(__name__)

# The local object manager bounds a pull by its stall deadline (ember_objmgr.transfer); the
# caller's own deadline only catches a local object manager that answers nothing at all (stopped,
# or its container gone without a reset): a base plus the object's size at a slow 8 MiB/s.
PULL_BASE_S = 60.0
PULL_MIN_BYTES_PER_S = 8 * 2**20
# Missed Frees (missed_frees.py) are retried after 1 s, doubling up to this, while any wait.
RESEND_MAX_S = 10.0


def pull_deadline_s(size: int) -> float:
    """The deadline of one Pull call for an object of `size` bytes."""
    return PULL_BASE_S + max(0, size) / PULL_MIN_BYTES_PER_S


class ObjectTransfer:
    """Pulls, copy locations and missed Frees (mixed into CoreWorker through ObjectAPI)."""

    # Set by CoreWorker.__init__ and its loop's start-up.
    node_id: str
    worker_id: str
    ip: str
    store: MemoryStore
    ref_table: ReferenceTable
    objmgr: objmgr_pb2_grpc.ObjectManagerAsyncStub
    _nodes: dict[str, common_pb2.NodeInfo]
    _shutdown: bool
    _missed_frees: MissedFrees | None = None
    _resender: asyncio.Future[None] | None = None

    if TYPE_CHECKING:  # CoreWorker's loop plumbing and node view
        def worker_stub(self, address: str) -> core_worker_pb2_grpc.CoreWorkerAsyncStub: ...
        def channel(self, address: str) -> grpc.aio.Channel: ...
        async def _refresh_nodes(self, max_age_s: float = 0.0) -> None: ...
        async def node_info(self, node_id: str) -> common_pb2.NodeInfo: ...

    async def _pull(self, entry: common_pb2.ReturnObject, owner: OwnerAddress | None) -> None:
        """Makes the object local: the node's own copy if there is one, else a pull from the
        nearest live node known to hold it (same IP first, the primary copy before secondary
        ones, which may be dropped), falling back to the next when one fails."""
        oid = entry.object_id
        here = self.store.copies(oid)
        others = [n for n in here if n not in (entry.node_id, self.node_id)]
        if others:
            await self._refresh_nodes(max_age_s=1.0)
        cands = []
        for rank, nid in enumerate([entry.node_id, *others]):
            info = self._nodes.get(nid) or (await self.node_info(nid) if rank == 0 else None)
            if info is not None and info.state == common_pb2.NodeInfo.ALIVE:
                cands.append((info.ip != self.ip, rank, info))
        failure = f"node {entry.node_id} is dead"
        timed_out = False
        # The copy is the owner's, as every copy is: the owner's Free or its death frees it. (Had
        # it been the puller's, a copy whose location never reached the owner, a lost
        # AddObjectLocation, would outlive both while the puller lived, e.g. a prestarted worker.)
        owner_id = owner.worker_id if owner is not None else self.worker_id
        for _, _, info in sorted(cands, key=lambda c: c[:2]):
            try:
                await self.objmgr.Pull(objmgr_pb2.PullRequest(
                    object_id=oid, source_address=info.objmgr_address, owner_worker_id=owner_id),
                    timeout=pull_deadline_s(entry.size),
                    metadata=tracing.metadata())  # the objmgr's pull span joins the caller's trace
                break
            except grpc.aio.AioRpcError as e:
                failure = f"pulling it from node {info.node_id} failed: {e.details()}"
                timed_out = e.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        else:  # the last pull timed out: Ray's ObjectFetchTimedOutError (an ObjectLostError)
            lost = exc.ObjectFetchTimedOutError if timed_out else exc.ObjectLostError
            raise lost(oid.hex(), f"Object {oid.hex()} is lost: {failure}")
        if owner is not None and self.node_id not in here:
            self._record_copy(oid, owner)

    def _record_copy(self, oid: bytes, owner: OwnerAddress) -> None:
        """Loop thread: this node now holds a copy; the owner tells later readers."""
        if owner.worker_id == self.worker_id:
            if self.ref_table.owns(oid):
                self.store.add_copies(oid, (self.node_id,))
            return
        if self.ref_table.has_local_ref(oid):
            self.store.add_copies(oid, (self.node_id,))
        req = core_worker_pb2.AddObjectLocationRequest(object_id=oid, node_id=self.node_id)
        stub = self.worker_stub(f"{owner.ip}:{owner.port}")
        rpc.best_effort(stub.AddObjectLocation(req, timeout=10))

    # ---------------------------------------------------------------- missed Frees
    def _note_missed_frees(self, node_ids: list[str], oids: list[bytes]) -> None:
        """Loop thread: these nodes missed the Free of oids (dead in this owner's view, or the
        call failed); they get it once alive again (a node declared dead that comes back keeps
        its store: missed_frees.py)."""
        if not node_ids or self._shutdown:
            return
        if self._missed_frees is None:
            self._missed_frees = MissedFrees()
        self._missed_frees.missed(node_ids, oids)
        if len(self._missed_frees) and (self._resender is None or self._resender.done()):
            self._resender = asyncio.ensure_future(self._resend_missed_frees(self._missed_frees))

    async def _resend_missed_frees(self, missed: MissedFrees) -> None:
        """Loop thread, while Frees wait: polls the node table (1 s, doubling up to
        RESEND_MAX_S) and sends each node that is alive again the Frees it missed."""
        delay = 1.0
        while len(missed):
            await asyncio.sleep(delay)
            delay = min(2 * delay, RESEND_MAX_S)
            if missed.expire():
                log.warning("gave up on Frees for nodes dead for over %gs (%d ids so far)",
                            missed.ttl_s, missed.dropped)
            await self._refresh_nodes(max_age_s=0.5)
            back = {n: info for n in missed.nodes() if (info := self._nodes.get(n)) is not None
                    and info.state == common_pb2.NodeInfo.ALIVE}
            for nid, oids in missed.take(back).items():
                stub = objmgr_pb2_grpc.ObjectManagerStub(self.channel(back[nid].objmgr_address))
                try:
                    await stub.Free(objmgr_pb2.FreeRequest(object_ids=oids), timeout=5)
                except grpc.aio.AioRpcError as e:  # still silent: next round
                    log.debug("resending %d Frees to node %s failed: %s", len(oids), nid[:8], e.code().name)
                    missed.missed([nid], oids)
                    continue
                missed.alive(nid)
                log.info("node %s is back: sent the %d Frees it missed", nid[:8], len(oids))
                delay = 1.0
