"""Borrower reference counting (Ray's protocol, simplified): who besides the owner holds a ref.

The counts and every decision live in the reference table (reference_table.py, pure); this
module is its I/O driver: it schedules flushes, sends the RPCs and follows borrower deaths.

Every process counts its local ObjectRefs (ReferenceTable.add_local_ref/remove_local_ref). For a ref
it does not own, the first local reference makes it a *borrower*: it registers with the owner
(AddBorrower, batched per owner), and when its count drops to zero it unregisters
(RemoveBorrower). The owner keeps an object while it has local references *or* borrowers; when
neither remains it frees every copy on every node. A borrower that dies is dropped when the GCS
publishes its death (the "workers" feed, followed once this process has borrowers).

Hand-over rules, so that an object never goes away between a sender letting go and a receiver
registering:
- Task/actor arguments: the caller keeps nested refs alive until the reply (TaskEntry.arg_refs);
  the worker's pending registrations are acknowledged before it replies (flush()).
- Returns and generator items: the worker registers the caller as a borrower *on its behalf*
  before replying (locally when the worker owns the ref, AddBorrower to the owner otherwise) and
  lists the refs in the reply (NestedRefs); the caller holds them while it keeps the outer
  object (ReferenceTable.hold_nested).
- put() values: the owner of the outer object holds the nested refs while it keeps it.
- Unregistering (RemoveBorrower) is sent REMOVE_DELAY_S after the count reached zero, after all
  earlier registrations were acknowledged: a reply that hands a ref to its owner cannot be
  overtaken by the sender's own removal, and short-lived references (a top-level argument
  fetched and dropped within one task) cost no RPC at all.

Plain tasks without nested refs never enter this module.
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable

import grpc

from ember_common.proto import common_pb2, core_worker_pb2

from ..objects.object_ref import ObjectRef, OwnerAddress
from .reference_table import REMOVE_DELAY_S, ReferenceTable

if TYPE_CHECKING:
    from ember_common import gcs_client
    from ember_common.proto import core_worker_pb2_grpc

log = logging.getLogger(__name__)
__all__ = ["FLUSH_DELAY_S", "REMOVE_DELAY_S", "References"]
FLUSH_DELAY_S = 0.01


class References:
    """The borrower protocol's I/O over a ReferenceTable: timers, AddBorrower/RemoveBorrower
    batches, the hand-over of nested refs and the watch on borrower deaths. Loop thread, except
    `kick` (any thread)."""

    def __init__(self, table: ReferenceTable, worker_id: str, loop: asyncio.AbstractEventLoop,
                 post: Callable[..., None],
                 worker_stub: Callable[[str], core_worker_pb2_grpc.CoreWorkerAsyncStub],
                 gcs: Callable[[], gcs_client.GcsClient], core: Any) -> None:
        self.table = table
        self.worker_id = worker_id
        self.loop = loop
        self._post = post
        self._worker_stub = worker_stub
        self._gcs = gcs
        self._core = core  # what ObjectRefs made here count against (nested refs taken over)
        self._timer: asyncio.TimerHandle | None = None
        self._lock: asyncio.Lock | None = None
        self._watch: asyncio.Future[Any] | None = None
        self.closed = False

    def kick(self) -> None:
        """The table has new borrower work: schedule a flush (any thread)."""
        self._post(self._arm, FLUSH_DELAY_S)

    # ------------------------------------------------------------ borrower side (loop thread)
    def _arm(self, delay: float) -> None:
        self.table.flush_scheduled()
        if self._timer is not None:
            if self._timer.when() <= self.loop.time() + delay:
                return
            self._timer.cancel()
        self._timer = self.loop.call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer = None
        asyncio.ensure_future(self.flush())

    def unacked(self) -> bool:
        """Registrations not yet acknowledged by their owners (queued or in flight)."""
        return self.table.unacked()

    async def flush(self) -> None:
        """Sends pending registrations (and removals that are due) and waits for the owners'
        answers (and for a batch already in flight). A worker calls it before replying when it
        still holds borrowed refs whose registration is unacknowledged."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            batch = self.table.begin_flush()
            try:
                await self._send(batch.adds, add=True)
                self.table.adds_acknowledged()
                await self._send(batch.removes, add=False)
            finally:
                self.table.end_flush()
        if batch.next_due_s is not None or self.table.has_unsent():
            self._arm(max(batch.next_due_s or 0.0, FLUSH_DELAY_S))

    async def _send(self, oids: dict[bytes, OwnerAddress], add: bool,
                    borrower: str | None = None) -> None:
        if not oids:
            return
        groups: dict[tuple[str, int], list[bytes]] = {}
        for oid, owner in oids.items():
            groups.setdefault((owner.ip, owner.port), []).append(oid)
        me = borrower or self.worker_id

        async def one(addr: tuple[str, int], ids: list[bytes]) -> None:
            stub = self._worker_stub(f"{addr[0]}:{addr[1]}")
            req = core_worker_pb2.BorrowerRequest(object_ids=ids, borrower_worker_id=me)
            try:
                await (stub.AddBorrower if add else stub.RemoveBorrower)(req, timeout=30)
            except grpc.aio.AioRpcError as e:  # the owner is gone, and its objects with it
                log.debug("%s to %s failed: %s", "AddBorrower" if add else "RemoveBorrower", addr, e.code())

        await asyncio.gather(*(one(a, ids) for a, ids in groups.items()))

    # ------------------------------------------------------------ hand-over of nested refs
    def hand_over(self, refs: Iterable[ObjectRef], outer_id: bytes, caller: common_pb2.Address
                  ) -> tuple[list[core_worker_pb2.NestedRefs], Awaitable[None] | None]:
        """Worker side of returning refs nested in outer_id to its caller: registers the caller
        as their borrower. Returns (NestedRefs for the reply, an awaitable to await before
        replying, or None)."""
        groups: dict[OwnerAddress, dict[bytes, None]] = {}
        for r in refs:
            groups.setdefault(r.owner_address, {})[r.binary()] = None
        out: list[core_worker_pb2.NestedRefs] = []
        remote: dict[bytes, OwnerAddress] = {}
        for owner, ids in groups.items():
            oids = list(ids)
            out.append(core_worker_pb2.NestedRefs(outer_id=outer_id, object_ids=oids, owner=common_pb2.Address(
                ip=owner.ip, port=owner.port, worker_id=owner.worker_id, node_id=owner.node_id)))
            if owner.worker_id == self.worker_id:
                self.add_borrowers(oids, caller.worker_id)
            elif owner.worker_id != caller.worker_id:
                remote.update((oid, owner) for oid in oids)
        return out, (self._send(remote, add=True, borrower=caller.worker_id) if remote else None)

    def take_nested(self, nested: Iterable[core_worker_pb2.NestedRefs]) -> None:
        """Caller side (loop thread): the outer objects hold the refs nested in them."""
        for n in nested:
            o = n.owner
            owner = OwnerAddress(o.ip, o.port, o.worker_id, o.node_id)
            if o.worker_id != self.worker_id:
                self.table.take_nested(owner, n.object_ids)
            self.table.hold_nested(n.outer_id, [ObjectRef(oid, owner, self._core) for oid in n.object_ids])

    # ------------------------------------------------------------ owner side
    def add_borrowers(self, oids: Iterable[bytes], borrower: str) -> list[bytes]:
        """Records a borrower of owned objects; returns the ids no longer owned here."""
        unknown = self.table.add_borrowers(oids, borrower)
        if self._watch is None:
            self._post(self._start_watch)
        return unknown

    def remove_borrowers(self, oids: Iterable[bytes], borrower: str) -> None:
        """Loop thread: borrower let go; objects nobody references any more are released."""
        self.table.remove_borrowers(oids, borrower)

    def _start_watch(self) -> None:
        if self._watch is None and not self.closed:
            self._watch = asyncio.ensure_future(self._gcs().follow(["workers"], self._on_death))

    def _on_death(self, msg: Any) -> None:
        if msg.HasField("worker_death"):
            wid = msg.worker_death.worker_id
            freed = self.table.borrower_died(wid)
            if freed:
                log.debug("borrower %s died: freed %d objects", wid, len(freed))

    async def close(self) -> None:
        """Stops the timer and the death watch."""
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
