"""The memory store: one owner for the object entries a process knows and for who waits on them.

An entry is a `ReturnObject`: the value itself (small objects and errors, inline) or where the
object lives in shared memory (node, size). The owner of an object puts its entry here when the
task that makes it replies (or at `put()`); a borrower keeps the entry it fetched from the owner
while it holds a reference. Waiters are of two kinds:

- future-like objects (`done()` / `set_result(entry)`: asyncio futures on the core loop), woken
  by `put` with the entry;
- user threads blocked in `get()` on owned objects (`wait_sync`), woken through a
  `threading.Event` without a hop through the core loop, once: a blocked thread is registered
  on the first of its ids still missing (a cursor), and the `put` of that id moves the cursor
  on over what has arrived, on the putting thread. The thread sleeps until the cursor reaches
  the end, so a `get` of N results costs one wake-up (not one per result: each wake-up of the
  blocked thread while results stream in costs the loop thread a GIL hand-over), and
  holds one registration at a time (not one per id: a `get` of 1,000,000 refs).

The store also remembers which other nodes hold a copy of a shared-memory object (reported by
readers to the owner; told by the owner to borrowers), so that readers pull from the nearest.

Pure: no I/O, no event loop of its own. Single dict operations (`get`, `contains`) are safe from
any thread; `put` runs on the core loop, `pop` there or (an inline entry already stored, when
its last reference goes) on the thread that dropped it; the sync waiter lists have their own lock.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable, Protocol

from ember_common.proto import common_pb2

Entry = common_pb2.ReturnObject


class Waiter(Protocol):
    """What `add_waiter` accepts: an asyncio future or anything that looks like one."""

    def done(self) -> bool: ...

    def set_result(self, result: Any, /) -> None: ...


class _SyncWait:
    """One user thread blocked in `wait_sync`: its ids, the cursor (every id before `i` has
    arrived; while `i < len(oids)` the waiter is registered under `oids[i]`) and its event,
    set when the cursor reaches the end."""

    __slots__ = ("oids", "i", "event")

    def __init__(self, oids: list[bytes]) -> None:
        self.oids = oids
        self.i = 0
        self.event = threading.Event()


class MemoryStore:
    """Object entries and their waiters (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._objects: dict[bytes, Entry] = {}
        self._waiters: dict[bytes, list[Waiter]] = {}
        self._sync_waiters: dict[bytes, list[_SyncWait]] = {}
        self._sync_lock = threading.Lock()
        self._copies: dict[bytes, set[str]] = {}
        self._clock = clock
        # Hot-path reads are the dict's own methods (no Python frame per call).
        self.get: Callable[[bytes], Entry | None] = self._objects.get
        self.contains: Callable[[object], bool] = self._objects.__contains__

    def __len__(self) -> int:
        return len(self._objects)

    # ------------------------------------------------------------------ entries
    def put(self, entry: Entry) -> None:
        """Records an entry and wakes everyone waiting for it."""
        oid = entry.object_id
        self._objects[oid] = entry
        waiters = self._waiters.pop(oid, None)
        if waiters:
            for w in waiters:
                if not w.done():
                    w.set_result(entry)
        if self._sync_waiters:
            with self._sync_lock:
                blocked = self._sync_waiters.pop(oid, None)
                if blocked:
                    for sw in blocked:
                        self._advance(sw)

    def put_quiet(self, entry: Entry) -> None:
        """Records an entry nobody can be waiting for yet (a put() value, a generator item
        handed out, a borrowed value fetched from its owner)."""
        self._objects[entry.object_id] = entry

    def pop(self, oid: bytes) -> Entry | None:
        """Forgets an entry (and where its copies are); returns it."""
        if self._copies:
            self._copies.pop(oid, None)
        return self._objects.pop(oid, None)

    def in_plasma(self, oids: Iterable[bytes]) -> list[bytes]:
        """The ids among oids whose entries live in shared memory."""
        out = []
        for oid in oids:
            e = self._objects.get(oid)
            if e is not None and e.in_plasma:
                out.append(oid)
        return out

    # ------------------------------------------------------------------ copies
    def add_copies(self, oid: bytes, node_ids: Iterable[str]) -> None:
        """Other nodes that hold a copy of oid."""
        self._copies.setdefault(oid, set()).update(node_ids)

    def copies(self, oid: bytes) -> set[str]:
        """Nodes known to hold a copy of oid (besides the one in its entry)."""
        return self._copies.get(oid, set())

    # ------------------------------------------------------------------ waiters
    def add_waiter(self, oid: bytes, waiter: Waiter) -> None:
        """waiter.set_result(entry) once oid is put (the caller checks `get` first)."""
        self._waiters.setdefault(oid, []).append(waiter)

    def remove_waiter(self, oid: bytes, waiter: Waiter) -> None:
        """Withdraws a waiter that no longer wants the entry."""
        lst = self._waiters.get(oid)
        if lst is not None and waiter in lst:
            lst.remove(waiter)
            if not lst:
                del self._waiters[oid]

    def num_waiters(self, oid: bytes) -> int:
        """Future-like waiters registered for oid."""
        return len(self._waiters.get(oid, ())) + len(self._sync_waiters.get(oid, ()))

    def wait_sync(self, oids: list[bytes], timeout: float | None,
                  on_wait: Callable[[Callable[[], None]], None] | None = None) -> list[bytes]:
        """Blocks this (user) thread until every oid has an entry or timeout passes; returns the
        ids still missing (empty when all arrived). Before it blocks, on_wait gets the callable
        that ends the wait early (as a timeout does; an exception of on_wait ends it too)."""
        w = _SyncWait(oids)
        with self._sync_lock:
            self._advance(w)
        if w.i < len(oids):
            try:
                if on_wait is not None:
                    on_wait(w.event.set)
                deadline = None if timeout is None else self._clock() + timeout
                while not w.event.is_set():
                    left = None if deadline is None else deadline - self._clock()
                    if left is not None and left <= 0:
                        break
                    w.event.wait(left)
            except BaseException:
                with self._sync_lock:
                    if w.i < len(oids):
                        self._withdraw(oids[w.i], w)
                raise
        with self._sync_lock:
            if w.i == len(oids):
                return []
            self._withdraw(oids[w.i], w)  # timed out: the cursor's registration goes
        return [oid for oid in oids[w.i:] if oid not in self._objects]

    def _advance(self, w: _SyncWait) -> None:
        """Under the sync lock: moves w's cursor over the ids that have arrived and registers it
        under the next missing one, or sets its event at the end. It registers before it looks
        again: a `put` storing that id after the look finds the registration (`put` stores first
        and then looks for waiters)."""
        oids, objects, waiters = w.oids, self._objects, self._sync_waiters
        i, n = w.i, len(oids)
        while i < n:
            oid = oids[i]
            if oid in objects:
                i += 1
                continue
            waiters.setdefault(oid, []).append(w)
            if oid not in objects:
                break
            self._withdraw(oid, w)  # stored between the two looks: it has arrived
            i += 1
        w.i = i
        if i == n:
            w.event.set()

    def _withdraw(self, oid: bytes, w: _SyncWait) -> None:
        lst = self._sync_waiters.get(oid)
        if lst is not None and w in lst:
            lst.remove(w)
            if not lst:
                del self._sync_waiters[oid]
