"""CoreWorker: the runtime inside every driver and worker process.

It owns the objects its process creates: their entries and waiters live in the memory store
(memory_store.py), their reference counts in the reference table (reference_table.py, whose
borrower protocol references.py drives). It submits tasks (task_submitter.py over the pure
task_queue.py) and actor calls (actor_submitter.py over actor_queue.py) and serves its objects
to borrowers over gRPC (core_worker_server.py); put/get/wait and the object transfers behind
them are its ObjectAPI half (object_api.py). All gRPC work runs on
one asyncio loop in a background thread; the user-facing calls (get/put/wait/submit) come from
user threads and hop onto the loop only when they must wait.
"""
from __future__ import annotations

import asyncio
import collections
import enum
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, TypeVar

import grpc

from ember import exceptions as exc
from ember_common import backoff, envvars, ids, rpc, tls
from ember_common.config import Config
from ember_common.gcs_client import GcsClient
from ember_common.proto import common_pb2, core_worker_pb2, core_worker_pb2_grpc, objmgr_pb2, objmgr_pb2_grpc
from ember_common.raylet_client import RayletClient

from .execution.blocking import BlockedWaits, OnWait
from .objects.object_api import ObjectAPI
from .objects.object_ref import ObjectRef, OwnerAddress
from .objects.plasma import PlasmaClient
from .objects.serialization import ERROR_METADATA, serialize
from .owner.actor_submitter import ActorSubmitter
from .owner.memory_store import MemoryStore
from .owner.reference_table import ReferenceTable
from .owner.references import References
from .owner.task_submitter import TaskSubmitter
from .telemetry import task_events
from .transport import wire, wire_server
from .transport.core_worker_server import CoreWorkerServicer, GetStatus
from .transport.task_stream import TaskStreams

if TYPE_CHECKING:
    from .execution.executor import TaskExecutor
    from .owner.generator import GeneratorState

log = logging.getLogger(__name__)
T = TypeVar("T")


def node_ip() -> str:
    """The address this node's processes advertise."""
    return str(envvars.value("EMBER_NODE_IP"))


class WorkerMode(enum.StrEnum):
    """What a process is: a driver (user program) or a worker (runs tasks and actors)."""

    DRIVER = "driver"
    WORKER = "worker"


class CoreWorker(ObjectAPI):
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
                                        on_pending=self._refs_pending,
                                        max_lineage_bytes=config.max_lineage_bytes)
        # ObjectRefs count straight into the table (no frame of ours on the hot path).
        self.add_local_ref = self.ref_table.add_local_ref
        self.remove_local_ref = self.ref_table.remove_local_ref
        self.mark_escaped = self.ref_table.mark_escaped
        self.register_owned = self.ref_table.add_owned
        self._nodes: dict[str, common_pb2.NodeInfo] = {}
        self._nodes_at = 0.0
        self.generators: dict[bytes, GeneratorState] = {}  # by task id
        self._shutdown = False
        self.executor: TaskExecutor | None = None  # set by the worker process
        self.loop = asyncio.new_event_loop()
        self.blocked_waits = BlockedWaits(self.loop, lambda blocked: self.raylet.notify_worker_blocked(
            self.worker_id, blocked))
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
        task_events.start(self)  # reporter of task state transitions (off the hot path)

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
        if self.loop.is_closed():  # after shutdown(): fail now, not wait forever
            if asyncio.iscoroutine(coro):
                coro.close()
            raise RuntimeError("Ember's core worker is shut down (ember.shutdown() ran)")
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
        # The direct task transport (wire.py): off with TLS (its sockets are plain TCP).
        direct = bool(self.config.direct_task_transport) and not tls.enabled()
        self.task_streams = TaskStreams(self, wire.DirectConn if direct else None)
        self.direct_server = wire_server.DirectServer(self)
        if direct and self.mode is WorkerMode.WORKER:  # drivers run no tasks: no listener
            await self.direct_server.start(rpc.bind_host(self.ip))  # the address it advertises
        self.submitter = TaskSubmitter(self)
        self.plasma = PlasmaClient(self)
        self.actor_submitter = ActorSubmitter(self)
        self._server, port, health = rpc.build_server(  # task specs with inline args: data plane
            [lambda s: core_worker_pb2_grpc.add_CoreWorkerServicer_to_server(CoreWorkerServicer(self), s)],
            host=rpc.bind_host(self.ip), port=0, control=False)
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
            self.run(self.submitter.shutdown(), timeout=10)
        except Exception as e:  # the loop may already be gone at interpreter exit
            log.debug("core worker shutdown: %s", e)
        task_events.stop()  # the last batch (with the tasks the submitter gave up), on the GCS channel
        try:
            self.run(self._async_shutdown(), timeout=10)
        except Exception as e:
            log.debug("core worker shutdown: %s", e)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():  # else its self-pipe leaks: a ResourceWarning once gRPC drops it
            self._close_loop()

    def _close_loop(self) -> None:
        """Closes the stopped loop; tasks still pending on it (e.g. a batch of plasma releases
        in flight) are cancelled and run to their end first, so none is destroyed pending."""
        loop = self.loop
        try:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for t in pending:
                t.cancel()
            if pending:
                loop.run_until_complete(asyncio.wait(pending, timeout=2))
            loop.run_until_complete(loop.shutdown_asyncgens())
        except Exception as e:  # closing anyway: at worst a warning about a task left pending
            log.debug("core worker loop close: %s", e)
        finally:
            loop.close()

    async def _async_shutdown(self) -> None:
        self.task_streams.close()
        self.direct_server.close()
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
        """The reference table released oid (any thread). An inline entry already stored is
        forgotten here and now (two dict pops: no wake-up of the loop, whose thread would
        otherwise take the GIL once per few puts); anything else is forgotten on the loop,
        after a result still on its way was stored."""
        if self._shutdown:
            return
        entry = self.store.get(oid)
        if entry is not None and not entry.in_plasma:
            self.store.pop(oid)
            self.ref_table.drop_nested(oid)  # drops the refs nested in it
            return
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
        others = [n for n in self._nodes.values() if n.node_id != self.node_id]
        live = [n for n in others if n.state == common_pb2.NodeInfo.ALIVE]
        stubs = [self.objmgr] + [objmgr_pb2_grpc.ObjectManagerStub(self.channel(n.objmgr_address))
                                 for n in live]
        req = objmgr_pb2.FreeRequest(object_ids=oids)
        results = await asyncio.gather(*(stub.Free(req, timeout=5) for stub in stubs),
                                       return_exceptions=True)
        # A dead node (or one that did not answer) may come back with its store: it gets the
        # Free then (object_transfer._note_missed_frees).
        missed = [n.node_id for n in others if n.state != common_pb2.NodeInfo.ALIVE]
        for n, r in zip(live, results[1:], strict=True):
            if isinstance(r, Exception):
                log.debug("free on node %s failed: %s", n.node_id[:8], r)
                missed.append(n.node_id)
        if missed:
            self._note_missed_frees(missed, oids)

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
        freeing = self.take_generator_item_nowait(task_id, index, item, nested)
        if freeing is not None:
            await freeing

    def take_generator_item_nowait(self, task_id: bytes, index: int, item: common_pb2.ReturnObject,
                                   nested: Iterable[core_worker_pb2.NestedRefs]) -> Awaitable[None] | None:
        """take_generator_item at once (the direct transport takes items in the order they
        came, before a reply that follows them); what is left to await (freeing the item of a
        dropped generator from shared memory), or None."""
        st = self.generators.get(task_id)
        if nested:
            self.refs.take_nested(nested)
        if st is not None:
            st.add(index, item)
            return None
        self.ref_table.drop_nested(item.object_id)  # the generator was dropped: nobody will read it
        return self.free_objects([item.object_id]) if item.in_plasma else None

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

    # ---------------------------------------------------------------- cancel
    async def cancel_children(self, parent_id: bytes, force: bool) -> None:
        """Loop thread: a recursive cancel of parent_id (a task or call running in this worker)
        cancels every task and actor call it submitted that has not finished, and theirs in
        turn (as Ray; force does not apply to actor calls)."""
        children = [e.spec for e in self.submitter.tasks.values() if e.parent == parent_id]
        if children:
            await asyncio.gather(*(
                self.actor_submitter.cancel(c.task_id, True) if c.actor_id
                else self.submitter.cancel(c.task_id, force, True) for c in children))

    # ---------------------------------------------------------------- blocking waits
    def _lends(self) -> bool:
        """Whether a wait here lends CPUs: a worker running a task (not a driver)."""
        ex = self.executor
        return self.mode is WorkerMode.WORKER and ex is not None and ex.running is not None

    def _blocking(self, coro: Awaitable[T] | None, fn: Callable[[OnWait | None], T] | None = None) -> T:
        """Runs a wait for objects that are not ready (a coroutine on the loop, or fn here; fn
        gets an `on_wait` to hand the callable that ends its wait early, or None). A worker
        lends its CPUs to other tasks meanwhile and takes them back before it returns
        (blocking.py); a driver just waits. A normal task's wait is ended by its cancel, which
        raises KeyboardInterrupt here (executor.cancel)."""
        if self._lends():
            ex = self.executor
            assert ex is not None
            # Tasks pipelined behind this one go back to their owner (one may be what this
            # waits for: it would never run here), then the CPUs are lent.
            self.post(ex.set_blocked, True)
            try:
                if ex.interruptible_wait():
                    return self._interruptible(ex, coro, fn)
                return self.blocked_waits.run(coro, None if fn is None else lambda: fn(None))
            finally:
                self.post(ex.set_blocked, False)
        if fn is not None:
            return fn(None)
        assert coro is not None
        return self.run(coro)

    def _interruptible(self, ex: TaskExecutor, coro: Awaitable[T] | None,
                       fn: Callable[[OnWait | None], T] | None) -> T:
        """The running task's wait, which its cancel wakes (KeyboardInterrupt here)."""
        if fn is None:
            assert coro is not None
            cf = asyncio.run_coroutine_threadsafe(_as_coro(coro), self.loop)
            try:
                ex.begin_wait(cf.cancel)
            except KeyboardInterrupt:
                cf.cancel()
                raise
            run: Callable[[], T] = cf.result
        else:
            def run() -> T:
                return fn(ex.begin_wait)
        try:
            return self.blocked_waits.run(None, run)
        finally:
            ex.end_wait()


async def _as_coro(obj: Awaitable[T] | Callable[[], Awaitable[T]]) -> T:
    if callable(obj):
        return await obj()
    return await obj

