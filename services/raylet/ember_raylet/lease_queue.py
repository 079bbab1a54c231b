"""The raylet's lease queue: requests waiting for resources, grant order, the infeasible
timeout and spillback decisions. Pure (no I/O, no futures): events in, decisions out, an
injected clock.

A submitted request is decided by `scheduler.decide`: it spills to another node, waits here
(FIFO, granted when it fits and a worker is free), or waits as *infeasible* (no node can ever
run it) until a node that can joins or `infeasible_timeout_s` passes, then fails with a reason.
A queued request that no longer fits here is spilled again while it has never been redirected.

Spreading: the cluster view (the GCS's node feed, refreshed by heartbeats) lags behind the
spills this raylet just sent, so each spill *holds* its resources on the target node in this
queue's view for `hold_s` (or until a report shows them taken, or comes `settle_s` after the
spill, by when the node's heartbeat must include them): ten requests
decided in one burst go to ten different free nodes instead of all to the first one.
The driver (raylet.py) owns the futures and the workers and executes what this class decides.

Blocked workers: a leased worker that waits in get()/wait() lends its CPUs to other leases; when
it resumes it takes them back before it continues, never beyond what the node has: at once if
they are free, else it waits (`resume`) and `schedule` hands them back first, as leases end or
other workers block. While a worker waits to resume, requests that need CPUs wait behind it (so
new tasks cannot starve it); a running task always ends or blocks, so it gets them in the end.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ember_common.labels import Selector

from .resources import Allocation, NodeResources
from .scheduler import DEFAULT_SPREAD_THRESHOLD, Decision, Pick, RemoteNode, capacity, choose_selector, decide
from .worker_pool import kind_key, needs_gpu

Clock = Callable[[], float]
Shape = tuple[tuple[str, float], ...]  # a request's resources, sorted by name


@dataclass
class LeaseRequest:
    """What the queue needs of a lease request (resources already translated for bundles)."""

    lease_id: bytes
    resources: dict[str, float]
    spillback_count: int = 0
    name: str = ""
    owner_worker_id: str = ""
    actor: bool = False
    deadline_s: float = 0.0  # when an infeasible request fails (clock time)
    gpu_ids: list[int] | None = None  # preset (a bundle's GPUs) instead of allocated ones
    env: str = ""  # runtime env hash: only a worker started in that env may take the grant
    prefer_here: bool = False  # SPREAD / soft affinity chose this node: local whenever it fits
    selector: Selector = ()  # label_selector: only nodes whose labels match may run it
    fallbacks: tuple[Selector, ...] = ()  # fallback_strategy's selectors, in order


@dataclass(frozen=True)
class Grant:
    """Run the request here: the resources are taken; the driver pairs it with an idle worker."""

    request: LeaseRequest
    alloc: Allocation


@dataclass(frozen=True)
class Spill:
    """Redirect the request to another raylet."""

    request: LeaseRequest
    node: RemoteNode


@dataclass(frozen=True)
class Fail:
    """Answer the request as infeasible, with the reason."""

    request: LeaseRequest
    reason: str


@dataclass
class Schedule:
    """One scheduling round's decisions, and how many more workers the waiting requests need."""

    grants: list[Grant] = field(default_factory=list)
    spills: list[Spill] = field(default_factory=list)
    workers_wanted: int = 0
    resumed: list[bytes] = field(default_factory=list)  # leases whose lent CPUs came back
    wanted_by_env: dict[str, int] = field(default_factory=dict)  # the same, per runtime env


class LeaseQueue:
    """Requests waiting on this node, in arrival order; the infeasible ones apart."""

    def __init__(self, node_id: str, resources: NodeResources, infeasible_timeout_s: float,
                 clock: Clock, *, spread_threshold: float = DEFAULT_SPREAD_THRESHOLD,
                 hold_s: float = 2.0, settle_s: float = 0.0, pick: Pick | None = None,
                 labels: dict[str, str] | None = None) -> None:
        self.node_id = node_id
        self.labels = labels or {}  # this node's labels (label selectors match against them)
        self.settle_s = settle_s or hold_s / 2
        self.spread_threshold = spread_threshold
        self.hold_s = hold_s
        self.pick = pick
        # node id -> (when, resources) spilled there and not yet seen in its reports
        self.holds: dict[str, list[tuple[float, dict[str, float]]]] = {}
        self.resources = resources
        self.infeasible_timeout_s = infeasible_timeout_s
        self.clock = clock
        self.cluster: dict[str, RemoteNode] = {}
        self.waiting: list[LeaseRequest] = []
        self.infeasible: list[LeaseRequest] = []
        self.resuming: dict[bytes, dict[str, float]] = {}  # lease id -> lent resources, FIFO

    def __len__(self) -> int:
        return len(self.waiting) + len(self.infeasible)

    def submit(self, req: LeaseRequest) -> Spill | str:
        """Decides a new request: a Spill, or "queued" / "infeasible" (it waits here; a
        reason is logged by the driver through `why_infeasible`)."""
        d = self._decide(req)
        if d.kind == "spill" and d.node is not None:
            return self._spill(req, d.node)
        if d.kind == "infeasible":
            req.deadline_s = self.clock() + self.infeasible_timeout_s
            self.infeasible.append(req)
            return "infeasible"
        self.waiting.append(req)
        return "queued"

    def capacity(self, req: LeaseRequest) -> int:
        """How many leases of the request's shape the alive nodes' totals hold
        (scheduler.capacity), counting only the nodes its label selector matches."""
        return capacity(self.resources, self.cluster, self.node_id, req.resources, self._selector(req),
                        self.labels)

    def _selector(self, req: LeaseRequest) -> Selector:
        """The request's selector in force: the primary, or the first fallback some node can use."""
        if not req.fallbacks:
            return req.selector
        return choose_selector(self.resources, self.cluster, self.node_id, req.resources,
                               [req.selector, *req.fallbacks], self.labels)

    def demand(self) -> tuple[dict[Shape, int], dict[Shape, int]]:
        """The waiting requests counted by resource shape: (queued here, infeasible), for the
        autoscaler's demand (load_report.py)."""
        out: tuple[dict[Shape, int], dict[Shape, int]] = ({}, {})
        for counts, reqs in zip(out, (self.waiting, self.infeasible), strict=True):
            for req in reqs:
                shape = tuple(sorted((k, v) for k, v in req.resources.items() if v > 0))
                counts[shape] = counts.get(shape, 0) + 1
        return out

    def why_infeasible(self, req: LeaseRequest) -> str:
        """The reason no node can run the request now."""
        return self._decide(req).reason

    def resume(self, lease_id: bytes, lent: dict[str, float]) -> bool:
        """A blocked worker wants its lent resources back: True if it got them now (taken),
        else it waits and a later `schedule` lists it in `resumed`."""
        if not any(v > 0 for v in lent.values()):
            return True  # nothing was lent
        if not self.resuming and self.resources.can_reclaim(lent):
            self.resources.reclaim(lent)
            return True
        self.resuming[lease_id] = lent
        return False

    def drop_resume(self, lease_id: bytes) -> bool:
        """The lease ended while its worker waited to resume; True if it was waiting."""
        return self.resuming.pop(lease_id, None) is not None

    def schedule(self, idle_workers: int | dict[str, int]) -> Schedule:
        """Hands lent resources back to resuming workers first (in order); then grants waiting
        requests that fit now, in order, up to the idle workers (a count, or counts per runtime
        env and kind, worker_pool.idle_by_env: a request only takes a worker of its env; those that need CPUs only when no worker
        still waits to resume); spills those that do not fit here but fit elsewhere now (never
        redirected before)."""
        out = Schedule()
        for lease_id, lent in list(self.resuming.items()):
            if not self.resources.can_reclaim(lent):
                break
            self.resources.reclaim(lent)
            del self.resuming[lease_id]
            out.resumed.append(lease_id)
        idle = dict(idle_workers) if isinstance(idle_workers, dict) else {"": idle_workers}
        for req in list(self.waiting):
            if self.resuming and req.resources.get("CPU", 0.0) > 0:
                continue  # behind a worker that waits for its CPUs
            if not self.resources.fits_now(req.resources):
                if req.spillback_count == 0:
                    d = self._decide(req)
                    if d.kind == "spill" and d.node is not None:
                        self.waiting.remove(req)
                        out.spills.append(self._spill(req, d.node))
                continue
            # A worker of its env that ran work of its kind (GPU or CPU-only), else a fresh one.
            key = kind_key(req.env, needs_gpu(req.resources))
            key = key if idle.get(key, 0) > 0 else req.env
            if idle.get(key, 0) <= 0:
                out.workers_wanted += 1
                out.wanted_by_env[req.env] = out.wanted_by_env.get(req.env, 0) + 1
                continue
            alloc = self.resources.allocate(req.resources)
            assert alloc is not None  # fits_now held
            idle[key] -= 1
            self.waiting.remove(req)
            out.grants.append(Grant(req, alloc))
        return out

    def tick(self) -> list[Spill | Fail]:
        """Re-decides the infeasible requests: those that became feasible here wait in the queue,
        those another node can run spill, those past their deadline fail with the reason."""
        out: list[Spill | Fail] = []
        now = self.clock()
        for req in list(self.infeasible):
            d = self._decide(req)
            if d.kind != "infeasible":
                self.infeasible.remove(req)
                if d.kind == "spill" and d.node is not None:
                    out.append(self._spill(req, d.node))
                else:
                    self.waiting.append(req)
            elif now >= req.deadline_s:
                self.infeasible.remove(req)
                out.append(Fail(req, f"{d.reason} Waited {self.infeasible_timeout_s:g}s for a node that "
                                     f"could run {req.name or 'the task'}; none joined."))
        return out

    def recheck(self) -> list[Spill]:
        """Re-decides waiting requests this node can no longer ever run (their placement group
        bundle was removed): they spill, or wait as infeasible."""
        out: list[Spill] = []
        for req in [r for r in self.waiting if not self.resources.fits_total(r.resources)]:
            self.waiting.remove(req)
            d = self.submit(req)
            if isinstance(d, Spill):
                out.append(d)
        return out

    def cancel(self, lease_id: bytes) -> LeaseRequest | None:
        """Removes a waiting request; None if it is not waiting (granted, answered, unknown)."""
        for lst in (self.waiting, self.infeasible):
            for req in lst:
                if req.lease_id == lease_id:
                    lst.remove(req)
                    return req
        return None

    def drop_env(self, env: str) -> list[LeaseRequest]:
        """Removes (and returns) every waiting request of a runtime env that failed to set up."""
        gone = [r for r in self.waiting + self.infeasible if r.env == env]
        for req in gone:
            self.cancel(req.lease_id)
        return gone

    def drop_owner(self, worker_id: str) -> list[LeaseRequest]:
        """Removes (and returns) every waiting request of a process that died."""
        gone = [r for r in self.waiting + self.infeasible if r.owner_worker_id == worker_id]
        for req in gone:
            self.cancel(req.lease_id)
        return gone

    def drain(self) -> list[LeaseRequest]:
        """Removes and returns every waiting request (shutdown)."""
        gone = self.waiting + self.infeasible
        self.waiting, self.infeasible = [], []
        return gone

    def update_node(self, node: RemoteNode) -> None:
        """The cluster view: a node joined, changed or (alive=False) left. A report ends the
        holds it must already reflect: all of them when it shows less available than the last
        one (the spilled work arrived), else those older than `settle_s`."""
        if node.node_id == self.node_id:
            return
        old = self.cluster.get(node.node_id)
        held = self.holds.get(node.node_id)
        if held is not None:
            if old is None or not node.alive or any(
                    abs(node.available.get(k, 0.0) - v) > 1e-9 for k, v in old.available.items()):
                # Less available: the spilled work arrived. More: work there ended since, so the
                # report is newer than what the holds stood for (a hold must not keep a freed
                # node looking busy until it expires).
                del self.holds[node.node_id]
            else:
                now = self.clock()
                held[:] = [(t, r) for t, r in held if now - t < self.settle_s]
        if node.alive:
            self.cluster[node.node_id] = node
        else:
            self.cluster.pop(node.node_id, None)

    # ------------------------------------------------------------------ spreading
    def _spill(self, req: LeaseRequest, node: RemoteNode) -> Spill:
        """A spill decision; its resources are held on the target in this view."""
        if self.hold_s > 0:
            self.holds.setdefault(node.node_id, []).append((self.clock(), dict(req.resources)))
        return Spill(req, self.cluster.get(node.node_id, node))

    def view(self) -> dict[str, RemoteNode]:
        """The cluster view less the resources held by recent spills."""
        if not self.holds:
            return self.cluster
        now = self.clock()
        out = dict(self.cluster)
        for node_id, held in list(self.holds.items()):
            live = [(t, r) for t, r in held if now - t < self.hold_s]
            if not live:
                del self.holds[node_id]
                continue
            self.holds[node_id] = live
            n = self.cluster.get(node_id)
            if n is None:
                continue
            avail = dict(n.available)
            for _, r in live:
                for k, v in r.items():
                    avail[k] = avail.get(k, 0.0) - v
            out[node_id] = RemoteNode(n.node_id, n.raylet_address, n.total, avail, n.alive, n.labels)
        return out

    def _decide(self, req: LeaseRequest) -> Decision:
        return decide(self.resources, self.view(), self.node_id, req.resources,
                      req.spillback_count, self.spread_threshold, self.pick, req.prefer_here,
                      self._selector(req), self.labels)
