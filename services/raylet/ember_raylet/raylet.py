"""The Raylet core: the thin driver that executes the lease queue's and worker pool's decisions.

`lease_queue.LeaseQueue` (pure) decides where a lease request goes and in which order requests
are granted; `worker_pool.WorkerPool` (pure) decides which worker processes to start, reuse and
reap. This class owns what they must not: the futures the RPCs wait on, the worker processes
(started here; they register over gRPC and are reused across leases), the granted leases, and
the loops that notice exited processes and drive both policies' clocks.
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import random
import signal
import time
from typing import Callable

from ember_common import ids, tracing
from ember_common import labels as kit_labels
from ember_common.config import Config
from ember_common.proto import common_pb2, raylet_pb2
from ember_common.rpc import Infeasible, InvalidArgument

from . import bundles as bundles_mod
from .bundles import BundleTable
from .forks import ForkServer
from .lease_queue import Fail, LeaseQueue, LeaseRequest, Spill
from .resources import NodeResources, validate_request
from .runtime_env import RuntimeEnvManager, SetupFailed
from .scheduler import RemoteNode
from .worker_pool import WorkerPool, WorkerState, shape_of
from .worker_procs import KILL_GRACE_S, Lease, WorkerProc, err_tail, spawn_worker, stop_all

log = logging.getLogger(__name__)

LeaseReply = raylet_pb2.RequestWorkerLeaseReply
MAX_ENV_START_FAILURES = 3


class Raylet:
    """One node's resources, worker processes and leases."""

    def __init__(self, *, node_id: str, config: Config, resources: dict[str, float], gcs_address: str,
                 objmgr_address: str, store_dir: str, session_dir: str, node_ip: str,
                 num_prestart_workers: int | None = None, runtime_env_dir: str = "",
                 clock: Callable[[], float] = time.monotonic, labels: dict[str, str] | None = None) -> None:
        self.node_id = node_id
        self.labels = dict(labels or {})  # this node's labels, defaults included
        self.cfg = config
        self.clock = clock
        self.resources = NodeResources(resources)
        self.gcs_address = gcs_address
        self.objmgr_address = objmgr_address
        self.store_dir = store_dir
        self.session_dir = session_dir
        self.logs_dir = os.path.join(session_dir, "logs")
        self.node_ip = node_ip
        self.address = ""  # host:port once serving
        self.workers: dict[str, WorkerProc] = {}
        self.leases: dict[bytes, Lease] = {}
        self.futures: dict[bytes, asyncio.Future[LeaseReply]] = {}
        # Blocked workers waiting for their lent CPUs back (lease id -> the unblock RPC's wait).
        self.resumes: dict[bytes, asyncio.Future[None]] = {}
        self.queue = LeaseQueue(node_id, self.resources, config.infeasible_timeout_s, clock,
                                spread_threshold=config.scheduler_spread_threshold,
                                hold_s=2 * config.heartbeat_period_s,
                                settle_s=2 * config.heartbeat_period_s,
                                pick=random.Random().choice, labels=self.labels)
        self.bundles = BundleTable(self.resources)
        cpus = int(self.resources.total.get("CPU", 0))
        # A forked worker costs little CPU to start, so more may start at once.
        starting = max(4, min(2 * cpus, 16)) if config.worker_fork_server else max(2, min(cpus, 8))
        self.pool = WorkerPool(
            num_prestart=cpus if num_prestart_workers is None else num_prestart_workers,
            max_starting=starting, startup_timeout_s=config.worker_startup_timeout_s,
            idle_timeout_s=config.worker_idle_timeout_s, clock=clock)
        self.runtime_envs = RuntimeEnvManager(
            runtime_env_dir or os.path.join(session_dir, "runtime_resources"))
        self.env_json: dict[str, str] = {}  # runtime env hash -> its serialized env
        self.env_start_failures: dict[str, int] = {}  # env hash -> workers dead before registering
        self.forks: ForkServer | None = None  # the worker template, once started
        self.forks_warned = False
        self.closing = False
        # Called with (worker_id, reason) when a worker process exits (the GCS is told).
        self.on_worker_death: Callable[[str, str], None] | None = None
        # The id of each worker about to start (the server's worker ledger hands them out).
        self.new_worker_id: Callable[[], str] = ids.new_worker_id

    @property
    def cluster(self) -> dict[str, RemoteNode]:
        """The other alive nodes, as the GCS publishes them."""
        return self.queue.cluster

    # ------------------------------------------------------------------ workers
    def start_worker(self, env: str = "") -> WorkerProc:
        """Launches one worker process (it registers with RegisterWorker), in runtime env
        `env` (its hash; the env must be set up: runtime_envs.context)."""
        node = {
            "EMBER_RAYLET_ADDRESS": self.address, "EMBER_GCS_ADDRESS": self.gcs_address,
            "EMBER_OBJMGR_ADDRESS": self.objmgr_address, "EMBER_NODE_ID": self.node_id,
            "EMBER_STORE_DIR": self.store_dir, "EMBER_SESSION_DIR": self.session_dir,
            "EMBER_NODE_IP": self.node_ip}
        ctx = self.runtime_envs.context(env) if env else None
        forks = self._fork_server(node) if ctx is None else None
        if forks is not None:
            wid = self.new_worker_id()
            w = WorkerProc(wid, forks.fork(wid))
        elif ctx is None:
            w = spawn_worker(self.new_worker_id(), self.logs_dir, node)
        else:
            w = spawn_worker(self.new_worker_id(), self.logs_dir, node, python=ctx.python, cwd=ctx.cwd,
                             runtime_env_vars=ctx.worker_env(self.env_json[env]))
        self.workers[w.worker_id] = w
        self.pool.add_starting(w.worker_id, env)
        return w

    def _fork_server(self, node: dict[str, str]) -> ForkServer | None:
        """The node's worker template (started on first use), or None when it is disabled
        (EMBER_WORKER_FORK_SERVER=0) or died (then workers start as fresh interpreters)."""
        if not self.cfg.worker_fork_server:
            return None
        if self.forks is None:
            self.forks = ForkServer(node, self.logs_dir)
        if not self.forks.alive:
            if not self.forks_warned:
                log.warning("the worker template (pid %d) is gone; starting workers as fresh "
                            "interpreters; see %s/fork-server.err", self.forks.pid, self.logs_dir)
                self.forks_warned = True
            return None
        return self.forks

    def starting(self) -> int:
        """Worker processes started and not registered yet."""
        return self.pool.count(WorkerState.STARTING)

    def register_worker(self, worker_id: str, pid: int, port: int) -> None:
        """A worker registered (NotFound unless this raylet started it)."""
        self.pool.registered(worker_id, port)
        self.workers[worker_id].port = port
        if self.forks is not None:
            self.forks.registered(worker_id, pid)
        self.env_start_failures.pop(self.pool.workers[worker_id].env, None)
        self.dispatch()

    def owner_died(self, worker_id: str) -> None:
        """A process that held leases here died (anywhere in the cluster): take them back; their
        workers ran tasks whose results nobody can receive, so they are replaced."""
        for req in self.queue.drop_owner(worker_id):
            self._answer(req.lease_id, LeaseReply(cancelled=True))
        for lease in [ls for ls in self.leases.values() if ls.owner == worker_id]:
            log.info("lease %s: its owner %s died; reclaiming worker %s", lease.lease_id.hex()[:8],
                     worker_id, lease.worker.worker_id)
            self.return_worker(lease.lease_id, disconnect=True)

    def on_worker_exit(self, w: WorkerProc) -> None:
        """A worker process is gone: free its lease, tell the GCS, replace it."""
        if w.dead:
            return
        w.dead = True
        self.workers.pop(w.worker_id, None)
        gone = self.pool.exited(w.worker_id)
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
                if gone is not None and gone.env:
                    self._env_worker_failed(gone.env, w)
            self.dispatch()

    def kill_worker(self, w: WorkerProc) -> None:
        """Stops a worker process: SIGTERM now (it exports its last spans and task events, then
        exits; a running task ends there), SIGKILL from reap_workers if it is still there
        KILL_GRACE_S later. Its exit is noticed by reap_workers."""
        if w.kill_at is not None or w.popen.poll() is not None:
            return
        w.kill_at = self.clock() + KILL_GRACE_S
        try:
            w.popen.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass

    def _prestart(self) -> None:
        for _ in range(self.pool.to_start(0)):
            self.start_worker()

    async def reap_workers(self, stop: asyncio.Event) -> None:
        """Notices dead worker processes (crash, kill, os._exit) and runs the pool's timers."""
        while not stop.is_set():
            now = self.clock()
            for w in list(self.workers.values()):
                if w.popen.poll() is not None:
                    self.on_worker_exit(w)
                elif w.kill_at is not None and now >= w.kill_at:
                    try:
                        w.popen.kill()  # told to stop KILL_GRACE_S ago
                    except ProcessLookupError:
                        pass
            for kill in self.pool.tick():
                wp = self.workers.get(kill.worker_id)
                if wp is not None:
                    log.info("stopping worker %s: %s", kill.worker_id, kill.reason)
                    self.kill_worker(wp)
            try:
                await asyncio.wait_for(stop.wait(), 0.1)
            except asyncio.TimeoutError:
                pass

    # ------------------------------------------------------------------ leases
    async def request_lease(self, req: raylet_pb2.RequestWorkerLeaseRequest) -> LeaseReply:
        """Grants, spills back, queues, or (after the infeasible timeout) fails a request."""
        resources = dict(req.resources)
        validate_request(resources)
        gpu_ids = None
        if req.placement_group_id:  # inside a bundle: its named resources, its GPUs
            idx = req.placement_group_bundle_index
            resources = bundles_mod.translate(resources, req.placement_group_id, idx)
            if req.resources.get("GPU", 0) > 0:
                gpu_ids = self.bundles.gpu_ids(req.placement_group_id, idx)
        try:
            selector = kit_labels.parse_selector(dict(req.label_selector)) if req.label_selector else ()
            fallbacks = tuple(kit_labels.parse_selector(dict(f.selector), f"fallback_strategy[{i}]")
                              for i, f in enumerate(req.fallback_label_selectors))
        except kit_labels.InvalidLabelError as e:
            raise InvalidArgument(str(e)) from None
        env = self._want_env(req.serialized_runtime_env)
        lr = LeaseRequest(req.lease_id, resources, req.spillback_count, req.name,
                          req.owner_worker_id, bool(req.actor_id), gpu_ids=gpu_ids, env=env,
                          prefer_here=req.prefer_here, selector=selector, fallbacks=fallbacks)
        fut: asyncio.Future[LeaseReply] = asyncio.get_running_loop().create_future()
        self.futures[req.lease_id] = fut
        decision = self.queue.submit(lr)
        if tracing.enabled():  # on this RPC's server span: the scheduling decision, hop by hop
            kind = "spill" if isinstance(decision, Spill) else decision
            tracing.annotate(**{"ember.lease.name": req.name, "ember.node_id": self.node_id,
                                "ember.lease.spillback_count": req.spillback_count,
                                "ember.lease.decision": "local" if kind == "queued" else kind,
                                "ember.lease.spill_to": decision.node.node_id
                                if isinstance(decision, Spill) else None})
        if isinstance(decision, Spill):
            self._spill(decision)
        elif decision == "infeasible":
            log.warning("lease request for %s (%s) is infeasible for now: %s", req.name, resources,
                        self.queue.why_infeasible(lr))
        else:
            self.dispatch()
        try:
            reply = await fut
        except Infeasible:
            if tracing.enabled():
                tracing.annotate(**{"ember.lease.result": "infeasible"})
            raise
        finally:
            self.futures.pop(req.lease_id, None)
        if tracing.enabled():
            which = reply.WhichOneof("result")
            tracing.annotate(**{"ember.lease.result": which,
                                "ember.worker_id": reply.granted.worker_address.worker_id
                                if which == "granted" else None})
        return reply

    def _answer(self, lease_id: bytes, reply: LeaseReply | BaseException) -> bool:
        fut = self.futures.get(lease_id)
        if fut is None or fut.done():
            return False
        if isinstance(reply, BaseException):
            fut.set_exception(reply)
        else:
            fut.set_result(reply)
        return True

    def _spill(self, s: Spill) -> None:
        self._answer(s.request.lease_id, LeaseReply(spillback=raylet_pb2.Spillback(
            node_id=s.node.node_id, raylet_address=s.node.raylet_address)))

    def dispatch(self) -> None:
        """Executes one scheduling round: grants with idle workers, spills, worker start-ups."""
        if self.closing:
            return
        for req in [r for r in self.queue.waiting if self._gone(r.lease_id)]:
            self.queue.cancel(req.lease_id)
        sched = self.queue.schedule(self.pool.idle_by_env())
        for lease_id in sched.resumed:
            self._resumed(lease_id)
        for s in sched.spills:
            self._spill(s)
        for g in sched.grants:
            pw = self.pool.take_idle(shape_of(g.request.resources), g.request.env)
            assert pw is not None  # schedule() granted at most as many as were idle
            w = self.workers[pw.worker_id]
            if self._gone(g.request.lease_id):  # the caller went away meanwhile
                self.resources.release(g.alloc)
                self.pool.returned(w.worker_id)
                continue
            lease = Lease(g.request.lease_id, w, g.alloc, g.request.name,
                          owner=g.request.owner_worker_id, actor=g.request.actor)
            w.lease = lease
            self.leases[lease.lease_id] = lease
            self._answer(lease.lease_id, LeaseReply(granted=raylet_pb2.Grant(
                worker_address=common_pb2.Address(ip=self.node_ip, port=w.port, worker_id=w.worker_id,
                                                  node_id=self.node_id),
                gpu_ids=g.alloc.gpu_ids if g.request.gpu_ids is None else g.request.gpu_ids, pid=w.pid,
                capacity=self.queue.capacity(g.request))))
        for _ in range(self.pool.to_start(sched.wanted_by_env.get("", 0))):
            self.start_worker()
        for env, n in sched.wanted_by_env.items():  # envs set up; the others start when ready
            if env and self.runtime_envs.context(env) is not None:
                for _ in range(self.pool.to_start(n, env)):
                    self.start_worker(env)

    # ------------------------------------------------------------------ runtime envs
    def _want_env(self, serialized: str) -> str:
        """The hash of a request's runtime env ("" for none); starts its set-up on this node
        unless it is set up (the request waits; `dispatch` starts its workers once ready)."""
        if not serialized:
            return ""
        env = hashlib.sha1(serialized.encode()).hexdigest()[:16]
        self.env_json[env] = serialized
        if self.runtime_envs.context(env) is None:
            asyncio.ensure_future(self._set_up(env, serialized))
        return env

    def _env_worker_failed(self, env: str, w: WorkerProc) -> None:
        """A worker of a runtime env died before registering: after MAX_ENV_START_FAILURES in a
        row, the env's waiting requests fail (a broken env, e.g. bad env_vars, must not make
        the raylet start workers forever)."""
        n = self.env_start_failures[env] = self.env_start_failures.get(env, 0) + 1
        if n < MAX_ENV_START_FAILURES:
            return
        del self.env_start_failures[env]
        msg = (f"RuntimeEnvSetupError: {n} workers started in the runtime env exited before "
               f"registering (last exit code {w.popen.returncode}); the last one's stderr:\n"
               f"{err_tail(self.logs_dir, w.worker_id)}")
        for req in self.queue.drop_env(env):
            self._answer(req.lease_id, Infeasible(msg))

    async def _set_up(self, env: str, serialized: str) -> None:
        try:
            await self.runtime_envs.ensure(env, serialized)
        except SetupFailed as e:
            # Every request waiting for this env fails with the reason (the caller raises
            # RuntimeEnvSetupError); the next request of the env tries again.
            for req in self.queue.drop_env(env):
                self._answer(req.lease_id, Infeasible(f"RuntimeEnvSetupError: {e}"))
            return
        self.dispatch()

    def _gone(self, lease_id: bytes) -> bool:
        fut = self.futures.get(lease_id)
        return fut is None or fut.done()

    def _release(self, lease: Lease) -> None:
        if self.leases.pop(lease.lease_id, None) is None:
            return
        if lease.blocked:  # its lent CPUs come back with the rest of the allocation
            self.queue.drop_resume(lease.lease_id)
            self.resources.reclaim(self._lendable(lease))
            self._wake(lease.lease_id)
        self.resources.release(lease.alloc)
        lease.worker.lease = None

    def return_worker(self, lease_id: bytes, disconnect: bool) -> None:
        """Ends a lease; the worker is reused unless disconnect (then it is killed)."""
        lease = self.leases.get(lease_id)
        if lease is None:
            return  # already returned, or the worker died and was cleaned up
        self._release(lease)
        w = lease.worker
        if disconnect or w.dead:
            self.kill_worker(w)
        else:
            self.pool.returned(w.worker_id)
        self.dispatch()

    def cancel_lease(self, lease_id: bytes) -> bool:
        """Cancels a waiting request; False if it is not waiting."""
        if self.queue.cancel(lease_id) is None:
            return False
        return self._answer(lease_id, LeaseReply(cancelled=True))

    @staticmethod
    def _lendable(lease: Lease) -> dict[str, float]:
        """What a blocked worker lends: its CPUs, or inside a placement group its bundle's CPUs
        (`CPU_group_<i>_<pg>` and `CPU_group_<pg>`, as Ray lends them), so a child scheduled into
        the same bundle can run while its parent waits for it."""
        return {k: v for k, v in lease.alloc.resources.items()
                if v > 0 and (k == "CPU" or k.startswith("CPU_group_"))}

    async def notify_blocked(self, worker_id: str, blocked: bool) -> None:
        """A leased worker blocks in get/wait (its CPUs are lent to other leases) or resumes:
        then this returns once its CPUs are its own again (at once if they are free, else when
        leases end or other workers block), so no more CPUs run tasks than the node has."""
        w = self.workers.get(worker_id)
        lease = w.lease if w is not None else None
        if lease is None or (lease.blocked == blocked and lease.lease_id not in self.resumes):
            return
        if blocked:
            if lease.lease_id in self.resumes:  # blocked again (another thread) while waiting
                self.queue.drop_resume(lease.lease_id)  # to resume: its CPUs stay lent
                self._wake(lease.lease_id)
                return
            lease.blocked = True
            self.resources.lend(self._lendable(lease))
            self.dispatch()
            return
        fut = self.resumes.get(lease.lease_id)
        if fut is None:
            if self.queue.resume(lease.lease_id, self._lendable(lease)):
                lease.blocked = False
                return
            fut = self.resumes[lease.lease_id] = asyncio.get_running_loop().create_future()
            log.debug("worker %s waits for its %s back", worker_id, self._lendable(lease))
        await asyncio.shield(fut)

    def _resumed(self, lease_id: bytes) -> None:
        """The lease queue gave the worker of lease_id its CPUs back: it may continue."""
        lease = self.leases.get(lease_id)
        if lease is not None:
            lease.blocked = False
        self._wake(lease_id)

    def _wake(self, lease_id: bytes) -> None:
        """Answers the unblock call that waits for lease_id, if one does."""
        fut = self.resumes.pop(lease_id, None)
        if fut is not None and not fut.done():
            fut.set_result(None)

    def tick(self) -> None:
        """Executes the queue's timed decisions (infeasible requests: wait, spill or fail)."""
        for d in self.queue.tick():
            if isinstance(d, Spill):
                self._spill(d)
            elif isinstance(d, Fail):
                self._answer(d.request.lease_id, Infeasible(d.reason))
        if self.queue.waiting:
            self.dispatch()

    async def check_infeasible(self, stop: asyncio.Event) -> None:
        """Runs `tick` every 0.2 s until stop."""
        while not stop.is_set():
            self.tick()
            try:
                await asyncio.wait_for(stop.wait(), 0.2)
            except asyncio.TimeoutError:
                pass

    # ------------------------------------------------------------------ placement groups
    def prepare_bundles(self, pg_id: bytes, bundles: list[tuple[int, dict[str, float]]]) -> bool:
        """Phase one: reserves the bundles (all or none); False when they do not fit now."""
        return self.prepare_many([(pg_id, bundles, False)])[0]

    def prepare_many(self, groups: list[tuple[bytes, list[tuple[int, dict[str, float]]], bool]]) -> list[bool]:
        """Phase one for many groups (id, bundles, commit at once), in order: each group's
        bundles all or none. A group with bad bundles (the GCS validated them already) is
        refused alone, with a warning."""
        out, committed = [], False
        for pg_id, bundles, commit in groups:
            try:
                for _, res in bundles:
                    validate_request(res)
                ok = self.bundles.prepare(pg_id, bundles)
            except (ValueError, InvalidArgument) as e:
                log.warning("placement group %s: bundles refused: %s", pg_id.hex()[:8], e)
                ok = False
            if ok and commit:
                self.bundles.commit(pg_id, [i for i, _ in bundles])
                committed = True
            out.append(ok)
        if committed:
            self.dispatch()
        return out

    def commit_bundles(self, pg_id: bytes, indexes: list[int]) -> None:
        """Phase two: the bundles' named resources appear; waiting leases may use them."""
        self.bundles.commit(pg_id, indexes)
        self.dispatch()

    def commit_many(self, groups: list[tuple[bytes, list[int]]]) -> list[str]:
        """Phase two for many groups; per group '' (committed) or why not. One dispatch after."""
        errors = []
        for pg_id, indexes in groups:
            try:
                self.bundles.commit(pg_id, indexes)
                errors.append("")
            except Infeasible as e:
                errors.append(str(e))
        self.dispatch()
        return errors

    def cancel_bundles(self, pg_id: bytes, indexes: list[int]) -> int:
        """Releases bundles; kills the workers leased from them first. Returns how many bundles
        were released (0: nothing was reserved, e.g. a repeated call)."""
        return self.cancel_many([(pg_id, indexes)])

    def cancel_many(self, groups: list[tuple[bytes, list[int]]]) -> int:
        """cancel_bundles for many groups, with one requeue and dispatch after."""
        names: set[str] = set()
        for pg_id, indexes in groups:
            names |= self.bundles.group_resource_names(pg_id, indexes)
        if names:
            for lease in [ls for ls in self.leases.values() if names & set(ls.alloc.resources)]:
                log.info("lease %s: its placement group bundle is removed; killing worker %s",
                         lease.lease_id.hex()[:8], lease.worker.worker_id)
                self.return_worker(lease.lease_id, disconnect=True)
        released = sum(len(self.bundles.cancel(pg_id, indexes)) for pg_id, indexes in groups)
        for s in self.queue.recheck():
            self._spill(s)
        self.dispatch()
        return released

    # ------------------------------------------------------------------ cluster view
    def update_node(self, info: common_pb2.NodeInfo) -> None:
        """A node of the cluster view changed (the GCS's nodes feed)."""
        alive = info.state == common_pb2.NodeInfo.ALIVE
        self.queue.update_node(RemoteNode(info.node_id, info.raylet_address, dict(info.total_resources),
                                          dict(info.available_resources), alive, dict(info.labels)))
        self.dispatch()

    def stats(self) -> raylet_pb2.GetNodeStatsReply:
        """GetNodeStats: resources, queue length, workers."""
        reply = raylet_pb2.GetNodeStatsReply(
            node_id=self.node_id, total_resources=self.resources.total,
            available_resources=self.resources.snapshot_available(), queued_leases=len(self.queue))
        for r in self.bundles.reservations():
            reply.bundles.append(raylet_pb2.BundleStats(
                placement_group_id=r.pg_id, committed=r.committed,
                bundle=common_pb2.Bundle(index=r.index, resources=r.resources, node_id=self.node_id)))
        for w in self.workers.values():
            reply.workers.append(raylet_pb2.WorkerStats(
                worker_id=w.worker_id, pid=w.pid, leased=w.lease is not None,
                task_name=w.lease.name if w.lease else ""))
        return reply

    async def shutdown_workers(self) -> None:
        """Cancels waiting requests and stops every worker (SIGTERM, then SIGKILL after 2 s)."""
        self.closing = True
        for req in self.queue.drain():
            fut = self.futures.get(req.lease_id)
            if fut is not None and not fut.done():
                fut.cancel()
        await stop_all([w.popen for w in self.workers.values()])
        if self.forks is not None:
            self.forks.close()
