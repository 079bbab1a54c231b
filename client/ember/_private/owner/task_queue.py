"""The task queue: the owner's lease and retry policy for normal tasks, as a pure state machine.

Tasks with the same resource shape (scheduling key) share a queue. Events come in (a task is
ready, a lease was granted / refused / cancelled, a push replied / failed, the clock passed a
linger deadline, shutdown) and each returns the instructions the driver (task_submitter.py)
carries out (defined, with Lease and TaskEntry, in task_queue_types.py):

- `RequestLease(key, lease_id, address)`: ask a raylet for a worker (at most
  `max_pending_lease_requests` in flight per key, never more than the queued tasks, and no
  more than one beyond the leases of the key's shape the cluster holds, once a grant said how
  many: on a full cluster the others would only wait and be cancelled);
- `CancelLeaseRequest(address, lease_id)`: the queue emptied while requests were pending;
- `Push(lease, entry)`: send the task to the leased worker (the least loaded lease first; to
  a busy one only when pipelined, see below);
- `GiveBack(lease)`: ask the worker for the tasks it holds but has not started (work stealing:
  another lease of the key is idle while this one has a backlog);
- `ReturnLease(lease, disconnect)`: give a worker back (idle past the linger time, not needed
  when granted, or broken: disconnect=True);
- `Complete(entry, reply)` / `Fail(entry, error)`: the task is done;
- `SetTimer(at)`: call `expire(now)` at `at` (clock time) for the linger deadlines.

Retries: a worker that dies under a task (a failed push) costs one of its `max_retries`
(-1: forever); an application error is retried only with `retry_exceptions`: `True` retries any
error, a list of exception classes (kept on the owner's TaskEntry as `retry_allowlist`; it never
travels to the worker) only errors of those classes, which the injected `classify(reply,
allowlist)` decides from the reply. A retried task goes back to the head of its queue.

Pipelining only where it cannot hurt: a task goes to a lease that is still busy (up to
`max_tasks_in_flight_per_worker` in flight) only when its function is known to be short
(task_durations.py: per-function estimates from the run times in the replies) and all the lease
holds, this task included, adds up to at most `pipeline_budget_s` by those estimates, and the
lease's running task has not run past that budget (clock time since it started, as far as the
owner knows: overdue, maybe long after all). Unknown functions count as long: the first tasks of
a burst each get a worker of their own, more are leased, and long tasks spread over the cluster
instead of queueing behind the first leases. A function that turns long stops being pipelined.

Pipelining without deadlock: with more than one task in flight per worker, a task that blocks in
`get`/`wait` on a task queued behind it on the same worker would wait forever. The worker
therefore gives back every task it has not started when its running task blocks (and refuses
new ones while it stays blocked); each comes back `returned_unstarted` and is queued again at the
head, with no attempt counted, and the lease is *held* (no more pushes) until one of its tasks
ends normally, so the returned tasks run on other workers (the blocked worker lent its CPUs to
its raylet, which can grant another lease). An idle lease steals the same way from a lease with a
backlog (`GiveBack`). Pure: no
I/O; the clock and the error classifier are injected (the driver gives its loop's clock and a
classifier that reads the error in the reply).
"""
from __future__ import annotations

import collections
import logging
import os
from typing import Callable

from ember import exceptions as exc
from ember_common.proto import common_pb2, core_worker_pb2

from .task_durations import UNKNOWN, TaskDurations
from .task_queue_types import (
    NODE_DIED,
    OUT_OF_MEMORY,
    CancelLeaseRequest,
    Classifier,
    Complete,
    DeathCause,
    Fail,
    GiveBack,
    Instruction,
    Lease,
    Push,
    RequestLease,
    ReturnLease,
    SchedulingKey,
    SetTimer,
    TaskEntry,
)

__all__ = ["CancelLeaseRequest", "Classifier", "Complete", "Fail", "GiveBack", "Instruction",
           "Lease", "Push", "RequestLease", "ReturnLease", "SchedulingKey", "SetTimer",
           "TaskEntry", "TaskQueue"]

log = logging.getLogger(__name__)


def _never(reply: core_worker_pb2.PushTaskReply, allowlist: tuple[type[BaseException], ...]) -> bool:
    return False


class _Key:
    __slots__ = ("tasks", "leases", "requests", "cancelling", "capacity")

    def __init__(self) -> None:
        self.tasks: collections.deque[TaskEntry] = collections.deque()
        self.leases: list[Lease] = []
        self.requests: dict[bytes, str] = {}  # lease_id -> raylet address it is pending at
        self.cancelling: set[bytes] = set()  # requests whose cancel was sent (once each)
        # leases of this shape the cluster's totals hold, as the last grant said (0: unknown)
        self.capacity = 0


class TaskQueue:
    """Per-key queues, leases and lease requests of one owner (see the module docstring)."""

    def __init__(self, home_raylet: str, *, max_pending_lease_requests: int,
                 max_tasks_in_flight_per_worker: int, lease_linger_s: float,
                 clock: Callable[[], float],
                 new_lease_id: Callable[[], bytes] = lambda: os.urandom(16),
                 classify: Classifier = _never, pipeline_budget_s: float = 0.005,
                 durations: TaskDurations | None = None, task_oom_retries: int = -1) -> None:
        if max_tasks_in_flight_per_worker < 1:
            raise ValueError("EMBER_MAX_TASKS_IN_FLIGHT_PER_WORKER must be at least 1 (1: no "
                             f"pipelining), got {max_tasks_in_flight_per_worker}")
        if not pipeline_budget_s >= 0:
            raise ValueError("EMBER_PIPELINE_BUDGET_S must be a number of seconds >= 0 (0: no "
                             f"pipelining), got {pipeline_budget_s}")
        self.home = home_raylet
        self._classify = classify
        self.max_requests = max_pending_lease_requests
        # A budget of 0 turns pipelining off, as one task in flight per worker does.
        self.max_inflight = max_tasks_in_flight_per_worker if pipeline_budget_s > 0 else 1
        self.budget_s = pipeline_budget_s
        self.durations = TaskDurations() if durations is None else durations
        self.linger_s = lease_linger_s
        self.oom_retries = task_oom_retries
        self._clock = clock
        self._new_id = new_lease_id
        self._keys: dict[SchedulingKey, _Key] = {}
        self._timer_at: float | None = None
        self.closing = False

    # ------------------------------------------------------------------ queries
    def queued(self, key: SchedulingKey) -> int:
        """Tasks waiting for a worker under key."""
        q = self._keys.get(key)
        return len(q.tasks) if q is not None else 0

    def leases(self, key: SchedulingKey) -> list[Lease]:
        """The workers leased for key."""
        q = self._keys.get(key)
        return list(q.leases) if q is not None else []

    def pending_requests(self, key: SchedulingKey) -> dict[bytes, str]:
        """Lease requests in flight for key (lease id -> raylet address)."""
        q = self._keys.get(key)
        return dict(q.requests) if q is not None else {}

    # ------------------------------------------------------------------ events
    def enqueue(self, entry: TaskEntry) -> list[Instruction]:
        """A task whose arguments are resolved is ready to run."""
        q = self._keys.get(entry.key)
        if q is None:
            q = self._keys[entry.key] = _Key()
        q.tasks.append(entry)
        out: list[Instruction] = []
        self._pump(entry.key, q, out)
        return out

    def request_started(self, key: SchedulingKey, lease_id: bytes) -> common_pb2.TaskSpec | None:
        """The driver is about to send a lease request: the spec whose shape it asks for, or
        None (the request is dropped) when no task is left to run."""
        q = self._keys[key]
        if q.tasks:
            return q.tasks[0].spec
        for lease in q.leases:  # a backlog pipelined on a worker: a new one would steal it
            if lease.inflight > 1 and not lease.held and not lease.dead:
                return lease.pending[-1].spec
        q.requests.pop(lease_id, None)
        q.cancelling.discard(lease_id)  # never sent: its cancel (if any) finds nothing
        return None

    def request_moved(self, key: SchedulingKey, lease_id: bytes, address: str) -> None:
        """The request followed a spillback to another raylet."""
        q = self._keys[key]
        if lease_id in q.requests:
            q.requests[lease_id] = address

    def lease_granted(self, key: SchedulingKey, lease_id: bytes, raylet_address: str,
                      worker_address: str, gpu_ids: list[int], capacity: int = 0) -> list[Instruction]:
        """A raylet leased a worker for key; capacity: how many leases of its shape the
        cluster's total resources hold, as that raylet sees them (0: no bound known)."""
        q = self._keys[key]
        q.capacity = capacity
        q.requests.pop(lease_id, None)
        q.cancelling.discard(lease_id)
        lease = Lease(lease_id, raylet_address, worker_address, gpu_ids)
        q.leases.append(lease)
        out: list[Instruction] = []
        if not q.tasks and not self._steal(q, out):
            self._return(q, lease, False, out)
        elif not q.tasks:
            self._maybe_linger(q, lease, out)  # kept for the tasks it is stealing
        else:
            self._pump(key, q, out)
        return out

    def lease_cancelled(self, key: SchedulingKey, lease_id: bytes) -> list[Instruction]:
        """A lease request ended without a worker (it was cancelled)."""
        q = self._keys[key]
        q.requests.pop(lease_id, None)
        q.cancelling.discard(lease_id)
        out: list[Instruction] = []
        self._pump(key, q, out)
        return out

    def lease_failed(self, key: SchedulingKey, lease_id: bytes,
                     error: BaseException | None) -> list[Instruction]:
        """A lease request failed: every queued task of key fails with error (None: the
        owner is shutting down, nothing fails)."""
        q = self._keys[key]
        q.requests.pop(lease_id, None)
        q.cancelling.discard(lease_id)
        out: list[Instruction] = []
        if error is not None:
            while q.tasks:
                out.append(Fail(q.tasks.popleft(), error))
        return out

    def push_replied(self, entry: TaskEntry, reply: core_worker_pb2.PushTaskReply) -> list[Instruction]:
        """The worker answered a pushed task."""
        lease = entry.lease
        assert lease is not None
        lease.inflight -= 1
        entry.lease = None
        pending = lease.pending
        if pending[0] is entry:
            pending.popleft()
        else:
            pending.remove(entry)
        if self.max_inflight > 1:
            self._unpend(lease, entry)
            if reply.start_time_ns:
                self.durations.observe_reply(entry.spec.function.function_id,
                                             reply.start_time_ns, reply.end_time_ns)
            if lease.inflight:
                lease.since = self._clock()  # the next task it holds starts now
        q = self._keys[entry.key]
        out: list[Instruction] = []
        if reply.returned_unstarted:
            lease.held = lease.inflight > 0  # blocked (or stolen from) while a task of it runs
        else:
            lease.held = False
            lease.requeued = 0
        if entry.cancelled:
            out.append(Fail(entry, exc.TaskCancelledError(entry.spec.task_id.hex())))
        elif reply.returned_unstarted:
            self._requeue(q, lease, entry)  # not run: no attempt counted
        elif reply.is_application_error and self._retries_error(entry, reply):
            self._retry(q, entry)
        else:
            out.append(Complete(entry, reply))
        self._maybe_linger(q, lease, out)
        self._pump(entry.key, q, out)
        return out

    def push_failed(self, entry: TaskEntry, code: str, details: str,
                    cause: DeathCause | None = None) -> list[Instruction]:
        """The push broke (the worker died): the lease goes back as broken and the task is
        retried while its retries last. Tasks pipelined behind the one that ran there never
        started: they are queued again without costing an attempt. `cause`, from the raylet:
        a worker the memory monitor killed is retried on its own budget (`_oom_retry`), else
        fails with OutOfMemoryError; a task whose node died fails, once its retries are used,
        with NodeDiedError instead of WorkerCrashedError."""
        lease = entry.lease
        assert lease is not None
        lease.inflight -= 1
        entry.lease = None
        q = self._keys[entry.key]
        out: list[Instruction] = []
        if not lease.dead:
            lease.dead = True
            lease.running = lease.pending[0] if lease.pending else None
            self._return(q, lease, True, out)
        if entry in lease.pending:
            lease.pending.remove(entry)
            self._unpend(lease, entry)
        if entry.cancelled:
            out.append(Fail(entry, exc.TaskCancelledError(entry.spec.task_id.hex())))
        elif entry is not lease.running and not self.closing:
            self._requeue(q, lease, entry)  # queued behind the task that ran: never started
        elif cause is not None and cause.kind == OUT_OF_MEMORY:
            if not self._oom_retry(q, entry, cause):
                out.append(Fail(entry, exc.OutOfMemoryError(cause.message)))
        elif entry.retries_left != 0 and not self.closing:
            log.info("task %s: worker %s died (%s); retrying (attempt %d)", entry.spec.name,
                     lease.worker_address, code, entry.spec.attempt + 2)
            self._retry(q, entry)
        elif cause is not None and cause.kind == NODE_DIED:
            out.append(Fail(entry, exc.NodeDiedError(
                f"{cause.message}; retries exhausted after {entry.spec.attempt + 1} attempt(s).")))
        else:
            out.append(Fail(entry, exc.WorkerCrashedError(
                f"The worker running {entry.spec.name}() died unexpectedly ({code}: {details}); "
                f"retries exhausted after {entry.spec.attempt + 1} attempt(s).")))
        self._pump(entry.key, q, out)
        return out

    def _oom_retry(self, q: _Key, entry: TaskEntry, cause: DeathCause) -> bool:
        """Ray's task_oom_retries: a task with max_retries != 0 has its own budget of retries
        after memory-monitor kills (max_retries untouched); the monitor's policy may say to
        fail now (the last task of its owner on the node). True when it is queued again."""
        if entry.oom_retries_left is None:
            entry.oom_retries_left = self.oom_retries if entry.spec.max_retries != 0 else 0
        if cause.fail_now or entry.oom_retries_left == 0 or self.closing:
            return False
        if entry.oom_retries_left > 0:
            entry.oom_retries_left -= 1
        log.info("task %s: the memory monitor killed its worker; retrying (attempt %d)",
                 entry.spec.name, entry.spec.attempt + 2)
        entry.spec.attempt += 1
        q.tasks.appendleft(entry)
        return True

    def remove(self, entry: TaskEntry) -> bool:
        """Takes a task that has not been pushed out of its queue (cancel); True if it was
        there."""
        q = self._keys.get(entry.key)
        if q is not None and entry in q.tasks:
            q.tasks.remove(entry)
            return True
        return False

    def expire(self, now: float) -> list[Instruction]:
        """The timer fired: leases idle past their linger time go back."""
        self._timer_at = None
        out: list[Instruction] = []
        nxt: float | None = None
        for q in self._keys.values():
            for lease in list(q.leases):
                at = lease.linger_at
                if at is None:
                    continue
                if at <= now and any(v.held and v.inflight > 1 for v in q.leases):
                    # A give-back is on its way (this lease asked for it): wait for it.
                    at = lease.linger_at = now + self.linger_s
                if at <= now:
                    lease.linger_at = None
                    if not lease.inflight and not q.tasks:
                        self._return(q, lease, False, out)
                elif nxt is None or at < nxt:
                    nxt = at
        if nxt is not None:
            self._timer_at = nxt
            out.append(SetTimer(nxt))
        return out

    def shutdown(self) -> list[Instruction]:
        """The owner is closing: every lease goes back, every request is cancelled."""
        self.closing = True
        out: list[Instruction] = []
        for q in self._keys.values():
            for lease in list(q.leases):
                self._return(q, lease, False, out)
            for lease_id, addr in q.requests.items():
                out.append(CancelLeaseRequest(addr, lease_id))
        return out

    # ------------------------------------------------------------------ policy
    def _pump(self, key: SchedulingKey, q: _Key, out: list[Instruction]) -> None:
        tasks = q.tasks
        if tasks:
            limit = self.max_inflight
            leases = q.leases
            budget = self.budget_s
            now = -1.0
            while tasks:
                entry = tasks[0]
                est = UNKNOWN if limit == 1 else self.durations.estimate(
                    entry.spec.function.function_id)
                # The least loaded lease that can take it: an idle one, or a busy one when the
                # task is pipelined (see _pipelines).
                best: Lease | None = None
                for lease in leases:
                    n = lease.inflight
                    if n >= limit or lease.dead or lease.held or (
                            best is not None and n >= best.inflight):
                        continue
                    if n:
                        if now < 0:
                            now = self._clock()
                        if not _pipelines(lease, est, budget, now):
                            continue
                    best = lease
                if best is None:
                    break
                lease = best
                lease.linger_at = None
                tasks.popleft()
                if limit > 1:
                    if not lease.inflight:
                        lease.since = now if now >= 0 else self._clock()
                    entry.est = est
                    if est <= budget:
                        lease.est_s += est
                    else:
                        lease.long += 1
                lease.inflight += 1
                lease.pending.append(entry)
                entry.lease = lease
                spec = entry.spec
                if spec.gpu_ids or lease.gpu_ids:
                    del spec.gpu_ids[:]
                    spec.gpu_ids.extend(lease.gpu_ids)
                out.append(Push(lease, entry))
        # Workers are asked for while tasks wait: queued here, or pipelined behind a running
        # task (a new worker steals those). Requests being cancelled do not count.
        backlog = len(tasks)
        if self.max_inflight > 1:
            for lease in q.leases:
                if lease.inflight > 1 and not lease.held:
                    backlog += lease.inflight - 1
        wanted = min(backlog, self.max_requests)
        if q.capacity:
            # The cluster's totals hold q.capacity leases of this shape: requests beyond one
            # more than that could only wait at a raylet and be cancelled when the backlog
            # drains (a lease request and its cancel per extra request and burst). One stays
            # pending while tasks wait, whatever the count: it is granted when a lease of any
            # owner ends or a blocked worker lends its CPUs, and its grant brings a fresh
            # capacity (nodes that joined).
            wanted = min(wanted, max(1, q.capacity + 1 - len(q.leases)))
        want = wanted - len(q.requests) + len(q.cancelling)
        for _ in range(want):
            lease_id = self._new_id()
            q.requests[lease_id] = self.home
            out.append(RequestLease(key, lease_id, self.home))
        if not backlog and len(q.requests) > len(q.cancelling):
            for lease_id, addr in q.requests.items():
                if lease_id not in q.cancelling:  # each request is cancelled once
                    q.cancelling.add(lease_id)
                    out.append(CancelLeaseRequest(addr, lease_id))

    def _unpend(self, lease: Lease, entry: TaskEntry) -> None:
        """entry left what lease holds: its share of the estimates goes with it."""
        if not lease.inflight:
            lease.est_s = 0.0
            lease.long = 0
        elif entry.est <= self.budget_s:
            lease.est_s -= entry.est
        else:
            lease.long -= 1

    def _steal(self, q: _Key, out: list[Instruction]) -> bool:
        """No task is queued and a lease could take more: ask every lease holding tasks it
        has not started (more than one in flight) to give them back. True if one was asked."""
        asked = False
        for lease in q.leases:
            if lease.inflight > 1 and not lease.held and not lease.dead:
                lease.held = True
                out.append(GiveBack(lease))
                asked = True
        return asked

    def _requeue(self, q: _Key, lease: Lease, entry: TaskEntry) -> None:
        """A task the worker never started goes back near the head of its queue, after the
        ones this lease gave back before it (they come back in push order)."""
        at = min(lease.requeued, len(q.tasks))
        q.tasks.insert(at, entry)
        lease.requeued = at + 1

    def _retries_error(self, entry: TaskEntry, reply: core_worker_pb2.PushTaskReply) -> bool:
        """Whether an application error is retried: retries left, retry_exceptions set, and the
        error of an allowlisted class when there is an allowlist. A spec the worker refused as
        malformed never is: the same spec would be refused again."""
        if entry.retries_left == 0 or not entry.spec.retry_exceptions or reply.refused:
            return False
        allow = entry.retry_allowlist
        return allow is None or (bool(allow) and self._classify(reply, allow))

    def _retry(self, q: _Key, entry: TaskEntry) -> None:
        assert entry.retries_left is not None
        entry.retries_left -= 1
        entry.spec.attempt += 1
        q.tasks.appendleft(entry)

    def _return(self, q: _Key, lease: Lease, disconnect: bool, out: list[Instruction]) -> None:
        if lease in q.leases:
            q.leases.remove(lease)
        lease.linger_at = None
        out.append(ReturnLease(lease, disconnect))

    def _maybe_linger(self, q: _Key, lease: Lease, out: list[Instruction]) -> None:
        if lease.inflight or q.tasks or lease.dead:
            return
        if self.max_inflight > 1 and not self.closing:
            self._steal(q, out)  # idle while another lease of the key has a backlog
        if self.closing or self.linger_s <= 0:
            self._return(q, lease, False, out)
        elif lease.linger_at is None:
            at = lease.linger_at = self._clock() + self.linger_s
            if self._timer_at is None or at < self._timer_at:
                self._timer_at = at
                out.append(SetTimer(at))


def _pipelines(lease: Lease, est: float, budget_s: float, now: float) -> bool:
    """Whether a task whose function is estimated to run est seconds goes to this busy lease,
    behind what it holds: only when everything there, this task included, is known short and
    adds up to at most budget_s (so the cap on tasks in flight scales with how short they are),
    and its running task is not overdue (running past the budget: maybe long after all)."""
    return (not lease.long and lease.est_s + est <= budget_s
            and now - lease.since <= budget_s)
