"""The raylet's memory monitor: when the node runs low on memory, kill one worker to free it.

As Ray's out-of-memory prevention: every `EMBER_MEMORY_MONITOR_REFRESH_MS` (0: off) the raylet
reads the node's memory (`read_memory`: the limit and usage of the raylet's own cgroup, v2 or
v1, when that limit is below the machine's memory, else /proc/meminfo) and, once usage passes the threshold
(`threshold_bytes`: the larger of `EMBER_MEMORY_USAGE_THRESHOLD` of the total and the total less
`EMBER_MIN_MEMORY_FREE_BYTES`), `MemoryPolicy.decide` picks one leased worker to kill:

- workers are grouped: retriable work (a task with max_retries != 0, an actor with
  max_restarts != 0) by the process that owns the lease, all non-retriable work in one group;
- retriable groups go first; among equals the larger group, then the group granted last;
- in the chosen group, the worker granted last is killed;
- the task may be retried only if its group holds other workers too (Ray's `should_retry`): the
  last task of an owner fails at once, so a task that alone overflows the node is not rerun
  forever;
- one kill at a time: no other worker is chosen while the last one chosen is still alive.

The kill is SIGKILL. The policy remembers why (`failure_cause`, by lease id: the owner asks with
GetWorkerFailureCause when its push fails and raises `OutOfMemoryError`; `death_reason`, by
worker id: the reason the raylet reports to the GCS, which an actor's `ActorDiedError` carries).
`MemoryPolicy` is pure (no clock, no files, no processes); `run` is the timer loop around it.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import os
from dataclasses import dataclass
from typing import Callable, Mapping, Protocol, Sequence

log = logging.getLogger(__name__)

OUT_OF_MEMORY = "OUT_OF_MEMORY"
_MAX_CAUSES = 10_000  # causes kept for owners that have not asked yet (oldest dropped)


@dataclass(frozen=True)
class MemorySnapshot:
    """The node's memory: bytes in use and bytes it may use at most."""

    used_bytes: int
    total_bytes: int

    @property
    def fraction(self) -> float:
        return self.used_bytes / self.total_bytes if self.total_bytes else 0.0


def threshold_bytes(total: int, usage_threshold: float, min_free_bytes: int) -> int:
    """Usage past which a worker is killed (Ray's formula; min_free_bytes -1: the share alone)."""
    share = int(total * usage_threshold)
    return share if min_free_bytes < 0 else max(share, total - min_free_bytes)


@dataclass(frozen=True)
class Running:
    """One leased worker as the policy sees it."""

    worker_id: str
    lease_id: bytes
    owner: str  # the worker id of the process that holds the lease
    retriable: bool
    granted_at: float
    name: str = ""  # the task or actor name the lease was asked for
    actor: bool = False


@dataclass(frozen=True)
class Kill:
    """The decision: kill `target`; `should_retry` False means its task fails at once."""

    target: Running
    should_retry: bool
    message: str


@dataclass(frozen=True)
class FailureCause:
    """What GetWorkerFailureCause answers for a lease whose worker the monitor killed."""

    error_type: str
    error_message: str
    fail_task_immediately: bool


def choose(running: Sequence[Running]) -> tuple[Running, bool] | None:
    """Ray's group-by-owner policy: (the worker to kill, whether its task may be retried)."""
    groups: dict[tuple[bool, str], list[Running]] = collections.defaultdict(list)
    for r in running:
        groups[(r.retriable, r.owner if r.retriable else "")].append(r)
    if not groups:
        return None
    (retriable, _), members = min(groups.items(), key=lambda kv: (
        not kv[0][0], -len(kv[1]), -min(m.granted_at for m in kv[1])))
    victim = max(members, key=lambda m: m.granted_at)
    return victim, retriable and len(members) > 1


class MemoryPolicy:
    """Decides whom to kill from memory snapshots and the node's leased workers (pure)."""

    def __init__(self, *, node_id: str, node_ip: str, usage_threshold: float,
                 min_free_bytes: int) -> None:
        if not 0.0 <= usage_threshold <= 1.0:
            raise ValueError("EMBER_MEMORY_USAGE_THRESHOLD must be a share of memory in [0, 1], "
                             f"got {usage_threshold}")
        self.node_id = node_id
        self.node_ip = node_ip
        self.usage_threshold = usage_threshold
        self.min_free_bytes = min_free_bytes
        self.pending: Running | None = None  # chosen, not yet seen dead
        self._causes: collections.OrderedDict[bytes, FailureCause] = collections.OrderedDict()
        self._reasons: collections.OrderedDict[str, str] = collections.OrderedDict()

    def decide(self, snap: MemorySnapshot, running: Sequence[Running],
               alive: Callable[[str], bool]) -> Kill | None:
        """The worker to kill now, or None (usage under the threshold, nothing leased, or the
        last worker chosen is still dying)."""
        if self.pending is not None:
            if alive(self.pending.worker_id):
                return None
            self.pending = None
        limit = threshold_bytes(snap.total_bytes, self.usage_threshold, self.min_free_bytes)
        if snap.used_bytes <= limit:
            return None
        chosen = choose(running)
        if chosen is None:
            return None
        target, retry = chosen
        msg = self._message(snap, limit, target)
        self.pending = target
        self._remember(self._causes, target.lease_id, FailureCause(OUT_OF_MEMORY, msg, not retry))
        what = "actor" if target.actor else "task"
        self._remember(self._reasons, target.worker_id,
                       f"the {what}'s worker was killed by the memory monitor. {msg}")
        return Kill(target, retry, msg)

    def failure_cause(self, lease_id: bytes) -> FailureCause | None:
        """Why the worker of lease_id was killed (None: not by this monitor)."""
        return self._causes.get(lease_id)

    def death_reason(self, worker_id: str) -> str | None:
        """The exit reason to report for worker_id (None: not killed by this monitor)."""
        return self._reasons.get(worker_id)

    def _message(self, snap: MemorySnapshot, limit: int, target: Running) -> str:
        gb = 1024 ** 3
        what = f"actor {target.name}" if target.actor else f"task {target.name}()"
        return (f"Task was killed due to the node running low on memory. Memory on the node "
                f"(IP: {self.node_ip}, ID: {self.node_id}) where the {what} was running was "
                f"{snap.used_bytes / gb:.2f}GB / {snap.total_bytes / gb:.2f}GB ({snap.fraction:.6f}), "
                f"which exceeds the memory usage threshold of {limit / snap.total_bytes:.6f}. "
                f"Ember killed this worker (ID: {target.worker_id}) because it was the most recently "
                f"scheduled {'retriable ' if target.retriable else ''}work on the node. Provision more "
                "memory or run fewer tasks at once (ask for more CPUs per task); the threshold is "
                "EMBER_MEMORY_USAGE_THRESHOLD, and EMBER_MEMORY_MONITOR_REFRESH_MS=0 turns this off.")

    @staticmethod
    def _remember(table: collections.OrderedDict, key: object, value: object) -> None:  # type: ignore[type-arg]
        table[key] = value
        while len(table) > _MAX_CAUSES:
            table.popitem(last=False)


# -- I/O: reading the node's memory, and the timer loop ------------------------------------


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _stat_field(path: str, name: str) -> int:
    try:
        with open(path) as f:
            for line in f:
                key, _, val = line.partition(" ")
                if key == name:
                    return int(val)
    except (OSError, ValueError):
        pass
    return 0


def _meminfo(path: str) -> MemorySnapshot:
    fields: dict[str, int] = {}
    with open(path) as f:
        for line in f:
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                fields[key] = int(parts[0]) * 1024
    total = fields["MemTotal"]
    free = fields.get("MemAvailable", fields.get("MemFree", 0))
    return MemorySnapshot(total - free, total)


def own_cgroups(proc_cgroup: str = "/proc/self/cgroup") -> tuple[str | None, str | None]:
    """This process's cgroup paths: (cgroup v2's, cgroup v1's memory controller's); None
    where that hierarchy is not in use."""
    v2 = v1 = None
    try:
        with open(proc_cgroup) as f:
            for line in f:
                hid, ctrls, path = line.rstrip("\n").split(":", 2)
                if hid == "0" and not ctrls:
                    v2 = path
                elif "memory" in ctrls.split(","):
                    v1 = path
    except (OSError, ValueError):
        pass
    return v2, v1


def _under(root: str, path: str | None) -> str:
    """root/path when that directory exists (this process's own cgroup), else root (the
    mount's top, which in a container with its own cgroup namespace is the container's)."""
    d = os.path.join(root, path.lstrip("/")) if path else root
    return d if os.path.isdir(d) else root


def read_memory(cgroup_root: str = "/sys/fs/cgroup", meminfo: str = "/proc/meminfo",
                proc_cgroup: str = "/proc/self/cgroup") -> MemorySnapshot:
    """The node's memory: this process's cgroup's (v2, else v1's memory controller) when its
    limit is below the machine's memory, else the machine's; page cache that can be dropped
    (inactive file pages) is not counted as used, as Ray does."""
    system = _meminfo(meminfo)
    v2_path, v1_path = own_cgroups(proc_cgroup)
    v2 = _under(cgroup_root, v2_path)
    if os.path.exists(os.path.join(v2, "memory.max")):
        limit = _read_int(os.path.join(v2, "memory.max")) or 0  # "max": no limit
        usage = _read_int(os.path.join(v2, "memory.current")) or 0
        inactive = _stat_field(os.path.join(v2, "memory.stat"), "inactive_file")
    else:
        v1 = _under(os.path.join(cgroup_root, "memory"), v1_path)
        stat = os.path.join(v1, "memory.stat")
        limit = _read_int(os.path.join(v1, "memory.limit_in_bytes")) or 0
        limit = min(limit, _stat_field(stat, "hierarchical_memory_limit") or limit)
        usage = _read_int(os.path.join(v1, "memory.usage_in_bytes")) or 0
        inactive = _stat_field(stat, "total_inactive_file")
    if 0 < limit < system.total_bytes:
        return MemorySnapshot(max(0, usage - inactive), limit)
    return system


class Lease(Protocol):
    lease_id: bytes
    name: str
    owner: str
    actor: bool
    granted_at: float

    @property
    def worker(self) -> Worker: ...


class Worker(Protocol):
    worker_id: str
    dead: bool

    @property
    def popen(self) -> Killable: ...


class Killable(Protocol):
    def kill(self) -> None: ...


class Node(Protocol):
    """What the loop needs of the raylet: its leases and pending lease requests."""

    @property
    def leases(self) -> Mapping[bytes, Lease]: ...
    @property
    def futures(self) -> Mapping[bytes, object]: ...


class Monitor:
    """The timer loop: reads memory, asks the policy, kills the chosen worker (SIGKILL)."""

    def __init__(self, policy: MemoryPolicy, refresh_ms: int,
                 read: Callable[[], MemorySnapshot] = read_memory) -> None:
        self.policy = policy
        self.refresh_s = refresh_ms / 1000.0
        self.read = read
        self.retriable: dict[bytes, bool] = {}  # lease id -> the request's `retriable`

    def requested(self, lease_id: bytes, retriable: bool) -> None:
        """A lease request arrived (its `retriable` is only on the request)."""
        if self.refresh_s > 0:
            self.retriable[lease_id] = retriable

    def tick(self, node: Node) -> Kill | None:
        """One check: kills a worker when the policy says so."""
        self.retriable = {k: v for k, v in self.retriable.items()
                          if k in node.leases or k in node.futures}
        leases = [ls for ls in node.leases.values() if not ls.worker.dead]
        running = [Running(ls.worker.worker_id, ls.lease_id, ls.owner,
                           self.retriable.get(ls.lease_id, False), ls.granted_at, ls.name, ls.actor)
                   for ls in leases]
        by_id = {ls.worker.worker_id: ls.worker for ls in leases}
        snap = self.read()
        kill = self.policy.decide(snap, running, lambda wid: wid in by_id)
        if kill is not None:
            log.warning("memory monitor: %s", kill.message)
            try:
                by_id[kill.target.worker_id].popen.kill()
            except ProcessLookupError:
                pass
        return kill

    async def run(self, node: Node, stop: asyncio.Event) -> None:
        """Checks every refresh period until stop (returns at once when disabled)."""
        if self.refresh_s <= 0:
            return
        while not stop.is_set():
            try:
                self.tick(node)
            except (OSError, ValueError, KeyError) as e:
                log.warning("memory monitor: cannot read the node's memory: %s", e)
            try:
                await asyncio.wait_for(stop.wait(), self.refresh_s)
            except asyncio.TimeoutError:
                pass


def from_settings(node_id: str, node_ip: str) -> Monitor:
    """The node's monitor, configured by the EMBER_MEMORY_* settings."""
    from ember_common import envvars

    policy = MemoryPolicy(node_id=node_id, node_ip=node_ip,
                          usage_threshold=envvars.value("EMBER_MEMORY_USAGE_THRESHOLD"),
                          min_free_bytes=envvars.value("EMBER_MIN_MEMORY_FREE_BYTES"))
    return Monitor(policy, envvars.value("EMBER_MEMORY_MONITOR_REFRESH_MS"))
