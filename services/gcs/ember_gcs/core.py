"""GcsCore: the GCS's state and rules, independent of gRPC.

Node table (registration, heartbeats, death after `node_death_timeout_s` of silence), job table,
the actor table (`actors.ActorManager`), the internal KV (`kv.InternalKV`) and a
publish/subscribe feed of node changes, worker deaths and worker logs. Every table lives in
a Storage backend; a GCS restarted on the same etcd reloads it and gives surviving nodes a fresh
heartbeat grace period.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import struct
import time
from typing import AsyncIterator, Callable

from ember_common import labels, resources
from ember_common.proto import common_pb2, gcs_pb2
from ember_common.rpc import NotFound
from ember_common.worker_ledger_kv import KV_NAMESPACE as LEDGER_NAMESPACE
from ember_common.worker_ledger_kv import ledger_key, parse_ledger

from .actors import ActorManager
from .kv import InternalKV
from .placement_groups import PlacementGroups
from .storage import Storage

log = logging.getLogger(__name__)

NODES = "nodes"
RECENT_DEATHS = 4096  # worker deaths kept for replay to new subscribers
RECENT_DEATHS_S = 600.0
DEAD_LEDGERS_KEPT = 1024  # dead nodes whose ledger ids are remembered (the oldest go first)
JOBS = "jobs"


class Subscriber:
    def __init__(self, channels: set[str], job_id: bytes) -> None:
        self.channels = channels
        self.job_id = job_id
        self.queue: asyncio.Queue[gcs_pb2.PubMessage | None] = asyncio.Queue(maxsize=10000)


class GcsCore:
    def __init__(self, storage: Storage, node_death_timeout_s: float, cluster_id: str = "") -> None:
        self.storage = storage
        self.death_timeout_s = node_death_timeout_s
        self.cluster_id = cluster_id
        self.nodes: dict[str, common_pb2.NodeInfo] = {}
        self._last_seen: dict[str, float] = {}
        # Per node, the number of the heartbeat whose resource maps it holds (deltas build on it).
        self._resource_seq: dict[str, int] = {}
        self._subs: list[Subscriber] = []
        # Recent worker deaths, replayed to each new "workers" subscriber: one that was
        # reconnecting (this GCS restarted, or its stream broke) when a death was published would
        # otherwise never hear of it (an object manager would keep the dead worker's pins).
        self._recent_deaths: collections.deque[tuple[float, gcs_pb2.PubMessage]] = \
            collections.deque(maxlen=RECENT_DEATHS)
        self.actors = ActorManager(storage, self.nodes)
        self.kv = InternalKV(storage)
        self.pgs = PlacementGroups(storage, self.nodes)
        # The worker ledgers of dead nodes (see _retire_ledger): node id -> worker ids.
        self._dead_ledgers: collections.OrderedDict[str, list[str]] = collections.OrderedDict()
        # Open "driver" streams per job: a job whose driver is gone for DRIVER_GRACE_S ends.
        self._drivers: dict[bytes, int] = {}
        self.driver_grace_s = 3.0
        # Jobs' end times (0.0: running) as PublishLogs last read them (see _takes_logs).
        self._job_ends: dict[bytes, float] = {}
        # Called with (job id, end time in ns, why) when a job ends (the task-event store).
        self.on_job_end: list[Callable[[bytes, int, str], None]] = []

    # After a restart, raylets need a while to notice and reconnect (their own backoff, a loaded
    # machine, a restarted container). Declaring them dead meanwhile would kill every actor they
    # host, detached ones included, so reloaded nodes get at least this long for a first heartbeat.
    RESTART_GRACE_S = 30.0
    # A job's worker output still in flight when it ends reaches its driver for this long.
    LOG_GRACE_S = 30.0

    async def load(self) -> None:
        """Reads the node table back (after a restart) and gives every alive node a grace period
        of max(node_death_timeout_s, RESTART_GRACE_S) to send its first heartbeat."""
        # _last_seen in the future: detect_deaths measures silence from this point on.
        now = time.monotonic() + max(0.0, self.RESTART_GRACE_S - self.death_timeout_s)
        for blob in (await self.storage.get_all(NODES)).values():
            info = common_pb2.NodeInfo.FromString(blob)
            self.nodes[info.node_id] = info
            if info.state == common_pb2.NodeInfo.ALIVE:
                self._last_seen[info.node_id] = now
        log.info("loaded %d nodes from storage", len(self.nodes))
        await self.actors.load()
        await self.pgs.load()
        for job in await self.all_jobs():
            if not job.is_dead:  # its driver must reconnect after our restart
                asyncio.get_running_loop().call_later(10 * self.driver_grace_s, self._check_driver_soon, job.job_id)

    # ------------------------------------------------------------------ nodes
    async def register_node(self, info: common_pb2.NodeInfo) -> None:
        """Records a node as ALIVE (again) and publishes it. ValueError for a missing id or bad
        resources."""
        if not info.node_id:
            raise ValueError("node_id is required")
        resources.validate(dict(info.total_resources), source=f"node {info.node_id} resources")
        labels.validate_node_labels(dict(info.labels), f"node {info.node_id} labels", system=True)
        prev = self.nodes.get(info.node_id)
        # The same node id from a raylet that started after the recorded one (in containers the
        # id comes from the node's address, which a restarted raylet keeps): the previous
        # raylet's workers died with it, so its actors and bundles go as on a node death.
        newer = prev is not None and prev.start_time > 0 and info.start_time > prev.start_time
        restarted = newer and prev is not None and prev.state == common_pb2.NodeInfo.ALIVE
        # The node died and a new raylet came: the dead one's workers died with it.
        died_with_it = self._dead_ledgers.pop(info.node_id, [])
        info.state = common_pb2.NodeInfo.ALIVE
        info.death_reason = ""
        await self.storage.put(NODES, info.node_id.encode(), info.SerializeToString())
        self.nodes[info.node_id] = info
        self._last_seen[info.node_id] = time.monotonic()
        self._resource_seq.pop(info.node_id, None)  # its maps are the registration's now
        log.info("node %s registered (raylet %s, resources %s)", info.node_id[:8],
                 info.raylet_address, dict(info.total_resources))
        self._publish_node(info)
        if newer:
            for wid in died_with_it:
                self.publish_worker_death(wid, info.node_id, "its raylet stopped (the worker died with it)")
        if restarted:
            log.warning("node %s: a new raylet replaced the one that registered it; the old "
                        "raylet's actors restart or die", info.node_id[:8])
            await self.actors.on_node_dead(info.node_id)
            await self.pgs.on_node_dead(info.node_id)
        self.pgs.wake()

    def heartbeat(self, node_id: str, available: dict[str, float], total: dict[str, float],
                  with_resources: bool = True) -> None:
        """A node is alive with these resources (published when they changed; with_resources=False:
        alive, resources untouched). NotFound when the node is not known as ALIVE: it must
        register again."""
        info = self.nodes.get(node_id)
        if info is None or info.state != common_pb2.NodeInfo.ALIVE:
            raise NotFound(f"node {node_id} is not registered as alive with this GCS")
        self._last_seen[node_id] = time.monotonic()
        if not with_resources:
            return
        changed = dict(info.available_resources) != available or (
            total and dict(info.total_resources) != total)
        if changed:
            info.available_resources.clear()
            info.available_resources.update(available)
            if total:
                info.total_resources.clear()
                info.total_resources.update(total)
            self._publish_node(info)

    def heartbeat_report(self, r: gcs_pb2.ReportHeartbeatRequest) -> bool:
        """A raylet's heartbeat (resources.HeartbeatReport): the whole maps, or a delta on the
        heartbeat `base_seq`. Returns True when it was a delta on maps this GCS does not hold
        (the node is still alive; the raylet sends them whole next). NotFound as `heartbeat`.
        A delta is published as it came (`NodeResourcesDelta`), not as the whole record: a node
        holding many bundles has two named resources per bundle."""
        if not r.delta:
            self.heartbeat(r.node_id, dict(r.available_resources), dict(r.total_resources))
            self._resource_seq[r.node_id] = r.seq
            return False
        self.heartbeat(r.node_id, {}, {}, with_resources=False)  # alive; NotFound when not
        if self._resource_seq.get(r.node_id) != r.base_seq:
            return True
        self._resource_seq[r.node_id] = r.seq
        if r.available_resources or r.total_resources or r.removed_resources:
            info = self.nodes[r.node_id]
            info.available_resources.update(r.available_resources)
            info.total_resources.update(r.total_resources)
            for k in r.removed_resources:
                info.available_resources.pop(k, None)
                info.total_resources.pop(k, None)
            self._deliver(gcs_pb2.PubMessage(node_resources=gcs_pb2.NodeResourcesDelta(
                node_id=r.node_id, available_resources=r.available_resources,
                total_resources=r.total_resources, removed_resources=r.removed_resources)), "nodes", None)
        return False

    async def mark_dead(self, node_id: str, reason: str) -> None:
        """Marks a node DEAD (idempotent); its actors restart or die. NotFound if unknown."""
        info = self.nodes.get(node_id)
        if info is None:
            raise NotFound(f"node {node_id} is unknown")
        if info.state == common_pb2.NodeInfo.DEAD:
            return
        info.state = common_pb2.NodeInfo.DEAD
        info.death_reason = reason
        info.available_resources.clear()
        self._last_seen.pop(node_id, None)
        self._resource_seq.pop(node_id, None)
        await self.storage.put(NODES, node_id.encode(), info.SerializeToString())
        log.warning("node %s marked DEAD: %s", node_id[:8], reason)
        self._publish_node(info)
        await self._retire_ledger(node_id)
        await self.actors.on_node_dead(node_id)
        await self.pgs.on_node_dead(node_id)

    async def _retire_ledger(self, node_id: str) -> None:
        """Deletes a dead node's worker ledger from the KV (else it stays there for good) and
        remembers its ids here: a raylet that starts for the node later finds no ledger, and
        register_node reports the ids dead for it. A raylet that was only silent and registers
        again (its start time unchanged) has live workers: the ids are dropped, and it writes
        its ledger again. Remembered in memory only (a GCS restart forgets them)."""
        key = ledger_key(node_id)
        try:
            try:
                ids = parse_ledger(await self.kv.get(LEDGER_NAMESPACE, key))
            except NotFound:
                return  # none written (or deleted at an earlier death)
            if not self._is_dead(node_id):
                return  # registered again meanwhile: the ledger is its new raylet's
            await self.kv.delete(LEDGER_NAMESPACE, key)
        except Exception as e:  # storage down: the ledger stays until the node's next death
            log.warning("cannot delete the worker ledger of dead node %s: %s", node_id[:8], e)
            return
        if ids and self._is_dead(node_id):
            self._dead_ledgers[node_id] = ids
            self._dead_ledgers.move_to_end(node_id)
            while len(self._dead_ledgers) > DEAD_LEDGERS_KEPT:
                self._dead_ledgers.popitem(last=False)

    def _is_dead(self, node_id: str) -> bool:
        info = self.nodes.get(node_id)
        return info is not None and info.state == common_pb2.NodeInfo.DEAD

    async def detect_deaths(self, stop: asyncio.Event) -> None:
        period = min(0.5, self.death_timeout_s / 4)
        while not stop.is_set():
            now = time.monotonic()
            for node_id, seen in list(self._last_seen.items()):
                if now - seen > self.death_timeout_s:
                    try:
                        await self.mark_dead(node_id, f"no heartbeat for {self.death_timeout_s:g}s")
                    except Exception as e:  # storage down: retry next round
                        log.warning("cannot mark node %s dead yet: %s", node_id[:8], e)
            try:
                await asyncio.wait_for(stop.wait(), period)
            except asyncio.TimeoutError:
                pass

    # ------------------------------------------------------------------ jobs
    async def add_job(self, job: common_pb2.JobInfo) -> bytes:
        """Allocates the next job id and records the job."""
        n = await self.storage.increment("job")
        job.job_id = struct.pack(">I", n)
        job.start_time = job.start_time or time.time()
        await self.storage.put(JOBS, job.job_id, job.SerializeToString())
        self._job_ends[job.job_id] = job.end_time if job.is_dead else 0.0
        return job.job_id

    async def mark_job_finished(self, job_id: bytes, end_state: str = "SUCCEEDED", end_message: str = "") -> None:
        """Ends a job (end_state SUCCEEDED, FAILED or STOPPED; a job's first end is kept): its
        non-detached actors die, its driver's objects are freed, its open tasks fail."""
        blob = await self.storage.get(JOBS, job_id)
        if blob is None:
            raise NotFound(f"job {job_id.hex()} is unknown")
        job = common_pb2.JobInfo.FromString(blob)
        if not job.is_dead:
            job.is_dead = True
            job.end_time = time.time()
            job.end_state, job.end_message = end_state or "SUCCEEDED", end_message
            await self.storage.put(JOBS, job_id, job.SerializeToString())
        self._job_ends[job_id] = job.end_time
        why = f"Job {job_id.hex()} ended ({job.end_state}{': ' + job.end_message if job.end_message else ''})"
        for hook in self.on_job_end:
            hook(job_id, int(job.end_time * 1e9), why)
        await self.actors.on_job_finished(job_id)
        await self.pgs.on_job_finished(job_id)
        if job.driver_worker_id:  # object managers free what the driver owned
            self.publish_worker_death(job.driver_worker_id, "", "driver exited")

    async def all_jobs(self) -> list[common_pb2.JobInfo]:
        """Every job, in id order."""
        return [common_pb2.JobInfo.FromString(b) for _, b in sorted((await self.storage.get_all(JOBS)).items())]

    # ------------------------------------------------------------------ pub/sub
    def _publish_node(self, info: common_pb2.NodeInfo) -> None:
        msg = gcs_pb2.PubMessage(node=info)
        self._deliver(msg, "nodes", None)

    def publish_worker_death(self, worker_id: str, node_id: str, reason: str) -> None:
        msg = gcs_pb2.PubMessage(worker_death=gcs_pb2.WorkerDeath(
            worker_id=worker_id, node_id=node_id, reason=reason))
        self._recent_deaths.append((time.monotonic(), msg))
        self._deliver(msg, "workers", None)

    def recent_deaths(self) -> list[gcs_pb2.PubMessage]:
        """The worker deaths of the last RECENT_DEATHS_S seconds (at most RECENT_DEATHS)."""
        horizon = time.monotonic() - RECENT_DEATHS_S
        while self._recent_deaths and self._recent_deaths[0][0] < horizon:
            self._recent_deaths.popleft()
        return [m for _, m in self._recent_deaths]

    async def publish_logs(self, batches: list[gcs_pb2.LogBatch]) -> int:
        """Delivers worker output to its job's subscribers. A batch naming a job this GCS never
        recorded, or one that ended more than LOG_GRACE_S ago, is dropped (its driver is gone;
        lines still in flight when a job ends are delivered); returns how many were dropped.
        A batch with no job goes to the subscribers that follow every job."""
        dropped = 0
        known: dict[bytes, bool] = {}
        for batch in batches:
            if batch.job_id:
                ok = known.get(batch.job_id)
                if ok is None:
                    ok = known[batch.job_id] = await self._takes_logs(batch.job_id)
                if not ok:
                    dropped += 1
                    continue
            self._deliver(gcs_pb2.PubMessage(logs=batch), "logs", batch.job_id)
        return dropped

    async def _takes_logs(self, job_id: bytes) -> bool:
        """Whether the job exists and is running or ended less than LOG_GRACE_S ago (its end
        time is remembered once read: the job table lives in storage)."""
        end = self._job_ends.get(job_id)
        if end is None:
            blob = await self.storage.get(JOBS, job_id)
            if blob is None:
                return False
            job = common_pb2.JobInfo.FromString(blob)
            end = self._job_ends[job_id] = job.end_time if job.is_dead else 0.0
        return end == 0.0 or time.time() - end < self.LOG_GRACE_S

    def _deliver(self, msg: gcs_pb2.PubMessage, channel: str, job_id: bytes | None) -> None:
        for sub in list(self._subs):
            if channel not in sub.channels:
                continue
            if job_id is not None and sub.job_id and sub.job_id != job_id:
                continue
            try:
                sub.queue.put_nowait(msg)
            except asyncio.QueueFull:  # a stuck subscriber is dropped; it reconnects and resyncs
                self._subs.remove(sub)
                sub.queue = asyncio.Queue(maxsize=1)
                sub.queue.put_nowait(None)

    async def _check_driver(self, job_id: bytes) -> None:
        if self._drivers.get(job_id, 0) > 0:
            return
        try:
            blob = await self.storage.get(JOBS, job_id)
            job = common_pb2.JobInfo.FromString(blob) if blob is not None else None
            if job is not None and not job.is_dead:
                log.info("job %s: its driver disconnected; finishing the job", job_id.hex())
                await self.mark_job_finished(
                    job_id, "FAILED", f"the driver (pid {job.driver_pid} on {job.driver_ip or '?'}) "
                                      "exited without ember.shutdown()")
        except Exception as e:  # storage down: the job stays open until its next check
            log.warning("cannot check the driver of job %s: %s", job_id.hex(), e)

    def _check_driver_soon(self, job_id: bytes) -> None:
        asyncio.ensure_future(self._check_driver(job_id))

    def _driver_gone(self, job_id: bytes) -> None:
        n = self._drivers.get(job_id, 1) - 1
        if n > 0:
            self._drivers[job_id] = n
            return
        self._drivers.pop(job_id, None)
        asyncio.get_running_loop().call_later(
            self.driver_grace_s, lambda: asyncio.ensure_future(self._check_driver(job_id)))

    async def subscribe(self, channels: set[str], job_id: bytes) -> AsyncIterator[gcs_pb2.PubMessage]:
        sub = Subscriber(channels, job_id)
        self._subs.append(sub)
        is_driver = "driver" in channels and bool(job_id)
        if is_driver:
            self._drivers[job_id] = self._drivers.get(job_id, 0) + 1
        try:
            if "nodes" in channels:
                for info in list(self.nodes.values()):
                    yield gcs_pb2.PubMessage(node=info)
            if "workers" in channels:  # (a death also published meanwhile comes twice: harmless)
                for death in self.recent_deaths():
                    yield death
            while True:
                msg = await sub.queue.get()
                if msg is None:
                    return
                yield msg
        finally:
            if sub in self._subs:
                self._subs.remove(sub)
            if is_driver:
                self._driver_gone(job_id)

    def close_subscriptions(self) -> None:
        for sub in self._subs:
            try:
                sub.queue.put_nowait(None)
            except asyncio.QueueFull:
                pass
