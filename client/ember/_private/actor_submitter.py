"""Caller side of actor method calls: straight to the actor's worker, in submission order.

Each actor a process calls gets an ActorQueue. Calls get consecutive sequence numbers; they are
pushed as soon as the actor's address is known (many in flight), and the worker runs them in
sequence order. If the push fails (the worker died), the queue asks the GCS for the next
incarnation (long poll): calls with retries left (max_task_retries) are resent to the restarted
actor; the others fail with RayActorError. When the actor is DEAD every pending and later call
fails with ActorDiedError naming the cause. Runs on the CoreWorker's loop thread.
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import grpc

from ember import exceptions as exc
from ember_common import backoff, rpc
from ember_common.proto import common_pb2

if TYPE_CHECKING:
    from .core_worker import CoreWorker
    from .task_submitter import TaskEntry

log = logging.getLogger(__name__)
A = common_pb2.ActorInfo
# Calls to one actor in flight at once from one caller (all on one task stream).
MAX_INFLIGHT = 1000
# Waiting for an actor's next incarnation while the GCS is unreachable: until it answers.
GCS_WAIT = backoff.FOREVER.replace(initial_s=0.05, max_s=1.0)


class ActorQueue:
    def __init__(self, sub: ActorSubmitter, actor_id: bytes, max_task_retries: int) -> None:
        self.sub = sub
        self.actor_id = actor_id
        self.max_task_retries = max_task_retries
        self.next_seq = 0
        self.address: str | None = None
        self.incarnation = 0
        self.dead_cause: str | None = None
        self.waiting: dict[int, TaskEntry] = {}   # ready to send (arguments resolved), by seq
        self.inflight: dict[int, TaskEntry] = {}  # sent, no reply yet
        self.send_ptr = 0  # calls go out strictly in seq order
        self._resolving = False
        # Every seq below `low` is finished (replied or failed); `done` holds finished ones above.
        self.low = 0
        self.done: set[int] = set()

    def finish(self, seq: int) -> None:
        self.done.add(seq)
        while self.low in self.done:
            self.done.discard(self.low)
            self.low += 1

    def flush(self) -> None:
        """Sends ready calls in seq order, at most MAX_INFLIGHT at once. A call whose arguments
        are still being resolved holds back the later ones, so the worker never waits for a
        call that cannot be sent."""
        if self.address is None:
            if self.waiting and self.dead_cause is None:
                self._resolve()
            return
        while len(self.inflight) < MAX_INFLIGHT:
            while self.send_ptr < self.low or self.send_ptr in self.done:
                self.send_ptr += 1
            entry = self.waiting.pop(self.send_ptr, None)
            if entry is None:
                return
            self.send_ptr += 1
            self.inflight[entry.spec.seq_no] = entry
            entry.spec.lowest_unacked = self.low
            fut = self.sub.core.task_streams.push_nowait(self.address, entry.spec)
            fut.add_done_callback(lambda f, e=entry, inc=self.incarnation: self._pushed(e, inc, f))

    def _pushed(self, entry: TaskEntry, incarnation: int, fut: asyncio.Future) -> None:
        err = fut.exception()
        if err is not None:
            self._on_failure(entry, incarnation, err)  # stream errors are all AioRpcError
            return
        reply = fut.result()
        self.inflight.pop(entry.spec.seq_no, None)
        self.finish(entry.spec.seq_no)
        self.sub.submitter.complete(entry, reply)
        self.flush()

    def _on_failure(self, entry: TaskEntry, incarnation: int, err: grpc.aio.AioRpcError) -> None:
        self.inflight.pop(entry.spec.seq_no, None)
        if incarnation == self.incarnation and self.address is not None:
            log.info("actor %s unreachable (%s); waiting for a restart", self.actor_id.hex()[:8],
                     err.code().name)
            self.address = None
        undelivered = _never_delivered(err)
        if (undelivered or entry.retries_left != 0) and self.dead_cause is None:
            if not undelivered:  # it may have run: this costs one of its retries
                entry.retries_left -= 1
            self.waiting[entry.spec.seq_no] = entry
            self.send_ptr = min(self.send_ptr, entry.spec.seq_no)
        else:
            self._fail(entry, exc.RayActorError(
                f"The actor {self.actor_id.hex()} died while running {entry.spec.name}() "
                f"({err.code().name}); the call was not retried (max_task_retries="
                f"{self.max_task_retries}).", self.actor_id.hex()))
        self._resolve()

    def _fail(self, entry: TaskEntry, error: BaseException) -> None:
        self.finish(entry.spec.seq_no)
        self.sub.submitter._finish_with_error(entry, error)

    def _died_msg(self) -> str:
        return f"The actor {self.actor_id.hex()} is dead: {self.dead_cause}"

    def _resolve(self) -> None:
        if not self._resolving and self.dead_cause is None:
            self._resolving = True
            asyncio.ensure_future(self._wait_for_actor())

    async def _wait_for_actor(self) -> None:
        core = self.sub.core
        try:
            attempts = backoff.Attempts(GCS_WAIT)
            while True:
                if not self.waiting:
                    return  # nothing to send; the next call resolves the actor again
                try:
                    a = await core.gcs.get_actor_info(
                        self.actor_id, wait_for_change=True, after_incarnation=self.incarnation,
                        wait_s=5, timeout_s=15, retry=backoff.NO_RETRY)
                except rpc.NotFound as e:
                    self._set_dead(f"the GCS does not know it ({e})")
                    return
                except rpc.ServiceError:
                    await asyncio.sleep(attempts.failed() or GCS_WAIT.max_s)  # the GCS may be restarting
                    continue
                attempts.reset()
                if a.state == A.DEAD:
                    self._set_dead(a.death_cause)
                    return
                if a.state == A.ALIVE and a.incarnation >= self.incarnation:
                    # A newer incarnation, or (after 5 s with no change) the same worker, which
                    # the GCS still thinks alive: the failure was the network's; try it again.
                    if a.incarnation == self.incarnation:
                        log.info("actor %s: still alive at the same address; resending",
                                 self.actor_id.hex()[:8])
                    self.incarnation = a.incarnation
                    self.address = f"{a.address.ip}:{a.address.port}"
                    if self.waiting:
                        self.send_ptr = min(self.send_ptr, min(self.waiting))
                    self.flush()
                    return
        finally:
            self._resolving = False

    def _set_dead(self, cause: str) -> None:
        self.dead_cause = cause or "unknown cause"
        err = exc.ActorDiedError(self._died_msg(), self.actor_id.hex())
        for seq in sorted(self.waiting):
            self._fail(self.waiting.pop(seq), err)


def _never_delivered(err: grpc.aio.AioRpcError) -> bool:
    """True when the call failed to connect at all (the worker was already gone), so it cannot
    have run: it is resent without spending a retry."""
    if err.code() != grpc.StatusCode.UNAVAILABLE:
        return False
    d = (err.details() or "").lower()
    return "failed to connect" in d or "connection refused" in d


class ActorSubmitter:
    def __init__(self, core: CoreWorker) -> None:
        self.core = core
        self.submitter = core.submitter
        self.queues: dict[bytes, ActorQueue] = {}

    def submit(self, entry: TaskEntry, max_task_retries: int) -> None:
        """Loop thread: resolves owned arguments, then hands the call to its actor's queue."""
        q = self.queues.get(entry.spec.actor_id)
        if q is None:
            q = self.queues[entry.spec.actor_id] = ActorQueue(self, entry.spec.actor_id, max_task_retries)
        entry.spec.seq_no = q.next_seq
        q.next_seq += 1
        self.submitter.tasks[entry.spec.task_id] = entry
        self.submitter.resolve_then(entry, lambda e: self._ready(q, e))

    def _ready(self, q: ActorQueue, entry: TaskEntry) -> None:
        if entry.retries_left is None:
            entry.retries_left = q.max_task_retries
        if q.dead_cause is not None:
            q._fail(entry, exc.ActorDiedError(q._died_msg(), q.actor_id.hex()))
        else:
            q.waiting[entry.spec.seq_no] = entry
            q.flush()
