"""CoreWorker: the runtime inside every driver and worker process.

It owns the objects its process creates: their entries and waiters live in the memory store
(memory_store.py), their reference counts in the reference table (reference_table.py, whose
borrower protocol references.py drives). It submits tasks (task_submitter.py over the pure
task_queue.py) and actor calls (actor_submitter.py over actor_queue.py) and serves its objects
to borrowers over gRPC (core_worker_server.py). All gRPC work runs on
one asyncio loop in a background thread; the user-facing calls (get/put/wait/submit) come from
user threads and hop onto the loop only when they must wait.
"""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import enum
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, TypeVar, cast

import grpc

from ember import exceptions as exc
from ember_common import backoff, ids, rpc, tracing
from ember_common.config import Config
from ember_common.gcs_client import GcsClient
from ember_common.proto import common_pb2, core_worker_pb2, core_worker_pb2_grpc, objmgr_pb2, objmgr_pb2_grpc
from ember_common.raylet_client import RayletClient

from .actor_submitter import ActorSubmitter
from .core_worker_server import CoreWorkerServicer
from .memory_store import MemoryStore
from .object_ref import ObjectRef, OwnerAddress
from .plasma import PlasmaClient
from .reference_table import ReferenceTable
from .references import References
from .serialization import ERROR_METADATA, SerializedValue, deserialize, deserialize_proto, serialize
from .task_stream import TaskStreams
from .task_submitter import TaskSubmitter

if TYPE_CHECKING:
    from .executor import TaskExecutor
    from .generator import GeneratorState

log = logging.getLogger(__name__)
T = TypeVar("T")


def node_ip() -> str:
    """The address this node's processes advertise."""
    return os.environ.get("EMBER_NODE_IP", "127.0.0.1")


class WorkerMode(enum.StrEnum):
    """What a process is: a driver (user program) or a worker (runs tasks and actors)."""

    DRIVER = "driver"
    WORKER = "worker"


class GetStatus(enum.IntEnum):
    """How an owner answers a borrower's GetObject (core_worker.proto's GetObjectReply.Status)."""

    READY = core_worker_pb2.GetObjectReply.READY
    NOT_FOUND = core_worker_pb2.GetObjectReply.NOT_FOUND
    TIMEOUT = core_worker_pb2.GetObjectReply.TIMEOUT


class CoreWorker:
    """Per-process runtime (mode: WorkerMode)."""

    def __init__(self, mode: str, *, gcs_address: str, raylet_address: str, objmgr_address: str,
                 node_id: str, store_dir: str, job_id: bytes, session_dir: str,
                 config: Config, worker_id: str | None = None, ip: str | None = None) -> None:
        self.mode = WorkerMode(mode)
        self.config = config
        self.gcs_address = gcs_address
        self.raylet_address = raylet_address
        self.objmgr_address = objmgr_address
        self.node_id = node_id
        self.store_dir = store_dir
        self.job_id = job_id
        self.session_dir = session_dir
        self.worker_id = worker_id or ids.new_worker_id()
        self.ip = ip or node_ip()
        # Object entries and waiters (loop thread; single reads from any thread), and reference
        # counts (any thread, under the table's lock).
        self.store = MemoryStore()
        self.ref_table = ReferenceTable(self.worker_id, on_release=self._release_soon,
                                        on_pending=self._refs_pending)
        # ObjectRefs count straight into the table (no frame of ours on the hot path).
        self.add_local_ref = self.ref_table.add_local_ref
        self.remove_local_ref = self.ref_table.remove_local_ref
        self.mark_escaped = self.ref_table.mark_escaped
        self.register_owned = self.ref_table.add_owned
        self._nodes: dict[str, common_pb2.NodeInfo] = {}
        self._nodes_at = 0.0
        self.generators: dict[bytes, GeneratorState] = {}  # by task id
        self._blocked_depth = 0
        self._shutdown = False
        self.executor: TaskExecutor | None = None  # set by the worker process
        self.loop = asyncio.new_event_loop()
        self._inbox: collections.deque[tuple[Callable[..., object], tuple[Any, ...]]] = collections.deque()
        self._wakeup_pending = False
        self.refs = References(self.ref_table, self.worker_id, self.loop, self.post, self.worker_stub,
                               lambda: self.gcs, self)
        self._thread = threading.Thread(target=self._run_loop, name="ember-core", daemon=True)
        self._thread.start()
        self.port: int = self.run(self._async_init())
        self.address = OwnerAddress(self.ip, self.port, self.worker_id, self.node_id)
        self.address_proto = common_pb2.Address(ip=self.ip, port=self.port, worker_id=self.worker_id,
                                                node_id=self.node_id)

    # ---------------------------------------------------------------- loop plumbing
    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @property
    def is_shutdown(self) -> bool:
        """True once shutdown() began."""
        return self._shutdown

    def run(self, coro: Awaitable[T] | Callable[[], Awaitable[T]], timeout: float | None = None) -> T:
        """Runs a coroutine on the loop from a user thread and waits for it. A gRPC call must be
        created on the loop, so pass it as a zero-argument callable (lambda: stub.Method(req))."""
        return asyncio.run_coroutine_threadsafe(_as_coro(coro), self.loop).result(timeout)

    def gcs_call(self, factory: Callable[[], Awaitable[T]]) -> T:
        """Calls the GCS client (`self.gcs`, a GcsClient) from a user thread:
        gcs_call(lambda: core.gcs.method(...)). The client retries idempotent calls while the
        GCS is unreachable (it may be restarting)."""
        return self.run(factory)

    def post(self, fn: Callable[..., object], *args: Any) -> None:
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
        """True on the core loop's thread."""
        return threading.get_ident() == self._thread.ident

    async def _async_init(self) -> int:
        self.gcs = GcsClient(self.gcs_address)
        self.objmgr_channel = rpc.aio_channel(self.objmgr_address)
        self.objmgr = objmgr_pb2_grpc.ObjectManagerStub(self.objmgr_channel)
        self._channels: dict[str, grpc.aio.Channel] = {}
        self.raylet = RayletClient(self.raylet_address, channel_for=self.channel)
        self.task_streams = TaskStreams(self)
        self.submitter = TaskSubmitter(self)
        self.plasma = PlasmaClient(self)
        self.actor_submitter = ActorSubmitter(self)
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

    def worker_stub(self, address: str) -> core_worker_pb2_grpc.CoreWorkerAsyncStub:
        """A stub for another process's CoreWorker service (loop thread only)."""
        return core_worker_pb2_grpc.CoreWorkerStub(self.channel(address))

    def shutdown(self) -> None:
        """Returns leases, stops the server and the loop."""
        if self._shutdown:
            return
        self._shutdown = True
        self.ref_table.closed = True
        try:
            self.run(self._async_shutdown(), timeout=10)
        except Exception as e:  # the loop may already be gone at interpreter exit
            log.debug("core worker shutdown: %s", e)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)

    async def _async_shutdown(self) -> None:
        await self.submitter.shutdown()
        self.task_streams.close()
        await self.refs.close()
        await self.free_objects(self.store.in_plasma(self.ref_table.owned_ids()))
        await self._server.stop(0.5)
        await self.gcs.close()
        for ch in [self.objmgr_channel, *self._channels.values()]:
            await ch.close()

    # ---------------------------------------------------------------- reference counting
    def _refs_pending(self) -> None:
        """The reference table has borrower work (called under its lock: only post)."""
        self.refs.kick()

    def _release_soon(self, oid: bytes, owned: bool) -> None:
        """The reference table released oid (any thread): forget it on the loop."""
        if not self._shutdown:
            self.post(self._release, oid, owned)

    def _release(self, oid: bytes, owned: bool) -> None:
        entry = self.store.pop(oid)
        self.ref_table.drop_nested(oid)  # drops the refs nested in it
        if owned and entry is not None and entry.in_plasma:
            asyncio.ensure_future(self.free_objects([oid]))

    async def free_objects(self, oids: list[bytes]) -> None:
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
                self.ref_table.drop_nested(i.object_id)
            asyncio.ensure_future(self.free_objects(
                [i.object_id for i in st.items.values() if i.in_plasma]))

    def num_local_refs(self) -> int:
        """Objects with a live ObjectRef in this process."""
        return self.ref_table.num_local_refs()

    # ---------------------------------------------------------------- memory store
    def set_object(self, ret: common_pb2.ReturnObject) -> None:
        """Loop thread: records an object's value/location and wakes waiters."""
        oid = ret.object_id
        if not self.ref_table.is_referenced(oid):
            # Every reference was dropped while the task ran: free instead of storing.
            self.ref_table.forget_owned(oid)
            if ret.in_plasma:
                asyncio.ensure_future(self.free_objects([oid]))
            return
        self.store.put(ret)

    def set_error(self, oid: bytes, error: BaseException) -> None:
        """Loop thread: the object's value is this error."""
        sv = serialize(error, ERROR_METADATA)
        self.set_object(common_pb2.ReturnObject(object_id=oid, value=sv.to_proto()))

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

    async def object_for_borrower(self, oid: bytes, timeout_s: float | None
                                  ) -> tuple[GetStatus, common_pb2.ReturnObject | None, set[str]]:
        """Owner side of GetObject: (status, entry, nodes holding copies), waiting up to
        timeout_s (None: forever) for an owned object that is not ready yet."""
        entry = self.store.get(oid)
        if entry is None:
            if not self.ref_table.owns(oid):
                return GetStatus.NOT_FOUND, None, set()
            fut: asyncio.Future[common_pb2.ReturnObject] = self.loop.create_future()
            self.store.add_waiter(oid, fut)
            try:
                entry = await asyncio.wait_for(fut, timeout_s)
            except asyncio.TimeoutError:
                self.store.remove_waiter(oid, fut)
                return GetStatus.TIMEOUT, None, set()
        return GetStatus.READY, entry, self.store.copies(oid)

    def add_object_location(self, oid: bytes, node_id: str) -> None:
        """A reader on node_id made a copy of an owned object (loop thread)."""
        if self.ref_table.owns(oid):
            self.store.add_copies(oid, (node_id,))

    def object_copies(self, oid: bytes) -> set[str]:
        """Other nodes known to hold a copy of oid."""
        return self.store.copies(oid)

    async def take_generator_item(self, task_id: bytes, index: int, item: common_pb2.ReturnObject,
                                  nested: Iterable[core_worker_pb2.NestedRefs]) -> None:
        """Owner side of ReportGeneratorItem: the item goes to its stream, or is freed when
        the ObjectRefGenerator is gone."""
        st = self.generators.get(task_id)
        if nested:
            self.refs.take_nested(nested)
        if st is not None:
            st.add(index, item)
        else:  # the generator was dropped: nobody will read it
            self.ref_table.drop_nested(item.object_id)
            if item.in_plasma:
                await self.free_objects([item.object_id])

    def accept_generator_item(self, item: common_pb2.ReturnObject) -> ObjectRef:
        """A generator item handed to the user: owned here, its entry known."""
        self.ref_table.add_owned(item.object_id)
        ref = ObjectRef(item.object_id, self.address, self)
        self.store.put_quiet(item)
        return ref

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

    async def nodes(self, max_age_s: float = 0.0) -> dict[str, common_pb2.NodeInfo]:
        """The GCS node table by node id, refreshed when older than max_age_s."""
        await self._refresh_nodes(max_age_s)
        return self._nodes

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
        return await self.materialize_async(await self.wait_object(ref, None), ref.owner_address)

    def get(self, refs: list[ObjectRef], timeout: float | None = None) -> list[Any]:
        """get() from a user thread: owned objects wait here, borrowed ones on the loop."""
        sget = self.store.get
        entries: list[common_pb2.ReturnObject | None] = [sget(r.binary()) for r in refs]
        missing = [r for r, e in zip(refs, entries) if e is None]
        if missing:
            owns = self.ref_table.owns
            if all(owns(r.binary()) for r in missing):
                self._blocking(None, lambda: self._wait_owned(missing, timeout))
                entries = [sget(r.binary()) for r in refs]
            else:
                got = self._blocking(self._wait_all(missing, timeout))
                entries = [e if e is not None else got[r.binary()] for r, e in zip(refs, entries)]
        # Every entry is present now: the waits above returned only once each object was.
        present = cast(list[common_pb2.ReturnObject], entries)
        if any(e.in_plasma for e in present):
            return self.run(self._materialize_all(present, refs))
        return [self.materialize(e) for e in present]

    async def _materialize_all(self, entries: list[common_pb2.ReturnObject],
                               refs: list[ObjectRef]) -> list[Any]:
        return [await self.materialize_async(e, r.owner_address) for e, r in zip(entries, refs)]

    async def _wait_all(self, refs: list[ObjectRef],
                        timeout: float | None) -> dict[bytes, common_pb2.ReturnObject]:
        results = await asyncio.gather(*(self.wait_object(r, timeout) for r in refs))
        return {r.binary(): e for r, e in zip(refs, results)}

    def _wait_owned(self, refs: list[ObjectRef], timeout: float | None) -> None:
        """User thread: waits until owned objects are stored, without a trip through the loop."""
        pending = self.store.wait_sync([r.binary() for r in refs], timeout)
        if pending:
            raise exc.GetTimeoutError(f"Get timed out: {len(pending)} object(s) not ready "
                                      f"after {timeout}s (first: {pending[0].hex()})")

    def _blocking(self, coro: Awaitable[T] | None, fn: Callable[[], T] | None = None) -> T:
        """Runs a wait (a coroutine on the loop, or fn here); a worker tells its raylet it is
        blocked meanwhile so that its CPU can go to other tasks."""
        notify = self.mode is WorkerMode.WORKER and self.executor is not None and self.executor.running
        if notify:
            self._notify_blocked(True)
        try:
            if fn is not None:
                return fn()
            assert coro is not None
            return self.run(coro)
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
        if owner.worker_id == self.worker_id:
            if self.ref_table.owns(oid):
                self.store.add_copies(oid, (self.node_id,))
            return
        if self.ref_table.has_local_ref(oid):
            self.store.add_copies(oid, (self.node_id,))
        req = core_worker_pb2.AddObjectLocationRequest(object_id=oid, node_id=self.node_id)
        stub = self.worker_stub(f"{owner.ip}:{owner.port}")
        rpc.best_effort(stub.AddObjectLocation(req, timeout=10))

    def get_future(self, ref: ObjectRef) -> concurrent.futures.Future[Any]:
        """A future for the value (resolved on the loop)."""
        return asyncio.run_coroutine_threadsafe(self.get_async(ref), self.loop)

    def wait(self, refs: list[ObjectRef], num_returns: int, timeout: float | None,
             fetch_local: bool = True) -> tuple[list[ObjectRef], list[ObjectRef]]:
        """wait() from a user thread."""
        has = self.store.contains
        ready_ids = {r.binary() for r in refs if has(r.binary())}
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
    if meta == ERROR_METADATA:
        if isinstance(value, exc.RayTaskError):
            raise value.as_instanceof_cause()
        raise value
    return value


async def _as_coro(obj: Awaitable[T] | Callable[[], Awaitable[T]]) -> T:
    if callable(obj):
        return await obj()
    return await obj

