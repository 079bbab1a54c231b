"""The Raylet core: one node's resources, worker pool and lease queue.

Flow of a lease request: validate -> `scheduler.decide` -> spill back to another raylet, or
queue here until resources and an idle worker are both free, then grant (worker address + GPU
ids). Requests no node can ever satisfy wait up to `infeasible_timeout_s` (a node may join)
and are then answered "infeasible" with a reason. Workers are Python processes started by this
class; they register over gRPC, are reused across leases, and are replaced when they die.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from ember_common import ids, tracing
from ember_common.config import Config
from ember_common.rpc import Infeasible, NotFound
from ember_common.proto import common_pb2, raylet_pb2

from .resources import Allocation, NodeResources, validate_request
from .scheduler import RemoteNode, decide

log = logging.getLogger(__name__)


@dataclass
class WorkerProc:
    worker_id: str
    popen: subprocess.Popen
    port: int = 0
    lease: Lease | None = None
    dead: bool = False
    started_at: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.popen.pid


@dataclass
class Lease:
    lease_id: bytes
    worker: WorkerProc
    alloc: Allocation
    name: str
    blocked: bool = False
    owner: str = ""  # worker id of the process using the lease
    actor: bool = False  # a dedicated actor worker (not counted as a running task)


@dataclass
class PendingRequest:
    request: raylet_pb2.RequestWorkerLeaseRequest
    future: asyncio.Future
    resources: dict[str, float]
    deadline: float = 0.0


class Raylet:
    def __init__(self, *, node_id: str, config: Config, resources: dict[str, float], gcs_address: str,
                 objmgr_address: str, store_dir: str, session_dir: str, node_ip: str,
                 num_prestart_workers: int | None = None) -> None:
        self.node_id = node_id
        self.cfg = config
        self.resources = NodeResources(resources)
        self.gcs_address = gcs_address
        self.objmgr_address = objmgr_address
        self.store_dir = store_dir
        self.session_dir = session_dir
        self.logs_dir = os.path.join(session_dir, "logs")
        self.node_ip = node_ip
        self.address = ""  # host:port once serving
        self.cluster: dict[str, RemoteNode] = {}
        self.workers: dict[str, WorkerProc] = {}
        self.idle: collections.deque[WorkerProc] = collections.deque()
        self.leases: dict[bytes, Lease] = {}
        self.queue: list[PendingRequest] = []
        self.infeasible: list[PendingRequest] = []
        cpus = int(self.resources.total.get("CPU", 0))
        self.num_prestart = cpus if num_prestart_workers is None else num_prestart_workers
        self.max_starting = max(2, min(cpus, 8))
        self.closing = False
        # Called with (worker_id, reason) when a worker process exits (the GCS is told).
        self.on_worker_death: Any = None

    # ------------------------------------------------------------------ workers
    def start_worker(self) -> WorkerProc:
        worker_id = ids.new_worker_id()
        env = dict(os.environ)
        env.update({
            "EMBER_RAYLET_ADDRESS": self.address, "EMBER_WORKER_ID": worker_id,
            "EMBER_GCS_ADDRESS": self.gcs_address, "EMBER_OBJMGR_ADDRESS": self.objmgr_address,
            "EMBER_NODE_ID": self.node_id, "EMBER_STORE_DIR": self.store_dir,
            "EMBER_SESSION_DIR": self.session_dir, "EMBER_NODE_IP": self.node_ip,
            "PYTHONUNBUFFERED": "1",
        })
        os.makedirs(self.logs_dir, exist_ok=True)
        out = open(os.path.join(self.logs_dir, f"worker-{worker_id}.out"), "ab")
        err = open(os.path.join(self.logs_dir, f"worker-{worker_id}.err"), "ab")
        popen = subprocess.Popen([sys.executable, "-m", "ember._private.worker_main"], env=env,
                                 stdout=out, stderr=err, stdin=subprocess.DEVNULL, close_fds=True)
        out.close()
        err.close()
        w = WorkerProc(worker_id, popen)
        self.workers[worker_id] = w
        return w

    def starting(self) -> int:
        return sum(1 for w in self.workers.values() if not w.port and not w.dead)

    def register_worker(self, worker_id: str, pid: int, port: int) -> None:
        w = self.workers.get(worker_id)
        if w is None or w.dead:
            raise NotFound(f"worker {worker_id} was not started by this raylet")
        w.port = port
        self.idle.append(w)
        self.dispatch()

    def owner_died(self, worker_id: str) -> None:
        """A process that held leases here died (anywhere in the cluster): take them back; their
        workers ran tasks whose results nobody can receive, so they are replaced."""
        for p in list(self.queue) + list(self.infeasible):
            if p.request.owner_worker_id == worker_id and not p.future.done():
                p.future.set_result(raylet_pb2.RequestWorkerLeaseReply(cancelled=True))
        for lease in [l for l in self.leases.values() if l.owner == worker_id]:
            log.info("lease %s: its owner %s died; reclaiming worker %s", lease.lease_id.hex()[:8],
                     worker_id, lease.worker.worker_id)
            self.return_worker(lease.lease_id, disconnect=True)

    def on_worker_exit(self, w: WorkerProc) -> None:
        if w.dead:
            return
        w.dead = True
        self.workers.pop(w.worker_id, None)
        if w in self.idle:
            self.idle.remove(w)
        if w.lease is not None:
            self._release(w.lease)
        if not self.closing:
            code = w.popen.returncode
            if self.on_worker_death is not None:
                self.on_worker_death(w.worker_id, f"exit code {code}")
            self.owner_died(w.worker_id)
            if w.port == 0:
                log.error("worker %s exited with code %s before registering; see %s/worker-%s.err",
                          w.worker_id, code, self.logs_dir, w.worker_id)
            self.dispatch()
            self._prestart()

    def kill_worker(self, w: WorkerProc) -> None:
        if w.popen.poll() is None:
            try:
                w.popen.kill()
            except ProcessLookupError:
                pass

    def _prestart(self) -> None:
        alive = sum(1 for w in self.workers.values() if not w.dead)
        for _ in range(max(0, self.num_prestart - alive)):
            self.start_worker()

    async def reap_workers(self, stop: asyncio.Event) -> None:
        """Notices dead worker processes (crash, kill, os._exit)."""
        while not stop.is_set():
            for w in list(self.workers.values()):
                if w.popen.poll() is not None:
                    self.on_worker_exit(w)
            try:
                await asyncio.wait_for(stop.wait(), 0.1)
            except asyncio.TimeoutError:
                pass

    # ------------------------------------------------------------------ leases
    async def request_lease(self, req: raylet_pb2.RequestWorkerLeaseRequest) -> raylet_pb2.RequestWorkerLeaseReply:
        resources = dict(req.resources)
        validate_request(resources)
        d = decide(self.resources, self.cluster, self.node_id, resources, req.spillback_count)
        if tracing.enabled():  # on this RPC's server span: the scheduling decision, hop by hop
            tracing.annotate(**{"ember.lease.name": req.name, "ember.node_id": self.node_id,
                                "ember.lease.spillback_count": req.spillback_count,
                                "ember.lease.decision": d.kind,
                                "ember.lease.spill_to": d.node.node_id if d.node else None})
        if d.kind == "spill":
            assert d.node is not None
            return raylet_pb2.RequestWorkerLeaseReply(spillback=raylet_pb2.Spillback(
                node_id=d.node.node_id, raylet_address=d.node.raylet_address))
        fut = asyncio.get_running_loop().create_future()
        p = PendingRequest(req, fut, resources)
        if d.kind == "infeasible":
            p.deadline = time.monotonic() + self.cfg.infeasible_timeout_s
            log.warning("lease request for %s (%s) is infeasible for now: %s", req.name, resources, d.reason)
            self.infeasible.append(p)
        else:
            self.queue.append(p)
            self.dispatch()
        if not tracing.enabled():
            return await fut
        try:
            reply = await fut
        except Infeasible:
            tracing.annotate(**{"ember.lease.result": "infeasible"})
            raise
        which = reply.WhichOneof("result")
        tracing.annotate(**{"ember.lease.result": which,
                            "ember.worker_id": reply.granted.worker_address.worker_id
                            if which == "granted" else None})
        return reply

    def dispatch(self) -> None:
        """Grants queued requests that fit now and have a worker; starts workers as needed."""
        if self.closing:
            return
        need_workers = 0
        for p in list(self.queue):
            if p.future.done():
                self.queue.remove(p)
                continue
            if not self.resources.fits_now(p.resources):
                if p.request.spillback_count == 0:
                    d = decide(self.resources, self.cluster, self.node_id, p.resources, 0)
                    if d.kind == "spill" and d.node is not None:
                        self.queue.remove(p)
                        p.future.set_result(raylet_pb2.RequestWorkerLeaseReply(spillback=raylet_pb2.Spillback(
                            node_id=d.node.node_id, raylet_address=d.node.raylet_address)))
                continue
            w = self._pop_idle()
            if w is None:
                need_workers += 1
                continue
            alloc = self.resources.allocate(p.resources)
            assert alloc is not None
            lease = Lease(p.request.lease_id, w, alloc, p.request.name, owner=p.request.owner_worker_id,
                          actor=bool(p.request.actor_id))
            w.lease = lease
            self.leases[lease.lease_id] = lease
            self.queue.remove(p)
            p.future.set_result(raylet_pb2.RequestWorkerLeaseReply(granted=raylet_pb2.Grant(
                worker_address=common_pb2.Address(ip=self.node_ip, port=w.port, worker_id=w.worker_id,
                                                  node_id=self.node_id),
                gpu_ids=alloc.gpu_ids, pid=w.pid)))
        to_start = min(need_workers, self.max_starting) - self.starting()
        for _ in range(max(0, to_start)):
            self.start_worker()

    def _pop_idle(self) -> WorkerProc | None:
        while self.idle:
            w = self.idle.popleft()
            if not w.dead and w.popen.poll() is None:
                return w
        return None

    def _release(self, lease: Lease) -> None:
        if self.leases.pop(lease.lease_id, None) is None:
            return
        if lease.blocked:
            self.resources.reclaim(self._lendable(lease))
        self.resources.release(lease.alloc)
        lease.worker.lease = None

    def return_worker(self, lease_id: bytes, disconnect: bool) -> None:
        lease = self.leases.get(lease_id)
        if lease is None:
            return  # already returned, or the worker died and was cleaned up
        self._release(lease)
        w = lease.worker
        if disconnect or w.dead:
            self.kill_worker(w)
        else:
            self.idle.append(w)
        self.dispatch()

    def cancel_lease(self, lease_id: bytes) -> bool:
        for lst in (self.queue, self.infeasible):
            for p in lst:
                if p.request.lease_id == lease_id and not p.future.done():
                    lst.remove(p)
                    p.future.set_result(raylet_pb2.RequestWorkerLeaseReply(cancelled=True))
                    return True
        return False

    @staticmethod
    def _lendable(lease: Lease) -> dict[str, float]:
        cpu = lease.alloc.resources.get("CPU", 0.0)
        return {"CPU": cpu} if cpu else {}

    def notify_blocked(self, worker_id: str, blocked: bool) -> None:
        w = self.workers.get(worker_id)
        lease = w.lease if w is not None else None
        if lease is None or lease.blocked == blocked:
            return
        lease.blocked = blocked
        if blocked:
            self.resources.lend(self._lendable(lease))
            self.dispatch()
        else:
            self.resources.reclaim(self._lendable(lease))

    async def check_infeasible(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            now = time.monotonic()
            for p in list(self.infeasible):
                if p.future.done():
                    self.infeasible.remove(p)
                    continue
                d = decide(self.resources, self.cluster, self.node_id, p.resources, p.request.spillback_count)
                if d.kind != "infeasible":
                    self.infeasible.remove(p)
                    if d.kind == "spill" and d.node is not None:
                        p.future.set_result(raylet_pb2.RequestWorkerLeaseReply(spillback=raylet_pb2.Spillback(
                            node_id=d.node.node_id, raylet_address=d.node.raylet_address)))
                    else:
                        self.queue.append(p)
                        self.dispatch()
                elif now >= p.deadline:
                    self.infeasible.remove(p)
                    p.future.set_exception(Infeasible(
                        f"{d.reason} Waited {self.cfg.infeasible_timeout_s:g}s for a node that could "
                        f"run {p.request.name or 'the task'}; none joined."))
            try:
                await asyncio.wait_for(stop.wait(), 0.2)
            except asyncio.TimeoutError:
                pass

    # ------------------------------------------------------------------ cluster view
    def update_node(self, info: common_pb2.NodeInfo) -> None:
        if info.node_id == self.node_id:
            return
        alive = info.state == common_pb2.NodeInfo.ALIVE
        self.cluster[info.node_id] = RemoteNode(info.node_id, info.raylet_address,
                                                dict(info.total_resources),
                                                dict(info.available_resources), alive)
        if not alive:
            del self.cluster[info.node_id]
        self.dispatch()

    def stats(self) -> raylet_pb2.GetNodeStatsReply:
        reply = raylet_pb2.GetNodeStatsReply(
            node_id=self.node_id, total_resources=self.resources.total,
            available_resources=self.resources.snapshot_available(),
            queued_leases=len(self.queue) + len(self.infeasible))
        for w in self.workers.values():
            reply.workers.append(raylet_pb2.WorkerStats(
                worker_id=w.worker_id, pid=w.pid, leased=w.lease is not None,
                task_name=w.lease.name if w.lease else ""))
        return reply

    async def shutdown_workers(self) -> None:
        self.closing = True
        for p in self.queue + self.infeasible:
            if not p.future.done():
                p.future.cancel()
        procs = [w.popen for w in self.workers.values()]
        for pp in procs:
            if pp.poll() is None:
                try:
                    pp.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and any(pp.poll() is None for pp in procs):
            await asyncio.sleep(0.05)
        for pp in procs:
            if pp.poll() is None:
                pp.kill()
                pp.wait()
