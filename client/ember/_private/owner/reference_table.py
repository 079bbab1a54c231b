"""The reference table: one owner for every reference count of a process, and its free decisions.

It holds, under one lock (user threads create and drop ObjectRefs while the core loop handles
replies and borrower RPCs):

- local counts: live `ObjectRef`s per object id in this process (top-level and nested task
  arguments are counted by the refs their task entries hold until the task ends);
- owned ids, and "escaped" ones pinned until the process exits (pickled outside Ember's
  serializer, or actor creation arguments the GCS may replay);
- nested refs: outer object id -> the refs nested in it, held while the outer object is kept;
- owner side: the borrowers (worker ids) of each owned object;
- borrower side: refs held here but owned elsewhere, the registrations (AddBorrower) and
  removals (RemoveBorrower) the owners still have to hear, and what is in flight;
- the lineage of owned task returns (`lineage`, lineage.py): kept with the ref, told at each
  owned object's last reference so that it drops what no reference needs any more.

Decisions go out through two callbacks given by the driver (references.py, core_worker.py):
`on_release(oid, owned)` when an object has no reference left here (owned: free it on every
node; borrowed: forget the fetched entry) and `on_pending()` when the borrower protocol has new
work (a flush to schedule). Both are called outside the lock except `on_pending` (which must
only post). The RPCs themselves live in references.py. Pure: no I/O; the clock is injected.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable

from ..objects.object_ref import OwnerAddress
from .lineage import DEFAULT_MAX_LINEAGE_BYTES, Lineage

# A RemoveBorrower is sent this long after the count reached zero (see references.py).
REMOVE_DELAY_S = 0.5


class FlushBatch:
    """What one flush of the borrower protocol sends: registrations, removals that are due, and
    when the next removal falls due (seconds from now, or None)."""

    __slots__ = ("adds", "removes", "next_due_s")

    def __init__(self, adds: dict[bytes, OwnerAddress], removes: dict[bytes, OwnerAddress],
                 next_due_s: float | None) -> None:
        self.adds = adds
        self.removes = removes
        self.next_due_s = next_due_s


class ReferenceTable:
    """Reference counts of one process (see the module docstring)."""

    def __init__(self, worker_id: str, on_release: Callable[[bytes, bool], None],
                 on_pending: Callable[[], None], clock: Callable[[], float] = time.monotonic,
                 remove_delay_s: float = REMOVE_DELAY_S,
                 max_lineage_bytes: int = DEFAULT_MAX_LINEAGE_BYTES) -> None:
        self.worker_id = worker_id
        self.lineage = Lineage(worker_id, max_lineage_bytes)
        self._on_release = on_release
        self._on_pending = on_pending
        self._clock = clock
        self._remove_delay_s = remove_delay_s
        self._lock = threading.Lock()
        self._counts: dict[bytes, int] = {}
        self._owned: set[bytes] = set()
        self._escaped: set[bytes] = set()
        self._nested: dict[bytes, list[Any]] = {}
        # Borrower side.
        self._borrowed: dict[bytes, OwnerAddress] = {}
        self._to_add: dict[bytes, OwnerAddress] = {}
        self._to_remove: dict[bytes, tuple[OwnerAddress, float]] = {}
        self._removing: set[bytes] = set()  # RemoveBorrower in flight
        self._adding = False  # AddBorrower in flight: a worker's reply waits for it too
        self._kicked = False  # on_pending called, flush not scheduled yet
        # Owner side.
        self._borrowers: dict[bytes, set[str]] = {}
        self._by_borrower: dict[str, set[bytes]] = {}
        self._on_free: dict[bytes, Callable[[], None]] = {}  # owned id -> called when released
        self.closed = False  # set at shutdown: nothing is released any more

    # ------------------------------------------------------------------ local counts (any thread)
    def add_local_ref(self, oid: bytes, owner: OwnerAddress) -> None:
        """An ObjectRef was created. The first ref to an object owned elsewhere borrows it."""
        with self._lock:
            n = self._counts.get(oid, 0) + 1
            self._counts[oid] = n
            if n == 1 and owner[2] != self.worker_id:
                self._first_borrow(oid, owner)

    def remove_local_ref(self, oid: bytes) -> None:
        """An ObjectRef was dropped; at zero the object is released unless something else
        (borrowers, an escape) keeps it."""
        with self._lock:
            n = self._counts.get(oid, 0) - 1
            if n > 0:
                self._counts[oid] = n
                return
            self._counts.pop(oid, None)
            owned = oid in self._owned
            if owned:
                if oid in self._escaped or oid in self._borrowers:
                    return  # kept for its borrowers (or until this process exits)
                self._owned.discard(oid)
            elif self._borrowed:
                self._last_borrow(oid)
        if not self.closed:
            self._released(oid, owned)

    def _released(self, oid: bytes, owned: bool) -> None:
        """Outside the lock: the watcher of an owned id (on_free), the lineage, then the
        driver."""
        if owned:
            if self._on_free:
                fn = self._on_free.pop(oid, None)
                if fn is not None:
                    fn()
            self.lineage.release(oid)
        self._on_release(oid, owned)

    def on_free(self, oid: bytes, fn: Callable[[], None]) -> None:
        """Calls fn (once, outside the lock, on whichever thread lets go last) when the owned
        oid is released: no local ref, borrower or escape keeps it any more. An actor's owner
        watches its handle id this way (actor lifetime by handle count)."""
        self._on_free[oid] = fn

    def mark_escaped(self, oid: bytes) -> None:
        """Pins a ref until the process exits (it was pickled where no borrower is tracked)."""
        with self._lock:
            if oid in self._escaped:
                return
            if oid in self._owned:
                self._escaped.add(oid)
            elif oid in self._counts:  # borrowed: keep our registration with its owner
                self._escaped.add(oid)
                self._counts[oid] += 1

    def add_owned(self, oid: bytes) -> None:
        """This process owns oid (a put, a task return, a generator item)."""
        self._owned.add(oid)

    def owns(self, oid: bytes) -> bool:
        """True while this process owns oid and has not freed it."""
        return oid in self._owned

    def owned_ids(self) -> list[bytes]:
        """A snapshot of the owned ids."""
        return list(self._owned)

    def has_local_ref(self, oid: bytes) -> bool:
        """True while an ObjectRef to oid lives in this process."""
        return oid in self._counts

    def num_local_refs(self) -> int:
        """Objects with a live ObjectRef here."""
        return len(self._counts)

    def is_referenced(self, oid: bytes) -> bool:
        """Anything keeps oid: a local ref, an escape, a borrower."""
        return oid in self._counts or oid in self._escaped or oid in self._borrowers

    def forget_owned(self, oid: bytes) -> None:
        """A result arrived after every reference to it was dropped: it is not kept."""
        self._owned.discard(oid)
        self._nested.pop(oid, None)

    # ------------------------------------------------------------------ nested refs
    def hold_nested(self, outer: bytes, refs: Iterable[Any]) -> None:
        """The refs nested in outer live as long as outer is kept here."""
        self._nested.setdefault(outer, []).extend(refs)

    def drop_nested(self, outer: bytes) -> list[Any] | None:
        """Outer is gone: returns the refs it held (dropped by the caller, outside the lock)."""
        return self._nested.pop(outer, None) if self._nested else None

    # ------------------------------------------------------------------ borrower side
    def _first_borrow(self, oid: bytes, owner: OwnerAddress) -> None:
        if oid in self._to_remove:  # dropped and taken again before the owner heard of it
            del self._to_remove[oid]
            self._borrowed[oid] = owner
            return
        if oid in self._borrowed:  # registered on our behalf (nested in a reply)
            return
        self._borrowed[oid] = owner
        self._to_add[oid] = owner
        self._kick()

    def _last_borrow(self, oid: bytes) -> None:
        owner = self._borrowed.pop(oid, None)
        if owner is None:
            return
        if self._to_add.pop(oid, None) is not None:
            return  # the owner never heard of us
        self._to_remove[oid] = (owner, self._clock())
        self._kick()

    def _kick(self) -> None:
        if not self._kicked:
            self._kicked = True
            self._on_pending()

    def flush_scheduled(self) -> None:
        """The driver has scheduled a flush: later changes kick it again."""
        self._kicked = False

    def take_nested(self, owner: OwnerAddress, oids: Iterable[bytes]) -> None:
        """Refs owned by owner arrived nested in a reply whose sender registered us as their
        borrower: they are borrowed without a registration of our own."""
        with self._lock:
            for oid in oids:
                self._to_remove.pop(oid, None)
                if oid in self._removing:  # our own removal may land after the sender's add
                    self._to_add[oid] = owner
                    self._kick()
                self._borrowed[oid] = owner

    def borrowed_owner(self, oid: bytes) -> OwnerAddress | None:
        """The owner of a borrowed ref, or None."""
        return self._borrowed.get(oid)

    def unacked(self) -> bool:
        """Registrations not yet acknowledged by their owners (queued or in flight)."""
        return bool(self._to_add) or self._adding

    def has_unsent(self) -> bool:
        """Registrations still queued here."""
        return bool(self._to_add)

    def pending_removals(self) -> dict[bytes, OwnerAddress]:
        """Removals waiting for their delay (owner by object id)."""
        return {oid: o for oid, (o, _) in self._to_remove.items()}

    def begin_flush(self) -> FlushBatch:
        """Takes every queued registration and the removals that are due; marks them in
        flight until `end_flush`."""
        with self._lock:
            adds, self._to_add = self._to_add, {}
            now = self._clock()
            due = {oid: o for oid, (o, t) in self._to_remove.items()
                   if now - t >= self._remove_delay_s}
            for oid in due:
                del self._to_remove[oid]
            self._removing = set(due)
            wait = (min(t for _, t in self._to_remove.values()) + self._remove_delay_s - now
                    if self._to_remove else None)
        self._adding = bool(adds)
        return FlushBatch(adds, due, wait)

    def adds_acknowledged(self) -> None:
        """The owners answered this flush's registrations."""
        self._adding = False

    def end_flush(self) -> None:
        """This flush's RPCs are done (answered or failed)."""
        self._adding = False
        self._removing = set()

    # ------------------------------------------------------------------ owner side
    def add_borrowers(self, oids: Iterable[bytes], borrower: str) -> list[bytes]:
        """Records a borrower of owned objects; returns the ids no longer owned here."""
        unknown = []
        with self._lock:
            for oid in oids:
                if oid not in self._owned:
                    unknown.append(oid)
                    continue
                self._borrowers.setdefault(oid, set()).add(borrower)
                self._by_borrower.setdefault(borrower, set()).add(oid)
        return unknown

    def remove_borrowers(self, oids: Iterable[bytes], borrower: str) -> list[bytes]:
        """A borrower let go; releases (and returns) objects nobody references any more."""
        free = []
        with self._lock:
            mine = self._by_borrower.get(borrower)
            for oid in oids:
                holders = self._borrowers.get(oid)
                if holders is None or borrower not in holders:
                    continue
                holders.discard(borrower)
                if mine is not None:
                    mine.discard(oid)
                if not holders:
                    del self._borrowers[oid]
                    if oid not in self._counts and oid in self._owned and oid not in self._escaped:
                        self._owned.discard(oid)
                        free.append(oid)
            if mine is not None and not mine:
                del self._by_borrower[borrower]
        if not self.closed:
            for oid in free:
                self._released(oid, True)
        return free

    def borrower_died(self, borrower: str) -> list[bytes]:
        """A borrower's process is gone: drops it from every object; returns the freed ids."""
        oids = self._by_borrower.get(borrower)
        if not oids:
            return []
        return self.remove_borrowers(list(oids), borrower)

    def borrowers(self, oid: bytes) -> set[str]:
        """The borrowers of an owned object."""
        return set(self._borrowers.get(oid, ()))

    def has_borrowers(self) -> bool:
        """Any owned object has a borrower."""
        return bool(self._borrowers)
