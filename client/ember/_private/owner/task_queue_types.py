"""The task queue's vocabulary (task_queue.py): the scheduling key, a leased worker, a task
entry, and the instructions the queue hands its driver (task_submitter.py). Plain data: no
I/O, no policy."""
from __future__ import annotations

import collections
from typing import Any, Callable, NamedTuple, Union

from ember_common.proto import common_pb2, core_worker_pb2

from .task_durations import UNKNOWN

# The resource shape as sorted (name, amount) pairs, followed by a scheduling.Placement when the
# task is bound to a placement group, a node or spread (the driver routes its lease requests).
SchedulingKey = tuple[Any, ...]


class Lease:
    """A worker leased from a raylet."""

    __slots__ = ("lease_id", "raylet_address", "worker_address", "gpu_ids", "inflight",
                 "linger_at", "dead", "held", "pending", "running", "requeued", "est_s", "long",
                 "since")

    def __init__(self, lease_id: bytes, raylet_address: str, worker_address: str,
                 gpu_ids: list[int]) -> None:
        self.lease_id = lease_id
        self.raylet_address = raylet_address
        self.worker_address = worker_address
        self.gpu_ids = gpu_ids
        self.inflight = 0
        self.linger_at: float | None = None  # idle since; returned at this clock time
        self.dead = False
        # Gave tasks back (blocked) or asked to (stolen from): no pushes until a task of it ends.
        self.held = False
        # Tasks pushed and not answered, in push order: the worker runs them in that order, so
        # when it dies only the oldest one (`running`, fixed then) can have started.
        self.pending: collections.deque[TaskEntry] = collections.deque()
        self.running: TaskEntry | None = None
        self.requeued = 0  # where the next task this lease gives back goes in the queue
        # What the worker holds, by the duration estimates at push time: the sum over the
        # known-short tasks, the count of the others (unknown or long: nothing goes behind them).
        self.est_s = 0.0
        self.long = 0
        self.since = 0.0  # clock time its oldest pending task (presumably) started running

    def __repr__(self) -> str:
        return f"Lease({self.lease_id.hex()[:8]} {self.worker_address} inflight={self.inflight})"


class TaskEntry:
    """One submitted task or actor call, until it finishes."""

    __slots__ = ("spec", "arg_refs", "retries_left", "key", "cancelled", "lease", "pending_deps",
                 "retry_allowlist", "est", "ev", "span_left", "parent", "oom_retries_left")

    def __init__(self, spec: common_pb2.TaskSpec, arg_refs: list[Any], retries_left: int | None,
                 key: SchedulingKey = (),
                 retry_allowlist: tuple[type[BaseException], ...] | None = None,
                 span_left: bool = False) -> None:
        self.spec = spec
        # With spec.retry_exceptions: the exception classes an application error must be an
        # instance of to be retried (None: any error is retried).
        self.retry_allowlist = retry_allowlist
        self.arg_refs = arg_refs  # keeps top-level argument objects alive until the task ends
        self.retries_left = retries_left
        self.key: SchedulingKey = key  # resource shape (tasks only)
        self.cancelled = False
        self.lease: Lease | None = None
        self.pending_deps = 0
        self.est = UNKNOWN  # its function's duration estimate when it was pushed
        self.ev: list[Any] | None = None  # its open task-event record (task_events.py)
        # Its submit span goes with its first task-event record (tracing.submit_left).
        self.span_left = span_left
        # The id of the task (or actor call) running in this worker that submitted it: a
        # recursive ember.cancel of that task cancels this one too (None: the driver's).
        self.parent: bytes | None = None
        # Retries left after the memory monitor killed its worker (EMBER_TASK_OOM_RETRIES,
        # counted apart from max_retries; -1: no limit); None until its first such death.
        self.oom_retries_left: int | None = None


class DeathCause(NamedTuple):
    """Why a leased worker died, as its raylet tells (task_submitter asks after a failed push):
    `kind` OUT_OF_MEMORY (its memory monitor killed it; `fail_now`: its policy says no retry) or
    NODE_DIED (the raylet is unreachable: the node died)."""

    kind: str
    message: str
    fail_now: bool = False


OUT_OF_MEMORY = "OUT_OF_MEMORY"
NODE_DIED = "NODE_DIED"


class RequestLease(NamedTuple):
    key: SchedulingKey
    lease_id: bytes
    address: str


class CancelLeaseRequest(NamedTuple):
    address: str
    lease_id: bytes


class Push(NamedTuple):
    lease: Lease
    entry: TaskEntry


class GiveBack(NamedTuple):
    lease: Lease


class ReturnLease(NamedTuple):
    lease: Lease
    disconnect: bool


class Complete(NamedTuple):
    entry: TaskEntry
    reply: core_worker_pb2.PushTaskReply


class Fail(NamedTuple):
    entry: TaskEntry
    error: BaseException


class SetTimer(NamedTuple):
    at: float


Instruction = Union[RequestLease, CancelLeaseRequest, Push, GiveBack, ReturnLease, Complete, Fail,
                    SetTimer]

# Whether the application error in a reply is an instance of one of the allowlisted classes.
Classifier = Callable[[core_worker_pb2.PushTaskReply, tuple[type[BaseException], ...]], bool]
