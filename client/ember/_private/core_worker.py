"""CoreWorker: the runtime inside every driver and worker process.

It owns the objects its process creates (an in-memory store for small values, locations for
shared-memory ones), counts references (local ones here, borrowers in references.py), submits
tasks (task_submitter.py) and serves its objects to borrowers over gRPC. All gRPC work runs on
one asyncio loop in a background thread; the user-facing calls (get/put/wait/submit) come from
user threads and hop onto the loop only when they must wait.
"""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import os
import threading
import time
from typing import Any, Callable

import grpc

from ember import exceptions as exc
from ember_common.proto import common_pb2, core_worker_pb2, core_worker_pb2_grpc
from ember_common.proto import objmgr_pb2, objmgr_pb2_grpc

from ember_common import backoff, ids, rpc, tracing
from ember_common.config import Config
from ember_common.gcs_client import GcsClient
from ember_common.raylet_client import RayletClient
from .object_ref import ObjectRef, OwnerAddress
from .serialization import ERROR_METADATA, SerializedValue, deserialize, deserialize_proto, serialize

log = logging.getLogger(__name__)


def node_ip() -> str:
    return os.environ.get("EMBER_NODE_IP", "127.0.0.1")


class CoreWorker:
    """Per-process runtime. mode is "driver" or "worker"."""

    def __init__(self, mode: str, *, gcs_address: str, raylet_address: str, objmgr_address: str,
                 node_id: str, store_dir: str, job_id: bytes, session_dir: str,
                 config: Config, worker_id: str | None = None) -> None:
        self.mode = mode
        self.config = config
        self.gcs_address = gcs_address
        self.raylet_address = raylet_address
        self.objmgr_address = objmgr_address
        self.node_id = node_id
        self.store_dir = store_dir
        self.job_id = job_id
        self.session_dir = session_dir
        self.worker_id = worker_id or ids.new_worker_id()
        self.ip = node_ip()
        # Object state. _objects/_waiters are touched on the loop thread; _objects is also read
        # (and, for put, written) from user threads, which is safe for single dict operations.
        self._objects: dict[bytes, common_pb2.ReturnObject] = {}
        self._waiters: dict[bytes, list[asyncio.Future]] = {}
        # User threads blocked in get() on owned objects wait on these (no loop hop needed).
        self._sync_waiters: dict[bytes, list[threading.Event]] = {}
        self._ref_lock = threading.Lock()
        self._refcounts: dict[bytes, int] = {}
        self._owned: set[bytes] = set()
        # Owned objects pinned until this process exits (refs pickled outside Ember's serializer,
        # actor creation arguments).
        self._escaped: set[bytes] = set()
        # outer object id -> the ObjectRefs nested in it, held while the outer object is kept.
        self._contained: dict[bytes, list[ObjectRef]] = {}
        # Shared-memory object -> other nodes holding a copy (owner: reported by readers;
        # borrower: as the owner told us, plus our own node once we pulled it).
        self._copies: dict[bytes, set[str]] = {}
        from .references import References

        self.refs = References(self)
        self._nodes: dict[str, common_pb2.NodeInfo] = {}
        self._nodes_at = 0.0
        self.generators: dict[bytes, Any] = {}  # task_id -> generator.GeneratorState
        self._blocked_depth = 0
        self._shutdown = False
        self.executor: Any = None  # set by the worker process (executor.TaskExecutor)
        self.loop = asyncio.new_event_loop()
        self._inbox: collections.deque = collections.deque()
        self._wakeup_pending = False
        self._thread = threading.Thread(target=self._run_loop, name="ember-core", daemon=True)
        self._thread.start()
        self.port = self._call(self._async_init())
        self.address: OwnerAddress = (self.ip, self.port, self.worker_id, self.node_id)
        self.address_proto = common_pb2.Address(ip=self.ip, port=self.port, worker_id=self.worker_id,
                                                node_id=self.node_id)

    # ---------------------------------------------------------------- loop plumbing
    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def _call(self, coro: Any, timeout: float | None = None) -> Any:
        """Runs a coroutine on the loop from a user thread and waits for it. A gRPC call must be
        created on the loop, so pass it as a zero-argument callable (lambda: stub.Method(req))."""
        return asyncio.run_coroutine_threadsafe(_as_coro(coro), self.loop).result(timeout)

    def gcs_call(self, factory: Callable[[], Any]) -> Any:
        """Calls the GCS client (`self.gcs`, a GcsClient) from a user thread:
        gcs_call(lambda: core.gcs.method(...)). The client retries idempotent calls while the
        GCS is unreachable (it may be restarting)."""
        return self._call(factory)

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """Runs fn(*args) on the loop soon. Posts from user threads share one wake-up of the
        loop (a system call) until the loop has drained them."""
        self._inbox.append((fn, args))
        if not self._wakeup_pending:
            self._wakeup_pending = True
            try:
                self.loop.call_soon_threadsafe(self._drain_inbox)
            except RuntimeError:  # loop closed at exit
                pass

    def _drain_inbox(self) -> None:
        self._wakeup_pending = False
        inbox = self._inbox
        while inbox:
            fn, args = inbox.popleft()
            fn(*args)

    def in_loop(self) -> bool:
        return threading.get_ident() == self._thread.ident

    async def _async_init(self) -> int:
        from .task_submitter import TaskSubmitter

        self.gcs = GcsClient(self.gcs_address)
        self._objmgr_channel = rpc.aio_channel(self.objmgr_address)
        self.objmgr = objmgr_pb2_grpc.ObjectManagerStub(self._objmgr_channel)
        self._channels: dict[str, grpc.aio.Channel] = {}
        self.raylet = RayletClient(self.raylet_address, channel_for=self.channel)
        self.submitter = TaskSubmitter(self)
        from .plasma import PlasmaClient
        from .task_stream import TaskStreams

        self.task_streams = TaskStreams(self)

        self.plasma = PlasmaClient(self)
        from .actor_submitter import ActorSubmitter

        self.actor_submitter = ActorSubmitter(self)
        from .core_worker_server import CoreWorkerServicer

        self._server, port, health = rpc.build_server(
            [lambda s: core_worker_pb2_grpc.add_CoreWorkerServicer_to_server(CoreWorkerServicer(self), s)],
            host="0.0.0.0", port=0)
        await self._server.start()
        await rpc.mark_serving(health, ["ember.CoreWorker"])
        return port

    def channel(self, address: str) -> grpc.aio.Channel:
        """A cached channel to another process (loop thread only)."""
        ch = self._channels.get(address)
        if ch is None:
            ch = self._channels[address] = rpc.aio_channel(address)
        return ch

    def worker_stub(self, address: str) -> core_worker_pb2_grpc.CoreWorkerStub:
        return core_worker_pb2_grpc.CoreWorkerStub(self.channel(address))

    def shutdown(self) -> None:
        if self._shutdown:
            return
        self._shutdown = True
        try:
            self._call(self._async_shutdown(), timeout=10)
        except Exception as e:  # the loop may already be gone at interpreter exit
            log.debug("core worker shutdown: %s", e)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)

    async def _async_shutdown(self) -> None:
        await self.submitter.shutdown()
        self.task_streams.close()
        await self.refs.close()
        plasma_owned = [oid for oid in self._owned
                        if (e := self._objects.get(oid)) is not None and e.in_plasma]
        await self._free_plasma(plasma_owned)
        await self._server.stop(0.5)
        await self.gcs.close()
        for ch in [self._objmgr_channel, *self._channels.values()]:
            await ch.close()

    # ---------------------------------------------------------------- reference counting
    def add_local_ref(self, oid: bytes, owner: OwnerAddress) -> None:
        with self._ref_lock:
            n = self._refcounts.get(oid, 0) + 1
            self._refcounts[oid] = n
            if n == 1 and owner[2] != self.worker_id:
                self.refs.first_ref(oid, owner)  # we borrow it: tell its owner

    def remove_local_ref(self, oid: bytes) -> None:
        with self._ref_lock:
            n = self._refcounts.get(oid, 0) - 1
            if n > 0:
                self._refcounts[oid] = n
                return
            self._refcounts.pop(oid, None)
            owned = oid in self._owned
            if owned:
                if oid in self._escaped or oid in self.refs.borrowers:
                    return  # kept for its borrowers (or until this process exits)
                self._owned.discard(oid)
            elif self.refs.borrowed:
                self.refs.last_ref(oid)
        if self._shutdown:
            return
        self.post(self._release, oid, owned)

    def _release(self, oid: bytes, owned: bool) -> None:
        entry = self._objects.pop(oid, None)
        if self._contained:
            self._contained.pop(oid, None)  # drops the refs nested in it
        if self._copies:
            self._copies.pop(oid, None)
        if owned and entry is not None and entry.in_plasma:
            asyncio.ensure_future(self._free_plasma([oid]))

    async def _free_plasma(self, oids: list[bytes]) -> None:
        """Deletes shared-memory objects on every node: the primary copy lives where it was
        created, and any node whose workers read it may hold a pulled copy."""
        if not oids:
            return
        await self._refresh_nodes(max_age_s=5.0)
        stubs = [self.objmgr] + [
            objmgr_pb2_grpc.ObjectManagerStub(self.channel(n.objmgr_address))
            for n in self._nodes.values()
            if n.node_id != self.node_id and n.state == common_pb2.NodeInfo.ALIVE]
        req = objmgr_pb2.FreeRequest(object_ids=oids)
        results = await asyncio.gather(*(stub.Free(req, timeout=5) for stub in stubs),
                                       return_exceptions=True)
        for r in results:
            if isinstance(r, Exception):  # that node is gone, and its store with it
                log.debug("free failed: %s", r)

    def drop_generator(self, task_id: bytes) -> None:
        """Loop thread: the ObjectRefGenerator is gone; free the items nobody took."""
        st = self.generators.pop(task_id, None)
        if st is not None:
            for i in st.items.values():
                self._contained.pop(i.object_id, None)
            asyncio.ensure_future(self._free_plasma(
                [i.object_id for i in st.items.values() if i.in_plasma]))

    def mark_escaped(self, oid: bytes) -> None:
        """Pins a ref until this process exits: it was pickled where no borrower can be tracked
        (pickle.dumps by the user, actor creation arguments the GCS may replay)."""
        with self._ref_lock:
            if oid in self._escaped:
                return
            if oid in self._owned:
                self._escaped.add(oid)
            elif oid in self._refcounts:  # borrowed: keep our registration with its owner
                self._escaped.add(oid)
                self._refcounts[oid] += 1

    def register_owned(self, oid: bytes) -> None:
        self._owned.add(oid)

    def num_local_refs(self) -> int:
        return len(self._refcounts)

    # ---------------------------------------------------------------- memory store
    def set_object(self, ret: common_pb2.ReturnObject) -> None:
        """Loop thread: records an object's value/location and wakes waiters."""
        oid = ret.object_id
        if oid not in self._refcounts and oid not in self._escaped and oid not in self.refs.borrowers:
            # Every reference was dropped while the task ran: free instead of storing.
            self._owned.discard(oid)
            if self._contained:
                self._contained.pop(oid, None)
            if ret.in_plasma:
                asyncio.ensure_future(self._free_plasma([oid]))
            return
        self._objects[oid] = ret
        for fut in self._waiters.pop(oid, ()):
            if not fut.done():
                fut.set_result(ret)
        if self._sync_waiters:
            with self._ref_lock:
                events = self._sync_waiters.pop(oid, ())
            for ev in events:
                ev.set()

    def set_error(self, oid: bytes, error: BaseException) -> None:
        sv = serialize(error, ERROR_METADATA)
        self.set_object(common_pb2.ReturnObject(object_id=oid, value=sv.to_proto()))

    async def wait_object(self, ref: ObjectRef, timeout: float | None) -> common_pb2.ReturnObject:
        """Waits until the object is known locally (owned) or fetches it from its owner."""
        oid = ref._id
        entry = self._objects.get(oid)
        if entry is not None:
            return entry
        if ref._owner[2] == self.worker_id or oid in self._owned:
            fut = self.loop.create_future()
            self._waiters.setdefault(oid, []).append(fut)
            try:
                return await asyncio.wait_for(fut, timeout)
            except asyncio.TimeoutError:
                raise exc.GetTimeoutError(f"Get timed out: object {oid.hex()} not ready after {timeout}s") from None
        return await self._fetch_from_owner(ref, timeout)

    async def _fetch_from_owner(self, ref: ObjectRef, timeout: float | None) -> common_pb2.ReturnObject:
        ip, port, worker_id, _ = ref._owner
        stub = self.worker_stub(f"{ip}:{port}")
        try:
            reply = await stub.GetObject(core_worker_pb2.GetObjectRequest(
                object_id=ref._id, timeout_s=timeout if timeout is not None else -1))
        except grpc.aio.AioRpcError as e:
            raise exc.OwnerDiedError(ref.hex(), f"Object {ref.hex()} is lost: its owner (worker "
                                     f"{worker_id} at {ip}:{port}) is unreachable ({e.code().name})") from None
        if reply.status == core_worker_pb2.GetObjectReply.TIMEOUT:
            raise exc.GetTimeoutError(f"Get timed out: object {ref.hex()} not ready after {timeout}s")
        if reply.status == core_worker_pb2.GetObjectReply.NOT_FOUND:
            raise exc.ObjectLostError(ref.hex(), f"Object {ref.hex()} is lost: its owner no longer has it")
        if ref._id in self._refcounts:
            self._objects[ref._id] = reply.object
            if reply.copy_node_ids:
                self._copies.setdefault(ref._id, set()).update(reply.copy_node_ids)
        return reply.object

    # ---------------------------------------------------------------- nodes
    async def _refresh_nodes(self, max_age_s: float = 0.0) -> None:
        if max_age_s and time.monotonic() - self._nodes_at < max_age_s:
            return
        try:
            nodes = await self.gcs.get_all_node_info(timeout_s=10, retry=backoff.NO_RETRY)
        except rpc.ServiceError:
            return  # the GCS is restarting: keep the view we have
        self._nodes = {n.node_id: n for n in nodes}
        self._nodes_at = time.monotonic()

    async def node_info(self, node_id: str) -> common_pb2.NodeInfo:
        info = self._nodes.get(node_id)
        if info is None:
            await self._refresh_nodes()
            info = self._nodes.get(node_id)
            if info is None:
                raise exc.ObjectLostError(message=f"node {node_id} is unknown to the GCS")
        return info

    # ---------------------------------------------------------------- get / put / wait
    def put_serialized(self, sv: SerializedValue, oid: bytes | None = None) -> ObjectRef:
        oid = oid or ids.new_put_id()
        entry = self.store_value(oid, sv)  # may raise ObjectStoreFullError: nothing to undo
        self._owned.add(oid)
        if sv.contained_refs:  # the outer object holds the refs nested in it
            self._contained[oid] = list(sv.contained_refs)
        ref = ObjectRef(oid, self.address, self)
        self._objects[oid] = entry
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
        return await self.materialize_async(await self.wait_object(ref, None), ref._owner)

    def get(self, refs: list[ObjectRef], timeout: float | None = None) -> list[Any]:
        entries: list[common_pb2.ReturnObject | None] = [self._objects.get(r._id) for r in refs]
        missing = [r for r, e in zip(refs, entries) if e is None]
        if missing:
            if all(r._id in self._owned for r in missing):
                self._blocking(None, lambda: self._wait_owned(missing, timeout))
                entries = [self._objects[r._id] for r in refs]
            else:
                got = self._blocking(self._wait_all(missing, timeout))
                entries = [e if e is not None else got[r._id] for r, e in zip(refs, entries)]
        if any(e.in_plasma for e in entries):  # type: ignore[union-attr]
            return self._call(self._materialize_all(entries, refs))
        return [self.materialize(e) for e in entries]  # type: ignore[arg-type]

    async def _materialize_all(self, entries: list[Any], refs: list[ObjectRef]) -> list[Any]:
        return [await self.materialize_async(e, r._owner) for e, r in zip(entries, refs)]

    async def _wait_all(self, refs: list[ObjectRef], timeout: float | None) -> dict[bytes, Any]:
        results = await asyncio.gather(*(self.wait_object(r, timeout) for r in refs))
        return {r._id: e for r, e in zip(refs, results)}

    def _wait_owned(self, refs: list[ObjectRef], timeout: float | None) -> None:
        """User thread: waits until owned objects are stored, without a trip through the loop."""
        ev = threading.Event()
        ids_ = [r._id for r in refs]
        with self._ref_lock:
            for oid in ids_:
                self._sync_waiters.setdefault(oid, []).append(ev)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                pending = [oid for oid in ids_ if oid not in self._objects]
                if not pending:
                    return
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise exc.GetTimeoutError(f"Get timed out: {len(pending)} object(s) not ready "
                                              f"after {timeout}s (first: {pending[0].hex()})")
                ev.wait(left)
                ev.clear()
        finally:
            with self._ref_lock:
                for oid in ids_:
                    lst = self._sync_waiters.get(oid)
                    if lst is not None and ev in lst:
                        lst.remove(ev)
                        if not lst:
                            del self._sync_waiters[oid]

    def _blocking(self, coro: Any, fn: Callable[[], Any] | None = None) -> Any:
        """Runs a wait (a coroutine on the loop, or fn here); a worker tells its raylet it is
        blocked meanwhile so that its CPU can go to other tasks."""
        notify = self.mode == "worker" and self.executor is not None and self.executor.running
        if notify:
            self._notify_blocked(True)
        try:
            return fn() if fn is not None else self._call(coro)
        finally:
            if notify:
                self._notify_blocked(False)

    def _notify_blocked(self, blocked: bool) -> None:
        self._blocked_depth += 1 if blocked else -1
        if (blocked and self._blocked_depth == 1) or (not blocked and self._blocked_depth == 0):
            asyncio.run_coroutine_threadsafe(_as_coro(lambda: self.raylet.notify_worker_blocked(
                self.worker_id, blocked)), self.loop)

    def materialize(self, entry: common_pb2.ReturnObject, owner: OwnerAddress | None = None) -> Any:
        """Turns an inline entry into the user's value (or raises the stored error)."""
        if entry.in_plasma:
            return self._call(self.materialize_async(entry, owner))
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

    async def _pull(self, entry: common_pb2.ReturnObject, owner: OwnerAddress | None) -> None:
        """Makes the object local: the node's own copy if there is one, else a pull from the
        nearest live node known to hold it (same IP first, the primary copy before secondary
        ones, which may be dropped), falling back to the next when one fails."""
        oid = entry.object_id
        here = self._copies.get(oid, ())
        others = [n for n in here if n not in (entry.node_id, self.node_id)]
        if others:
            await self._refresh_nodes(max_age_s=1.0)
        cands = []
        for rank, nid in enumerate([entry.node_id, *others]):
            info = self._nodes.get(nid) or (await self.node_info(nid) if rank == 0 else None)
            if info is not None and info.state == common_pb2.NodeInfo.ALIVE:
                cands.append((info.ip != self.ip, rank, info))
        failure = f"node {entry.node_id} is dead"
        for _, _, info in sorted(cands, key=lambda c: c[:2]):
            try:
                await self.objmgr.Pull(objmgr_pb2.PullRequest(
                    object_id=oid, source_address=info.objmgr_address, owner_worker_id=self.worker_id),
                    metadata=tracing.metadata())  # the objmgr's pull span joins the caller's trace
                break
            except grpc.aio.AioRpcError as e:
                failure = f"pulling it from node {info.node_id} failed: {e.details()}"
        else:
            raise exc.ObjectLostError(oid.hex(), f"Object {oid.hex()} is lost: {failure}")
        if owner is not None and self.node_id not in here:
            self._record_copy(oid, owner)

    def _record_copy(self, oid: bytes, owner: OwnerAddress) -> None:
        """Loop thread: this node now holds a copy; the owner tells later readers."""
        if owner[2] == self.worker_id:
            if oid in self._owned:
                self._copies.setdefault(oid, set()).add(self.node_id)
            return
        if oid in self._refcounts:
            self._copies.setdefault(oid, set()).add(self.node_id)
        req = core_worker_pb2.AddObjectLocationRequest(object_id=oid, node_id=self.node_id)
        stub = self.worker_stub(f"{owner[0]}:{owner[1]}")
        rpc.best_effort(stub.AddObjectLocation(req, timeout=10))

    def get_future(self, ref: ObjectRef) -> concurrent.futures.Future:
        """A future for the value (resolved on the loop)."""
        return asyncio.run_coroutine_threadsafe(self.get_async(ref), self.loop)

    def wait(self, refs: list[ObjectRef], num_returns: int, timeout: float | None,
             fetch_local: bool = True) -> tuple[list[ObjectRef], list[ObjectRef]]:
        ready_ids = {r._id for r in refs if r._id in self._objects}
        if len(ready_ids) < num_returns and timeout != 0:
            ready_ids = self._blocking(self._wait_some(refs, ready_ids, num_returns, timeout))
        ready, rest = [], []
        for r in refs:
            (ready if r._id in ready_ids and len(ready) < num_returns else rest).append(r)
        return ready, rest

    async def _wait_some(self, refs: list[ObjectRef], ready: set[bytes], num_returns: int,
                         timeout: float | None) -> set[bytes]:
        """Waits until num_returns of refs are ready. Owned objects share one wake-up future
        (no task per ref); borrowed ones are fetched from their owners."""
        ready = set(ready)
        owned = [r for r in refs if r._id not in ready and
                 (r._owner[2] == self.worker_id or r._id in self._owned)]
        fetches = {asyncio.ensure_future(self.wait_object(r, None)): r for r in refs
                   if r._id not in ready and not (r._owner[2] == self.worker_id or r._id in self._owned)}
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        try:
            while True:
                still = []
                for r in owned:
                    if r._id in self._objects:
                        ready.add(r._id)
                    else:
                        still.append(r)
                owned = still
                if len(ready) >= num_returns or (not owned and not fetches):
                    break
                wake = loop.create_future()
                for r in owned:
                    self._waiters.setdefault(r._id, []).append(wake)
                left = None if deadline is None else max(0.0, deadline - loop.time())
                done, _ = await asyncio.wait([wake, *fetches], timeout=left,
                                             return_when=asyncio.FIRST_COMPLETED)
                for r in owned:
                    lst = self._waiters.get(r._id)
                    if lst is not None and wake in lst:
                        lst.remove(wake)
                for t in done:
                    r = fetches.pop(t, None)
                    if r is not None:
                        if not t.cancelled():
                            t.exception()  # an error result is still "ready"
                        ready.add(r._id)
                if not done:
                    break  # timed out
        finally:
            for t in fetches:
                t.cancel()
        return ready


def _raise_or_return(value: Any, meta: str) -> Any:
    if meta == ERROR_METADATA:
        if isinstance(value, exc.RayTaskError):
            raise value.as_instanceof_cause()
        raise value
    return value


async def _as_coro(obj: Any) -> Any:
    if callable(obj):
        obj = obj()
    return await obj

