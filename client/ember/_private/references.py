"""Borrower reference counting (Ray's protocol, simplified): who besides the owner holds a ref.

Every process counts its local ObjectRefs (CoreWorker.add_local_ref/remove_local_ref). For a ref
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
  object (CoreWorker._contained).
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
import time
from typing import TYPE_CHECKING, Any, Iterable

import grpc

from ember_common.proto import common_pb2, core_worker_pb2

if TYPE_CHECKING:
    from .core_worker import CoreWorker
    from .object_ref import ObjectRef, OwnerAddress

log = logging.getLogger(__name__)
REMOVE_DELAY_S = 0.5
FLUSH_DELAY_S = 0.01


class References:
    """Borrower bookkeeping of one CoreWorker. Borrower-side dicts are guarded by the core's
    _ref_lock (user threads drop refs); owner-side ones are changed on the loop thread under it."""

    def __init__(self, core: CoreWorker) -> None:
        self.core = core
        # Borrower side: refs we hold but do not own, and what the owners still need to hear.
        self.borrowed: dict[bytes, OwnerAddress] = {}
        self.to_add: dict[bytes, OwnerAddress] = {}
        self.to_remove: dict[bytes, tuple[OwnerAddress, float]] = {}
        self._removing: set[bytes] = set()  # RemoveBorrower in flight
        self.adding = False  # AddBorrower in flight: a worker's reply waits for it too
        self._kicked = False
        self._timer: asyncio.TimerHandle | None = None
        self._lock: asyncio.Lock | None = None
        # Owner side: borrowers of the objects we own.
        self.borrowers: dict[bytes, set[str]] = {}
        self.by_borrower: dict[str, set[bytes]] = {}
        self._watch: asyncio.Future | None = None

    # ------------------------------------------------------------ borrower side (under _ref_lock)
    def first_ref(self, oid: bytes, owner: OwnerAddress) -> None:
        if oid in self.to_remove:  # dropped and taken again before the owner heard of it
            del self.to_remove[oid]
            self.borrowed[oid] = owner
            return
        if oid in self.borrowed:  # registered on our behalf (NestedRefs)
            return
        self.borrowed[oid] = owner
        self.to_add[oid] = owner
        self._kick()

    def last_ref(self, oid: bytes) -> None:
        owner = self.borrowed.pop(oid, None)
        if owner is None:
            return
        if self.to_add.pop(oid, None) is not None:
            return  # the owner never heard of us
        self.to_remove[oid] = (owner, time.monotonic())
        self._kick()

    def _kick(self) -> None:
        if not self._kicked:
            self._kicked = True
            self.core.post(self._arm, FLUSH_DELAY_S)

    # ------------------------------------------------------------ borrower side (loop thread)
    def _arm(self, delay: float) -> None:
        self._kicked = False
        if self._timer is not None:
            if self._timer.when() <= self.core.loop.time() + delay:
                return
            self._timer.cancel()
        self._timer = self.core.loop.call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer = None
        asyncio.ensure_future(self.flush())

    def unacked(self) -> bool:
        """Registrations not yet acknowledged by their owners (queued or in flight)."""
        return bool(self.to_add) or self.adding

    async def flush(self) -> None:
        """Sends pending registrations (and removals that are due) and waits for the owners'
        answers (and for a batch already in flight). A worker calls it before replying when it
        still holds borrowed refs whose registration is unacknowledged."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            core = self.core
            with core._ref_lock:
                adds, self.to_add = self.to_add, {}
                now = time.monotonic()
                due = {oid: o for oid, (o, t) in self.to_remove.items() if now - t >= REMOVE_DELAY_S}
                for oid in due:
                    del self.to_remove[oid]
                self._removing = set(due)
                wait = (min(t for _, t in self.to_remove.values()) + REMOVE_DELAY_S - now
                        if self.to_remove else None)
            self.adding = bool(adds)
            try:
                await self._send(adds, add=True)
                self.adding = False
                await self._send(due, add=False)
            finally:
                self.adding = False
                self._removing = set()
        if wait is not None or self.to_add:
            self._arm(max(wait or 0.0, FLUSH_DELAY_S))

    async def _send(self, oids: dict[bytes, OwnerAddress], add: bool,
                    borrower: str | None = None) -> None:
        if not oids:
            return
        groups: dict[tuple[str, int], list[bytes]] = {}
        for oid, owner in oids.items():
            groups.setdefault((owner[0], owner[1]), []).append(oid)
        me = borrower or self.core.worker_id

        async def one(addr: tuple[str, int], ids: list[bytes]) -> None:
            stub = self.core.worker_stub(f"{addr[0]}:{addr[1]}")
            req = core_worker_pb2.BorrowerRequest(object_ids=ids, borrower_worker_id=me)
            try:
                await (stub.AddBorrower if add else stub.RemoveBorrower)(req, timeout=30)
            except grpc.aio.AioRpcError as e:  # the owner is gone, and its objects with it
                log.debug("%s to %s failed: %s", "AddBorrower" if add else "RemoveBorrower", addr, e.code())

        await asyncio.gather(*(one(a, ids) for a, ids in groups.items()))

    # ------------------------------------------------------------ hand-over of nested refs
    def hand_over(self, refs: Iterable[ObjectRef], outer_id: bytes,
                  caller: common_pb2.Address) -> tuple[list[core_worker_pb2.NestedRefs], Any]:
        """Worker side of returning refs nested in outer_id to its caller: registers the caller
        as their borrower. Returns (NestedRefs for the reply, a coroutine to await before
        replying, or None)."""
        groups: dict[OwnerAddress, dict[bytes, None]] = {}
        for r in refs:
            groups.setdefault(r._owner, {})[r._id] = None
        out, remote = [], {}
        core = self.core
        for owner, ids in groups.items():
            oids = list(ids)
            out.append(core_worker_pb2.NestedRefs(outer_id=outer_id, object_ids=oids, owner=common_pb2.Address(
                ip=owner[0], port=owner[1], worker_id=owner[2], node_id=owner[3])))
            if owner[2] == core.worker_id:
                self.add_borrowers(oids, caller.worker_id)
            elif owner[2] != caller.worker_id:
                remote.update((oid, owner) for oid in oids)
        return out, (self._send(remote, add=True, borrower=caller.worker_id) if remote else None)

    def take_nested(self, nested: Iterable[core_worker_pb2.NestedRefs]) -> None:
        """Caller side (loop thread): the outer objects hold the refs nested in them."""
        from .object_ref import ObjectRef

        core = self.core
        for n in nested:
            o = n.owner
            owner = (o.ip, o.port, o.worker_id, o.node_id)
            if o.worker_id != core.worker_id:
                with core._ref_lock:
                    for oid in n.object_ids:
                        self.to_remove.pop(oid, None)
                        if oid in self._removing:  # our own removal may land after the new add
                            self.to_add[oid] = owner
                            self._kick()
                        self.borrowed[oid] = owner
            held = core._contained.setdefault(n.outer_id, [])
            held.extend(ObjectRef(oid, owner, core) for oid in n.object_ids)

    # ------------------------------------------------------------ owner side
    def add_borrowers(self, oids: Iterable[bytes], borrower: str) -> list[bytes]:
        """Records a borrower of owned objects; returns the ids no longer owned here."""
        core = self.core
        unknown = []
        with core._ref_lock:
            for oid in oids:
                if oid not in core._owned:
                    unknown.append(oid)
                    continue
                self.borrowers.setdefault(oid, set()).add(borrower)
                self.by_borrower.setdefault(borrower, set()).add(oid)
        if self._watch is None:
            core.post(self._start_watch)
        return unknown

    def remove_borrowers(self, oids: Iterable[bytes], borrower: str) -> None:
        """Loop thread: borrower let go; frees objects nobody references any more."""
        core = self.core
        free = []
        with core._ref_lock:
            mine = self.by_borrower.get(borrower)
            for oid in oids:
                holders = self.borrowers.get(oid)
                if holders is None or borrower not in holders:
                    continue
                holders.discard(borrower)
                if mine is not None:
                    mine.discard(oid)
                if not holders:
                    del self.borrowers[oid]
                    if oid not in core._refcounts and oid in core._owned and oid not in core._escaped:
                        core._owned.discard(oid)
                        free.append(oid)
            if mine is not None and not mine:
                del self.by_borrower[borrower]
        for oid in free:
            core._release(oid, True)

    def _start_watch(self) -> None:
        if self._watch is None and not self.core._shutdown:
            self._watch = asyncio.ensure_future(self.core.gcs.follow(["workers"], self._on_death))

    def _on_death(self, msg: Any) -> None:
        if msg.HasField("worker_death"):
            wid = msg.worker_death.worker_id
            oids = self.by_borrower.get(wid)
            if oids:
                log.debug("borrower %s died: dropping it from %d objects", wid, len(oids))
                self.remove_borrowers(list(oids), wid)

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
