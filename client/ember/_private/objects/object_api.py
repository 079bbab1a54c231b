"""The object half of CoreWorker: put/get/wait on the objects a process owns or borrows.

`ObjectAPI` is mixed into CoreWorker (core_worker.py), which creates the state declared at the
top of the class (the memory store, the reference table, the shared-memory client, the node
view) and the loop plumbing (run/in_loop/worker_stub, the blocking-wait notice to the raylet).
Owned objects wait in the memory store; borrowed ones are fetched from their owner; values in
shared memory are pulled from the nearest node holding a copy and the copy reported back (the
`ObjectTransfer` half it inherits, object_transfer.py, which also resends missed Frees). An
owned task return whose every copy is lost is rebuilt from its lineage on `get`
(reconstruction.py, over the policy in lineage.py) before it is read again.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
from typing import TYPE_CHECKING, Any, Awaitable, Callable, TypeVar, cast

import grpc

from ember import exceptions as exc
from ember_common import ids
from ember_common.config import Config
from ember_common.proto import common_pb2, core_worker_pb2

from ..owner.reconstruction import Reconstructor, ReconstructorCore
from .object_ref import ObjectRef, OwnerAddress
from .object_transfer import ObjectTransfer
from .plasma import PlasmaClient
from .serialization import ERROR_METADATA, SerializedValue, deserialize, deserialize_proto

if TYPE_CHECKING:
    from ..execution.blocking import OnWait
    from ..owner.task_queue import TaskEntry

T = TypeVar("T")


class ObjectAPI(ObjectTransfer):
    """put/get/wait (mixed into CoreWorker); the transfers behind them: ObjectTransfer."""

    # Set by CoreWorker.__init__ and its loop's start-up (the rest: ObjectTransfer's).
    config: Config
    address: OwnerAddress
    loop: asyncio.AbstractEventLoop
    plasma: PlasmaClient
    _reconstructor: Reconstructor | None = None

    if TYPE_CHECKING:  # CoreWorker's loop plumbing
        def run(self, coro: Awaitable[T] | Callable[[], Awaitable[T]],
                timeout: float | None = None) -> T: ...
        def in_loop(self) -> bool: ...
        def _blocking(self, coro: Awaitable[T] | None,
                      fn: Callable[[OnWait | None], T] | None = None) -> T: ...
        def _lends(self) -> bool: ...

    async def wait_object(self, ref: ObjectRef, timeout: float | None) -> common_pb2.ReturnObject:
        """Waits until the object is known locally (owned) or fetches it from its owner."""
        oid = ref.binary()
        entry = self.store.get(oid)
        if entry is not None:
            return entry
        if ref.owner_address.worker_id == self.worker_id or self.ref_table.owns(oid):
            fut: asyncio.Future[common_pb2.ReturnObject] = self.loop.create_future()
            self.store.add_waiter(oid, fut)
            try:
                return await asyncio.wait_for(fut, timeout)
            except asyncio.TimeoutError:
                raise exc.GetTimeoutError(f"Get timed out: object {oid.hex()} not ready after {timeout}s") from None
        return await self._fetch_from_owner(ref, timeout)

    async def _fetch_from_owner(self, ref: ObjectRef, timeout: float | None) -> common_pb2.ReturnObject:
        ip, port, worker_id, _ = ref.owner_address
        stub = self.worker_stub(f"{ip}:{port}")
        try:
            reply = await stub.GetObject(core_worker_pb2.GetObjectRequest(
                object_id=ref.binary(), timeout_s=timeout if timeout is not None else -1))
        except grpc.aio.AioRpcError as e:
            raise exc.OwnerDiedError(ref.hex(), f"Object {ref.hex()} is lost: its owner (worker "
                                     f"{worker_id} at {ip}:{port}) is unreachable ({e.code().name})") from None
        if reply.status == core_worker_pb2.GetObjectReply.TIMEOUT:
            raise exc.GetTimeoutError(f"Get timed out: object {ref.hex()} not ready after {timeout}s")
        if reply.status == core_worker_pb2.GetObjectReply.NOT_FOUND:
            raise exc.ObjectLostError(ref.hex(), f"Object {ref.hex()} is lost: its owner no longer has it")
        if self.ref_table.has_local_ref(ref.binary()):
            self.store.put_quiet(reply.object)
            if reply.copy_node_ids:
                self.store.add_copies(ref.binary(), reply.copy_node_ids)
        return reply.object

    # ---------------------------------------------------------------- get / put / wait
    def put_serialized(self, sv: SerializedValue, oid: bytes | None = None) -> ObjectRef:
        """put(): stores a serialized value owned by this process."""
        oid = oid or ids.new_put_id()
        entry = self.store_value(oid, sv)  # may raise ObjectStoreFullError: nothing to undo
        self.ref_table.add_owned(oid)
        if sv.contained_refs:  # the outer object holds the refs nested in it
            self.ref_table.hold_nested(oid, sv.contained_refs)
        ref = ObjectRef(oid, self.address, self)
        self.store.put_quiet(entry)
        return ref

    def store_value(self, oid: bytes, sv: SerializedValue, owner: str | None = None) -> common_pb2.ReturnObject:
        """Inline for small values; else written to this node's shared-memory store. `owner` is
        the worker id of the object's owner (this process unless given)."""
        if sv.size <= self.config.max_inline_bytes:
            return common_pb2.ReturnObject(object_id=oid, value=sv.to_proto(), size=sv.size)
        if self.in_loop():
            raise RuntimeError("store_value() on the core loop; use store_value_async()")
        size = self.plasma.put(oid, sv, owner or self.worker_id)
        return common_pb2.ReturnObject(object_id=oid, in_plasma=True, node_id=self.node_id, size=size)

    async def store_value_async(self, oid: bytes, sv: SerializedValue,
                                owner: str | None = None) -> common_pb2.ReturnObject:
        """store_value for code running on the loop."""
        if sv.size <= self.config.max_inline_bytes:
            return common_pb2.ReturnObject(object_id=oid, value=sv.to_proto(), size=sv.size)
        size = await self.plasma.put_async(oid, sv, owner or self.worker_id)
        return common_pb2.ReturnObject(object_id=oid, in_plasma=True, node_id=self.node_id, size=size)

    async def get_async(self, ref: ObjectRef) -> Any:
        """get() for code running on the loop."""
        entry = await self.wait_object(ref, None)
        try:
            return await self.materialize_async(entry, ref.owner_address)
        except exc.ObjectLostError:
            if not self._recoverable(entry, ref):
                raise
        return await self._materialize_or_recover(entry, ref, None)

    def get(self, refs: list[ObjectRef], timeout: float | None = None) -> list[Any]:
        """get() from a user thread: owned objects wait here, borrowed ones on the loop."""
        sget = self.store.get
        if len(refs) == 1:  # the commonest call: one ref whose inline value is here already
            only = sget(refs[0].binary())
            if only is not None and not only.in_plasma:
                return [self.materialize(only)]
        entries: list[common_pb2.ReturnObject | None] = [sget(r.binary()) for r in refs]
        missing = [r for r, e in zip(refs, entries, strict=False) if e is None]
        if missing:
            owns = self.ref_table.owns
            if all(owns(r.binary()) for r in missing):
                self._blocking(None, lambda on_wait: self._wait_owned(missing, timeout, on_wait))
                entries = [sget(r.binary()) for r in refs]
            else:
                got = self._ready_now(missing, errors_ready=False)  # those lend no CPUs
                rest = [r for r in missing if r.binary() not in got]
                if rest:
                    got.update(self._blocking(self._wait_all(rest, timeout)))
                entries = [e if e is not None else got[r.binary()] for r, e in zip(refs, entries, strict=False)]
        # Every entry is present now: the waits above returned only once each object was.
        present = cast(list[common_pb2.ReturnObject], entries)
        if any(e.in_plasma for e in present):
            try:
                return self.run(self._materialize_all(present, refs))
            except exc.ObjectLostError:
                if not any(self._recoverable(e, r) for e, r in zip(present, refs, strict=False)):
                    raise
            # Some owned object is lost: rebuild it (lending CPUs while its task reruns).
            return self._blocking(self._recover_all(present, refs, timeout))
        return [self.materialize(e) for e in present]

    async def _materialize_all(self, entries: list[common_pb2.ReturnObject],
                               refs: list[ObjectRef]) -> list[Any]:
        return [await self.materialize_async(e, r.owner_address) for e, r in zip(entries, refs, strict=False)]

    async def _recover_all(self, entries: list[common_pb2.ReturnObject], refs: list[ObjectRef],
                           timeout: float | None) -> list[Any]:
        # Concurrently: objects lost with one node are rebuilt side by side.
        return list(await asyncio.gather(*(self._materialize_or_recover(e, r, timeout)
                                           for e, r in zip(entries, refs, strict=False))))

    # ---------------------------------------------------------------- lineage reconstruction
    def _recoverable(self, entry: common_pb2.ReturnObject, ref: ObjectRef) -> bool:
        """An owned task return in shared memory: its lineage may rebuild it."""
        return entry.in_plasma and self.reconstructor().recoverable(entry, ref)

    async def _materialize_or_recover(self, entry: common_pb2.ReturnObject, ref: ObjectRef,
                                      timeout: float | None) -> Any:
        """materialize_async; an owned object whose every copy is lost is rebuilt first."""
        return await self.reconstructor().read(entry, ref, timeout)

    def reconstructor(self) -> Reconstructor:
        """The driver of this process's lineage (made on first use)."""
        r = self._reconstructor
        if r is None:
            r = self._reconstructor = Reconstructor(cast(ReconstructorCore, self))
        return r

    def record_lineage(self, entry: TaskEntry) -> None:
        """Loop thread: a task finished with a return in shared memory; keep its lineage."""
        self.reconstructor().record(entry)

    def retry_after_lost_argument(self, entry: TaskEntry,
                                  reply: core_worker_pb2.PushTaskReply) -> bool:
        """Loop thread: True when the task failed only because an owned argument was lost;
        the argument is being rebuilt and the task will be resubmitted after it."""
        first = reply.returns[0]
        if first.in_plasma or first.value.metadata != ERROR_METADATA:
            return False
        return self.reconstructor().retry_after_lost_argument(entry, first)

    def _ready_now(self, refs: list[ObjectRef], errors_ready: bool) -> dict[bytes, Any]:
        """In a worker that would lend its CPUs to wait: the entries of borrowed refs whose
        owner has them now (asked without waiting), so that only a real wait lends. An owner's
        error is raised, or (errors_ready) counts as ready, as wait() counts it."""
        owns = self.ref_table.owns
        borrowed = [r for r in refs if not owns(r.binary())]
        if not borrowed or not self._lends():
            return {}

        async def ask(r: ObjectRef) -> Any:
            try:
                return await self._fetch_from_owner(r, 0)
            except exc.GetTimeoutError:
                return None
            except exc.RayError:
                if errors_ready:
                    return True
                raise

        async def ask_all() -> list[Any]:
            return await asyncio.gather(*(ask(r) for r in borrowed))

        return {r.binary(): e for r, e in zip(borrowed, self.run(ask_all), strict=False) if e is not None}

    async def _wait_all(self, refs: list[ObjectRef],
                        timeout: float | None) -> dict[bytes, common_pb2.ReturnObject]:
        results = await asyncio.gather(*(self.wait_object(r, timeout) for r in refs))
        return {r.binary(): e for r, e in zip(refs, results, strict=False)}

    def _wait_owned(self, refs: list[ObjectRef], timeout: float | None, on_wait: OnWait | None) -> None:
        """User thread: waits until owned objects are stored, without a trip through the loop."""
        pending = self.store.wait_sync([r.binary() for r in refs], timeout, on_wait)
        if pending:
            raise exc.GetTimeoutError(f"Get timed out: {len(pending)} object(s) not ready "
                                      f"after {timeout}s (first: {pending[0].hex()})")

    def materialize(self, entry: common_pb2.ReturnObject, owner: OwnerAddress | None = None) -> Any:
        """Turns an inline entry into the user's value (or raises the stored error)."""
        if entry.in_plasma:
            return self.run(self.materialize_async(entry, owner))
        return _raise_or_return(deserialize_proto(entry.value), entry.value.metadata)

    async def materialize_async(self, entry: common_pb2.ReturnObject,
                                owner: OwnerAddress | None = None) -> Any:
        """Any entry, shared-memory ones included (pulled from the nearest copy first; the
        copy made here is reported to owner)."""
        if not entry.in_plasma:
            return _raise_or_return(deserialize_proto(entry.value), entry.value.metadata)
        if entry.node_id != self.node_id:
            await self._pull(entry, owner)
        data, buffers, meta = await self.plasma.get_async(entry.object_id)
        return _raise_or_return(deserialize(data, buffers), meta)

    def get_future(self, ref: ObjectRef) -> concurrent.futures.Future[Any]:
        """A future for the value (resolved on the loop)."""
        return asyncio.run_coroutine_threadsafe(self.get_async(ref), self.loop)

    def wait(self, refs: list[ObjectRef], num_returns: int, timeout: float | None,
             fetch_local: bool = True) -> tuple[list[ObjectRef], list[ObjectRef]]:
        """wait() from a user thread."""
        has = self.store.contains
        # The result is the first num_returns ready refs in input order: the scan stops there
        # (a wait loop over many refs, most of them ready, costs one check per call).
        found: list[int] = []
        for i, r in enumerate(refs):
            if has(r.binary()):
                found.append(i)
                if len(found) >= num_returns:
                    others = list(refs)
                    for j in reversed(found):
                        del others[j]
                    return [refs[j] for j in found], others
        ready_ids = {refs[j].binary() for j in found}
        if len(ready_ids) < num_returns and timeout != 0:
            ready_ids.update(self._ready_now([r for r in refs if r.binary() not in ready_ids],
                                             errors_ready=True))
        if len(ready_ids) < num_returns and timeout != 0:
            ready_ids = self._blocking(self._wait_some(refs, ready_ids, num_returns, timeout))
        ready: list[ObjectRef] = []
        rest: list[ObjectRef] = []
        for r in refs:
            (ready if r.binary() in ready_ids and len(ready) < num_returns else rest).append(r)
        return ready, rest

    async def _wait_some(self, refs: list[ObjectRef], ready: set[bytes], num_returns: int,
                         timeout: float | None) -> set[bytes]:
        """Waits until num_returns of refs are ready. Owned objects share one waiter,
        registered once per object (no task per ref, no rescan per wake-up); borrowed ones are
        fetched from their owners."""
        ready = set(ready)
        me, owns, store = self.worker_id, self.ref_table.owns, self.store
        owned: list[bytes] = []
        fetches: dict[asyncio.Future[Any], bytes] = {}
        for r in refs:
            oid = r.binary()
            if oid in ready:
                continue
            if r.owner_address.worker_id == me or owns(oid):
                owned.append(oid)
            else:
                fetches[asyncio.ensure_future(self.wait_object(r, None))] = oid
        loop = asyncio.get_running_loop()
        waiter = _ReadyWaiter()
        pending: set[bytes] = set()
        for oid in owned:  # the store is only written on this thread: no race with put
            if store.contains(oid):
                ready.add(oid)
            else:
                store.add_waiter(oid, waiter)
                pending.add(oid)
        deadline = None if timeout is None else loop.time() + timeout
        try:
            while True:
                if waiter.arrived:
                    for oid in waiter.arrived:
                        pending.discard(oid)
                        ready.add(oid)
                    waiter.arrived = []
                if len(ready) >= num_returns or (not pending and not fetches):
                    break
                waiter.wake = wake = loop.create_future()
                left = None if deadline is None else max(0.0, deadline - loop.time())
                done, _ = await asyncio.wait([wake, *fetches], timeout=left,
                                             return_when=asyncio.FIRST_COMPLETED)
                waiter.wake = None
                for t in done:
                    oid_ = fetches.pop(t, None)
                    if oid_ is not None:
                        if not t.cancelled():
                            t.exception()  # an error result is still "ready"
                        ready.add(oid_)
                if not done:
                    break  # timed out
        finally:
            for oid in waiter.arrived:  # arrived while the wait was timing out
                pending.discard(oid)
                ready.add(oid)
            for oid in pending:
                store.remove_waiter(oid, waiter)
            for t in fetches:
                t.cancel()
        return ready


class _ReadyWaiter:
    """One wait() call's waiter on many owned objects: it stays registered (never "done") and
    collects the ids as they arrive, waking the wait's current future."""

    __slots__ = ("arrived", "wake")

    def __init__(self) -> None:
        self.arrived: list[bytes] = []
        self.wake: asyncio.Future[None] | None = None

    def done(self) -> bool:
        return False

    def set_result(self, entry: common_pb2.ReturnObject) -> None:
        self.arrived.append(entry.object_id)
        wake = self.wake
        if wake is not None and not wake.done():
            wake.set_result(None)


def _raise_or_return(value: Any, meta: str) -> Any:
    """The value, or raises it when it is a stored error. The error is dropped from this frame
    as it leaves: a frame that kept it would be in its traceback and the two in a reference
    cycle, which keeps the caller's frames (and the refs in their locals) until the cyclic GC
    runs (tests/integration/core/test_free_after_crash.py)."""
    if meta == ERROR_METADATA:
        err = value.as_instanceof_cause() if isinstance(value, exc.RayTaskError) else value
        try:
            raise err
        finally:
            del value, err
    return value
