"""Client side of the node's shared-memory object store (the arena of ember_objmgr).

Layout of one object inside its arena range: b"EMB1" | u32 header_len | header | data | buffers,
each part 64-byte aligned. header = u64 data_offset, u64 data_len, u32 n, n x (u64 offset,
u64 len), u16 meta_len, meta (offsets relative to the object's start).

put: Create (the object manager reserves space, spilling others if needed) -> one copy of the
pickle stream and each out-of-band buffer into the mapped arena -> Seal. The copy takes no page
fault: a driver populates its mapping of the arena's first pages on a background thread from
start-up (ember_common.shm_prefault), and any process populates an object's range in one call
before writing a large value (the pages stay mapped for the next put there).
get: Get (pins the object; restores it from spill) -> zero-copy read-only views. All views of an
object hang off one read-only numpy array; when the last view is garbage collected the pin is
released (batched Release RPCs), after which the space may be reused.
A process that cannot map the arena (a remote client) writes with WriteObject and reads over
parallel ObjectTransfer.ReadRange streams into one read-only buffer.
"""
from __future__ import annotations

import asyncio
import logging
import mmap
import os
import struct
import weakref
from typing import Any, Awaitable, Callable, Protocol, TypeVar

import grpc

from ember import exceptions as exc
from ember_common import tracing
from ember_common.config import get_config
from ember_common.proto import objmgr_pb2, objmgr_pb2_grpc
from ember_common.shm_prefault import Prefaulter, populate

from .serialization import SerializedValue

T = TypeVar("T")

MAGIC = b"EMB1"
ALIGN = 64
CHUNK_BYTES = 16 * 1024 * 1024
# Remote clients read objects over ReadRange: the first range, then up to this many in parallel.
REMOTE_FIRST_BYTES = 8 * 1024 * 1024
log = logging.getLogger(__name__)
REMOTE_STREAMS = 4
# A Get of a local object (a pin; a restore from spill at most) answers in well under this.
GET_TIMEOUT_S = 120.0
# A remote client's ReadRange stream that brings nothing for this long has lost its node.
REMOTE_STALL_S = 30.0
# Buffers at least this large are placed for a fast copy (layout); PAGE: the CPU's aliasing period.
SPREAD_MIN_BYTES = 64 * 1024
PAGE = 4096
# Puts at least this large populate their range of this process's mapping before the copy.
POPULATE_MIN_BYTES = 1024 * 1024


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _copy_friendly(b: Any) -> int:
    """Where (modulo a page) a large buffer's copy should start: half a page away from its
    source's position, so that the copy's loads never alias its stores in the CPU's 4 KiB
    store-forwarding check (a destination just past its source, modulo 4 KiB, makes the copy
    several times slower). 64-byte aligned, like every other part of an object."""
    import numpy as np  # not at import (see get); a buffer this large is numpy's anyway

    src = int(np.frombuffer(b, dtype=np.uint8).__array_interface__["data"][0])
    return (src - src % ALIGN + PAGE // 2) % PAGE


def layout(sv: SerializedValue, base: int = 0) -> tuple[int, bytes, int, list[tuple[int, int]]]:
    """(total size, header, data offset, buffer spans) of a value's object placed at arena
    offset `base`. The total does not depend on `base`: it is known before the store places
    the object, and each large buffer's span then moves within its page of slack."""
    meta = sv.metadata.encode()
    n = len(sv.buffers)
    header_len = 8 + 8 + 4 + 16 * n + 2 + len(meta)
    data_offset = _align(8 + header_len)
    offset = reserve = _align(data_offset + len(sv.data))
    spans = []
    for b in sv.buffers:
        if b.nbytes >= SPREAD_MIN_BYTES:
            offset += (_copy_friendly(b) - base - offset) % PAGE
            reserve += PAGE
        spans.append((offset, b.nbytes))
        offset, reserve = _align(offset + b.nbytes), _align(reserve + b.nbytes)
    header = struct.pack("<QQI", data_offset, len(sv.data), n)
    header += b"".join(struct.pack("<QQ", o, ln) for o, ln in spans)
    header += struct.pack("<H", len(meta)) + meta
    return max(reserve, 8 + len(header)), MAGIC + struct.pack("<I", len(header)) + header, data_offset, spans


_warned_fallback = False


def _write_fallback(path: str, total: int, sv: SerializedValue) -> None:
    """Writes a value into the file the store allocated for it outside its full arena (Ray's
    fallback allocation), warning once per process."""
    global _warned_fallback
    if not _warned_fallback:
        _warned_fallback = True
        log.warning("The object store is full: objects are being allocated in files outside it "
                    "(%s), which is slower; raise object_store_memory.", os.path.dirname(path))
    _, header, data_offset, spans = layout(sv)
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), total) as mm:
        view = memoryview(mm)
        try:
            write_into(view, sv, header, data_offset, spans)
        finally:
            view.release()


def write_into(view: memoryview, sv: SerializedValue, header: bytes, data_offset: int,
               spans: list[tuple[int, int]]) -> None:
    view[:len(header)] = header
    view[data_offset:data_offset + len(sv.data)] = sv.data
    for (o, ln), b in zip(spans, sv.buffers, strict=True):
        view[o:o + ln] = b


def parse(obj: Any) -> tuple[Any, list[Any], str]:
    """(data, buffers, metadata) of an object given as a uint8 array or bytes-like."""
    try:
        return _parse(obj)
    except struct.error:
        raise exc.ObjectLostError(message="shared-memory object is corrupt (truncated header)") from None


def _parse(obj: Any) -> tuple[Any, list[Any], str]:
    view = memoryview(obj)
    if bytes(view[:4]) != MAGIC:
        raise exc.ObjectLostError(message="shared-memory object is corrupt (bad magic)")
    data_offset, data_len, n = struct.unpack_from("<QQI", view, 8)
    pos = 8 + 20
    buffers = []
    for _ in range(n):
        o, ln = struct.unpack_from("<QQ", view, pos)
        pos += 16
        buffers.append(obj[o:o + ln])
    (mlen,) = struct.unpack_from("<H", view, pos)
    meta = bytes(view[pos + 2:pos + 2 + mlen]).decode()
    return obj[data_offset:data_offset + data_len], buffers, meta


class PlasmaCore(Protocol):
    """What the shared-memory client needs of the core worker (CoreWorker, in core_worker.py)."""

    worker_id: str
    store_dir: str
    loop: asyncio.AbstractEventLoop
    objmgr: objmgr_pb2_grpc.ObjectManagerAsyncStub
    objmgr_channel: grpc.aio.Channel

    @property
    def mode(self) -> str: ...  # a WorkerMode: a driver prefaults the arena

    @property
    def is_shutdown(self) -> bool: ...

    def run(self, coro: Awaitable[T] | Callable[[], Awaitable[T]], timeout: float | None = None) -> T: ...

    def post(self, fn: Callable[..., object], *args: Any) -> None: ...


class PlasmaClient:
    def __init__(self, core: PlasmaCore) -> None:
        self.core = core
        self.client_id = core.worker_id
        self._mm: mmap.mmap | None = None
        self._view: memoryview | None = None
        self._ro: memoryview | None = None
        self.prefaulter: Prefaulter | None = None
        self._remote: bool | None = None
        self._to_release: list[bytes] = []
        self._release_scheduled = False
        if str(core.mode) == "driver":
            self.start_prefault()

    def _arena(self) -> bool:
        """Maps the arena once; False if this process cannot (remote client)."""
        if self._remote is None:
            path = os.path.join(self.core.store_dir, "arena")
            try:
                with open(path, "r+b") as f:
                    mm = mmap.mmap(f.fileno(), 0)
                self._mm = mm
                self._view = memoryview(mm)
                self._ro = self._view.toreadonly()
                self._remote = False
            except OSError:
                self._remote = True
        return not self._remote

    def start_prefault(self) -> None:
        """Populates this process's mapping of the arena's first pages on a background thread
        (a driver, at connect), so its first large puts take no page fault."""
        limit = get_config().object_store_prefault_bytes
        if self.prefaulter is None and limit > 0 and self._arena():
            assert self._mm is not None
            self.prefaulter = Prefaulter(self._mm, limit).start()

    def _write(self, reply: Any, total: int, sv: SerializedValue) -> None:
        """The one copy of a value into the room the store gave it (a CreateReply): its range of
        the mapped arena, or a file of its own when the store was full."""
        if reply.fallback_path:
            _write_fallback(reply.fallback_path, total, sv)
            return
        offset = reply.offset
        assert self._view is not None and self._mm is not None
        _, header, data_offset, spans = layout(sv, offset)
        end = offset + total
        if total >= POPULATE_MIN_BYTES and (self.prefaulter is None or end > self.prefaulter.populated):
            populate(self._mm, offset, end)  # one call instead of a fault per page
        write_into(self._view[offset:end], sv, header, data_offset, spans)

    # ------------------------------------------------------------------ put
    def put(self, oid: bytes, sv: SerializedValue, owner: str) -> int:
        """Writes a value (user thread). Returns its size in the store."""
        total, header, data_offset, spans = layout(sv)
        core = self.core
        if not self._arena():
            core.run(self._write_remote(oid, sv, owner, total, header, data_offset, spans))
            return total
        md = tracing.metadata()
        reply = self._call_store(lambda: core.objmgr.Create(objmgr_pb2.CreateRequest(
            object_id=oid, size=total, owner_worker_id=owner, client_id=self.client_id),
            timeout=120, metadata=md))
        self._write(reply, total, sv)
        self._call_store(lambda: core.objmgr.Seal(objmgr_pb2.SealRequest(object_id=oid), timeout=30,
                                                  metadata=md))
        return total

    async def put_async(self, oid: bytes, sv: SerializedValue, owner: str) -> int:
        """put() for code on the core loop."""
        total, header, data_offset, spans = layout(sv)
        if not self._arena():
            await self._write_remote(oid, sv, owner, total, header, data_offset, spans)
            return total
        try:
            reply = await self.core.objmgr.Create(objmgr_pb2.CreateRequest(
                object_id=oid, size=total, owner_worker_id=owner, client_id=self.client_id),
                timeout=120)
            self._write(reply, total, sv)
            await self.core.objmgr.Seal(objmgr_pb2.SealRequest(object_id=oid), timeout=30)
        except grpc.aio.AioRpcError as e:
            raise _store_error(e) from None
        return total

    def _call_store(self, factory: Any) -> Any:
        try:
            return self.core.run(factory)
        except grpc.aio.AioRpcError as e:
            raise _store_error(e) from None

    async def _write_remote(self, oid: bytes, sv: SerializedValue, owner: str, total: int,
                            header: bytes, data_offset: int, spans: list[tuple[int, int]]) -> None:
        buf = bytearray(total)
        write_into(memoryview(buf), sv, header, data_offset, spans)

        async def chunks() -> Any:
            for pos in range(0, total, CHUNK_BYTES):
                yield objmgr_pb2.ObjectChunk(total_size=total, offset=pos, data=bytes(buf[pos:pos + CHUNK_BYTES]),
                                             object_id=oid if pos == 0 else b"", owner_worker_id=owner)
        try:
            await self.core.objmgr.WriteObject(chunks(), timeout=600)
        except grpc.aio.AioRpcError as e:
            raise _store_error(e) from None

    # ------------------------------------------------------------------ get
    async def get_async(self, oid: bytes) -> tuple[Any, list[Any], str]:
        """Zero-copy (data, buffers, metadata) of a local object, pinned until its views die."""
        if not self._arena():
            return parse(await self._read_remote(oid))
        try:
            reply = await self.core.objmgr.Get(objmgr_pb2.GetRequest(object_ids=[oid], client_id=self.client_id),
                                               timeout=GET_TIMEOUT_S,  # a stopped objmgr: an error, not a hang
                                               metadata=tracing.metadata())  # restore spans join the trace
        except grpc.aio.AioRpcError as e:
            if e.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.DATA_LOSS):
                raise exc.ObjectLostError(oid.hex(), f"Object {oid.hex()} is lost: {e.details()}") from None
            raise _store_error(e) from None
        loc = reply.objects[0]
        assert self._ro is not None
        import numpy as np  # not at import: a worker loads numpy only when it reads an object

        if loc.fallback_path:  # allocated outside the full arena: a file of its own
            with open(loc.fallback_path, "rb") as f:
                base = np.frombuffer(mmap.mmap(f.fileno(), loc.size, access=mmap.ACCESS_READ), dtype=np.uint8)
        else:
            base = np.frombuffer(self._ro[loc.offset:loc.offset + loc.size], dtype=np.uint8)
        weakref.finalize(base, self._release_later, oid)
        return parse(base)

    async def _read_remote(self, oid: bytes) -> Any:
        """The object's bytes over ObjectTransfer.ReadRange streams (several at once for big
        objects), each chunk copied straight into one buffer; returned as a read-only array."""
        import numpy as np  # not at import (see above)

        stub = objmgr_pb2_grpc.ObjectTransferStub(self.core.objmgr_channel)
        buf: np.ndarray | None = None

        async def fetch(lo: int, length: int) -> None:
            nonlocal buf
            pos = lo
            call = stub.ReadRange(objmgr_pb2.ReadRangeRequest(object_id=oid, offset=lo, length=length))
            it = call.__aiter__()
            while True:
                try:
                    chunk = await asyncio.wait_for(it.__anext__(), REMOTE_STALL_S)
                except StopAsyncIteration:
                    break
                except asyncio.TimeoutError:
                    call.cancel()
                    raise exc.ObjectLostError(oid.hex(), f"Object {oid.hex()} is lost: its node sent "
                                              f"nothing for {REMOTE_STALL_S:g}s") from None
                if buf is None:
                    buf = np.empty(chunk.total_size, dtype=np.uint8)
                    step = -(-(chunk.total_size - REMOTE_FIRST_BYTES) // REMOTE_STREAMS)
                    if step > 0:
                        rest.extend(asyncio.ensure_future(fetch(o, step)) for o in
                                    range(REMOTE_FIRST_BYTES, chunk.total_size, step))
                n = len(chunk.data)
                buf[pos:pos + n] = np.frombuffer(chunk.data, dtype=np.uint8)
                pos += n

        rest: list[asyncio.Future[None]] = []
        try:
            await fetch(0, REMOTE_FIRST_BYTES)
            await asyncio.gather(*rest)
        except (grpc.aio.AioRpcError, exc.ObjectLostError) as e:
            for f in rest:
                f.cancel()
            if isinstance(e, exc.ObjectLostError):
                raise
            raise exc.ObjectLostError(oid.hex(), f"Object {oid.hex()} is lost: {e.details()}") from None
        assert buf is not None
        buf.flags.writeable = False
        return buf

    def _release_later(self, oid: bytes) -> None:
        # Runs wherever the last view was collected: batch the pins and release them on the loop.
        self._to_release.append(oid)
        if not self._release_scheduled and not self.core.is_shutdown:
            self._release_scheduled = True
            self.core.post(self._schedule_release)

    def _schedule_release(self) -> None:
        self.core.loop.call_later(0.01, lambda: asyncio.ensure_future(self._flush_releases()))

    async def _flush_releases(self) -> None:
        self._release_scheduled = False
        oids, self._to_release = self._to_release, []
        if oids:
            try:
                await self.core.objmgr.Release(objmgr_pb2.ReleaseRequest(
                    object_ids=oids, client_id=self.client_id), timeout=10)
            except grpc.aio.AioRpcError:
                pass  # the object manager is gone, and its pins with it


def _store_error(e: grpc.aio.AioRpcError) -> Exception:
    if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return exc.ObjectStoreFullError(e.details())
    return exc.RaySystemError(f"object store: {e.code().name}: {e.details()}")
