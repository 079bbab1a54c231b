"""ObjectStore: this node's objects in one shared-memory arena (a file on a tmpfs, mapped by every
process on the node), with pinning, spilling and restoring.

States: CREATED (space reserved, creator writing) -> SEALED (readable) <-> SPILLED (bytes on
disk, space reused). Readers pin an object while they hold views of it (Get/Release); its space
is reused only once it is freed *and* unpinned. When an allocation does not fit, sealed
unpinned objects are spilled, least recently used first; secondary copies (pulled from other
nodes) are simply dropped. If even that cannot make room, the request fails with a clear
ResourceExhausted (ObjectStoreFullError on the client), never a retry loop.
"""
from __future__ import annotations

import logging
import mmap
import os
import shutil
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from ember_common.rpc import DataLoss, NotFound, ResourceExhausted
from ember_common.shm_prefault import Prefaulter, populate

from .allocator import ArenaAllocator
from .spill import Spiller, SpillError, SpillReadError

# Owners whose death this store has seen, remembered so that a copy of one of their objects
# that lands later (a pull or a task's return still in flight when the death was published) is
# freed as soon as nobody reads it, instead of staying for ever. Bounded: the oldest go first.
DEAD_OWNERS_KEPT = 4096

log = logging.getLogger(__name__)


__all__ = ["DataLoss", "Entry", "ObjectStore"]  # DataLoss (the kit's): a spill file cannot be read back


@dataclass
class Entry:
    object_id: bytes
    size: int
    owner: str
    offset: int = -1
    state: str = "CREATED"
    primary: bool = True
    pins: dict[str, int] = field(default_factory=dict)
    freed: bool = False
    spill_path: str = ""
    last_access: float = field(default_factory=time.monotonic)
    creator: str = ""  # the process writing it (until sealed): its death aborts the write
    # Allocated outside the full arena (Ray's fallback allocation): a file of its own, mapped.
    fallback_path: str = ""
    fallback: mmap.mmap | None = field(default=None, repr=False)

    @property
    def pinned(self) -> bool:
        return bool(self.pins)


class ObjectStore:
    """The arena's pages stay resident: its first `prefault_bytes` are populated on a
    background thread from start-up, the rest when first allocated, and freed space is reused
    as it is (never punched out of the file), so a put into it takes no page fault here."""

    def __init__(self, store_dir: str, capacity_bytes: int, spill_uri: str | None = None,
                 prefault_bytes: int = 0, fallback_dir: str = "") -> None:
        self.store_dir = store_dir
        self.fallback_dir = fallback_dir or os.path.join(store_dir, "fallback")
        self.fallback_bytes = 0
        os.makedirs(store_dir, exist_ok=True)
        self.alloc = ArenaAllocator(capacity_bytes)
        self.capacity = self.alloc.capacity
        self.arena_path = os.path.join(store_dir, "arena")
        fd = os.open(self.arena_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with open(fd, "wb") as f:  # 0600: it holds every put() payload of this node
            f.truncate(max(self.capacity, 1))
        with open(self.arena_path, "r+b") as f:
            self._map = mmap.mmap(f.fileno(), max(self.capacity, 1))
        self.view = memoryview(self._map)
        self.prefaulter = Prefaulter(self._map, prefault_bytes, self.arena_path).start()
        self.spiller = Spiller(spill_uri or os.path.join(store_dir + "-spill"))
        self.spill_uri = self.spiller.uri
        self.objects: dict[bytes, Entry] = {}
        self.spilled_bytes = 0
        self.dead_owners: OrderedDict[str, None] = OrderedDict()

    # ------------------------------------------------------------------ creation
    def create(self, object_id: bytes, size: int, owner: str, primary: bool = True,
               creator: str = "") -> int:
        """Reserves space for an object that `creator` (a client id, or "" for a write this
        process does itself) writes and then seals; returns its offset in the arena (-1 when the
        full arena had no room and it got a file of its own: `buffer` reaches either)."""
        e = self.objects.get(object_id)
        if e is not None:
            if e.state == "CREATED":  # a retried Create, or a retried task writing the same return
                e.creator = creator
                return e.offset
            raise ValueError(f"object {object_id.hex()} already exists")
        e = Entry(object_id, size, owner, primary=primary, creator=creator)
        self._place(e)
        self.objects[object_id] = e
        if owner and owner in self.dead_owners:  # arrived after its owner died: nobody frees it
            e.freed = True  # deleted at seal, or when its last reader lets go
        return e.offset

    def buffer(self, e: Entry) -> memoryview:
        """The object's bytes, writable: its range of the arena or its fallback file's mapping."""
        if e.fallback is not None:
            return memoryview(e.fallback)
        return self.view[e.offset:e.offset + e.size]

    def _place(self, e: Entry) -> None:
        """Gives the object room: a range of the arena (evicting or spilling others if needed),
        else, as Ray's fallback allocation, a file of its own with a warning."""
        if e.size <= self.capacity:
            try:
                e.offset = self._allocate(e.size, e.object_id)
                return
            except ResourceExhausted as full:
                why = str(full)
        else:
            why = f"an object of {e.size} bytes is larger than the whole store ({self.capacity} bytes)"
        path = os.path.join(self.fallback_dir, e.object_id.hex())
        try:
            os.makedirs(self.fallback_dir, mode=0o700, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.posix_fallocate(fd, 0, e.size)  # reserved now: a full disk is an error, not a SIGBUS
                e.fallback = mmap.mmap(fd, e.size)
            finally:
                os.close(fd)
        except OSError as err:
            if os.path.isfile(path):
                os.unlink(path)
            raise ResourceExhausted(f"{why}; allocating it in {self.fallback_dir} instead failed "
                                    f"too: {err.strerror or err}") from None
        e.offset, e.fallback_path = -1, path  # not in the arena
        self.fallback_bytes += e.size
        log.warning("object store full (%s): object %s (%d bytes) allocated in %s instead; it stays "
                    "there, outside object_store_memory, until freed", why, e.object_id.hex(), e.size, path)

    def seal(self, object_id: bytes) -> None:
        e = self._entry(object_id)
        if e.state == "CREATED":
            e.state = "SEALED"
            if e.freed and not e.pinned:  # freed while its creator was still writing
                self._delete(e)

    def abort(self, object_id: bytes) -> None:
        """The creator gives up an unsealed object: its space is reusable at once."""
        e = self.objects.get(object_id)
        if e is not None and e.state == "CREATED":
            self._delete(e)

    def _allocate(self, size: int, for_id: bytes) -> int:
        offset = self._alloc_space(size, for_id)
        end = offset + size
        if end > self.prefaulter.populated:
            # Back the object's pages in one go (a no-op where they already are): much cheaper
            # than a fault per page when its bytes arrive (pulls, remote writes), and other
            # processes' mappings then only map existing pages. Older kernels fault them in on
            # first write instead.
            populate(self._map, offset, end)
        return offset

    def _alloc_space(self, size: int, for_id: bytes) -> int:
        offset = self.alloc.alloc(size)
        if offset is not None:
            return offset
        victims = sorted((e for e in self.objects.values()
                          if e.state == "SEALED" and not e.pinned and e.object_id != for_id
                          and e.fallback is None),
                         key=lambda e: (e.primary, e.last_access))
        for v in victims:
            self._evict(v)
            offset = self.alloc.alloc(size)
            if offset is not None:
                return offset
        pinned = sum(e.size for e in self.objects.values() if e.pinned or e.state == "CREATED")
        raise ResourceExhausted(
            f"object store full: {size} bytes requested; {self.alloc.used} of {self.capacity} bytes "
            f"used, {pinned} bytes in objects being written or read, nothing more can be spilled")

    def _evict(self, e: Entry) -> None:
        """Spills a primary copy (drops a secondary one) and frees its space."""
        if e.primary:
            if not e.spill_path:
                try:
                    e.spill_path = self.spiller.write(e.object_id, self.buffer(e))
                except SpillError as err:
                    raise ResourceExhausted(f"object store full and spilling failed: {err}") from None
            e.state = "SPILLED"
            self.spilled_bytes += e.size
            log.debug("spilled %s (%d bytes)", e.object_id.hex(), e.size)
        else:
            del self.objects[e.object_id]
        self.alloc.free(e.offset)
        e.offset = -1

    # ------------------------------------------------------------------ reading
    def get(self, object_id: bytes, client: str) -> Entry:
        """Pins the object for client (restoring it from spill first); NotFound if unknown."""
        e = self._entry(object_id)
        if e.state == "CREATED":
            raise NotFound(f"object {object_id.hex()} is not sealed yet")
        if e.state == "SPILLED":
            self._restore(e)
        e.pins[client] = e.pins.get(client, 0) + 1
        e.last_access = time.monotonic()
        return e

    def _restore(self, e: Entry) -> None:
        self._place(e)
        try:
            self.spiller.read_into(e.spill_path, self.buffer(e), e.object_id)
        except SpillReadError as err:
            self._unplace(e)
            raise DataLoss(str(err)) from None
        e.state = "SEALED"
        self.spilled_bytes -= e.size

    def release(self, object_id: bytes, client: str) -> None:
        e = self.objects.get(object_id)
        if e is None or client not in e.pins:
            return
        e.pins[client] -= 1
        if e.pins[client] <= 0:
            del e.pins[client]
        if e.freed and not e.pinned:
            self._delete(e)

    # ------------------------------------------------------------------ freeing
    def free(self, object_id: bytes) -> None:
        e = self.objects.get(object_id)
        if e is None:
            return
        e.freed = True
        if not e.pinned and e.state != "CREATED":  # a creator still writing: deleted at seal
            self._delete(e)

    def _delete(self, e: Entry) -> None:
        self.objects.pop(e.object_id, None)
        self._unplace(e)
        if e.state == "SPILLED":
            self.spilled_bytes -= e.size
        if e.spill_path:
            self.spiller.delete(e.spill_path)

    def _unplace(self, e: Entry) -> None:
        """Gives back the object's room (its arena range, or its fallback file)."""
        if e.fallback_path:
            e.fallback = None  # unmapped once the last view of it (a transfer's) is gone
            try:
                os.unlink(e.fallback_path)
            except FileNotFoundError:
                pass
            self.fallback_bytes -= e.size
            e.fallback_path = ""
        elif e.offset >= 0:
            self.alloc.free(e.offset)
        e.offset = -1

    def client_died(self, client: str) -> int:
        """Drops a dead process's pins, aborts what it was still writing and frees the objects it
        owned (and, remembered, the copies of its objects that arrive later). Returns how many
        were dropped."""
        self.dead_owners[client] = None
        self.dead_owners.move_to_end(client)
        while len(self.dead_owners) > DEAD_OWNERS_KEPT:
            self.dead_owners.popitem(last=False)
        freed = 0
        for e in list(self.objects.values()):
            e.pins.pop(client, None)
            if e.owner == client:
                e.freed = True
            if e.state == "CREATED" and e.creator and e.creator == client:
                # Killed between Create and Seal: nobody can finish the write (a retry of its
                # task elsewhere makes its own copy), so the space would be held for ever.
                log.info("dropping %s: its writer %s died before sealing it", e.object_id.hex(), client)
                self._delete(e)
                freed += 1
            elif e.freed and not e.pinned and e.state != "CREATED":
                self._delete(e)
                freed += 1
        return freed

    def _entry(self, object_id: bytes) -> Entry:
        e = self.objects.get(object_id)
        if e is None:
            raise NotFound(f"object {object_id.hex()} is not in this store")
        return e

    def contains(self, object_id: bytes) -> bool:
        e = self.objects.get(object_id)
        return e is not None and e.state != "CREATED"

    def destroy(self) -> None:
        self.prefaulter.stop()
        for e in list(self.objects.values()):
            if e.fallback_path:
                self._unplace(e)
        try:
            self.view.release()
            self._map.close()
        except BufferError:  # a transfer still holds a slice; the process is exiting anyway
            pass
        self.spiller.destroy()
        shutil.rmtree(self.store_dir, ignore_errors=True)
        try:
            os.rmdir(os.path.dirname(self.store_dir))  # the session's store root, once empty
        except OSError:
            pass
