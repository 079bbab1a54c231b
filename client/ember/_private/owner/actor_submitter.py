"""Caller side of actor method calls: the I/O driver of the actor call queue (actor_queue.py).

Each actor a process calls gets an ActorCallQueue (pure: sequence numbers, the in-flight window,
resends, failure once DEAD). This module carries out its instructions: pushes go straight to
the actor's worker on the task stream; when the address is unknown (first call, worker died) it
long-polls the GCS (`GetActorInfo` with `after_incarnation`) for the next incarnation, retrying
under the kit's backoff policy while the GCS is unreachable. Runs on the CoreWorker's loop
thread.
"""
from __future__ import annotations

import asyncio
import functools
import logging
from typing import TYPE_CHECKING, Protocol

import grpc

from ember_common import backoff, rpc
from ember_common.proto import common_pb2, core_worker_pb2

from ..telemetry import task_events
from .actor_queue import MAX_INFLIGHT, ActorCallQueue, Instruction, PushCall
from .task_errors import error_in_allowlist
from .task_queue import Complete, Fail, TaskEntry

if TYPE_CHECKING:
    from ember_common.gcs_client import GcsClient
    from ember_common.proto import core_worker_pb2_grpc

    from ..transport.task_stream import TaskStreams
    from .task_submitter import TaskSubmitter

log = logging.getLogger(__name__)
__all__ = ["ActorSubmitter", "GCS_WAIT", "MAX_INFLIGHT"]
A = common_pb2.ActorInfo
# Waiting for an actor's next incarnation while the GCS is unreachable: until it answers.
GCS_WAIT = backoff.FOREVER.replace(initial_s=0.05, max_s=1.0)


class ActorSubmitterCore(Protocol):
    """What the actor submitter needs of the core worker (CoreWorker, in core_worker.py)."""

    gcs: GcsClient
    submitter: TaskSubmitter
    task_streams: TaskStreams

    def worker_stub(self, address: str) -> core_worker_pb2_grpc.CoreWorkerAsyncStub: ...


class ActorSubmitter:
    """One ActorCallQueue per actor this process calls, and the I/O they ask for."""

    def __init__(self, core: ActorSubmitterCore) -> None:
        self.core = core
        self.submitter = core.submitter
        self.queues: dict[bytes, ActorCallQueue] = {}

    def submit(self, entry: TaskEntry, max_task_retries: int) -> None:
        """Loop thread: resolves owned arguments, then hands the call to its actor's queue."""
        q = self.queues.get(entry.spec.actor_id)
        if q is None:
            q = self.queues[entry.spec.actor_id] = ActorCallQueue(entry.spec.actor_id, max_task_retries,
                                                                 classify=error_in_allowlist)
        q.assign_seq(entry)
        self.submitter.tasks[entry.spec.task_id] = entry
        task_events.submitted(entry)
        self.submitter.resolve_then(entry, lambda e: self._run(q, q.ready(e)))

    async def cancel(self, task_id: bytes, recursive: bool = True) -> bool:
        """ember.cancel on an actor call (loop thread): dropped here if not sent yet, else the
        actor's worker is asked to drop it if it has not started (a running call of an async
        actor is cancelled there; one of a sync actor runs to its end, as in Ray). False when
        the call is not (or no longer) known here. recursive: the actor's worker also cancels
        what the call submitted."""
        entry = self.submitter.tasks.get(task_id)
        q = self.queues.get(entry.spec.actor_id) if entry is not None else None
        if entry is None or q is None:
            return False
        out, address = q.cancel(entry)
        self._run(q, out)
        if address is not None:
            req = core_worker_pb2.CancelTaskRequest(task_id=task_id, force=False, recursive=recursive)
            try:
                await self.core.worker_stub(address).CancelTask(req, timeout=10)
            except grpc.aio.AioRpcError as e:  # the worker is gone: the push fails and says so
                log.debug("cancel of %s: %s", task_id.hex()[:8], e.code().name)
        return True

    def killed(self, actor_id: bytes, cause: str) -> None:
        """Loop thread: this process killed the actor for good (the GCS has marked it DEAD):
        waiting calls fail now, in-flight ones when their push breaks, later ones at once —
        none is sent to a worker that may not have exited yet."""
        q = self.queues.get(actor_id)
        if q is None:
            q = self.queues[actor_id] = ActorCallQueue(actor_id, 0)
        self._run(q, q.actor_dead(cause))

    def _run(self, q: ActorCallQueue, out: list[Instruction]) -> None:
        # isinstance chain, most frequent first (cheaper than `match` on this hot path).
        for ins in out:
            if isinstance(ins, PushCall):
                task_events.pushed(ins.entry, ins.address)
                # The reply is handled straight from the stream's reader (no done-callback hop).
                self.core.task_streams.push_cb(ins.address, ins.entry.spec, functools.partial(
                    self._pushed, q, ins.entry, ins.incarnation))
            elif isinstance(ins, Complete):
                self.submitter.complete(ins.entry, ins.reply)
            elif isinstance(ins, Fail):
                self.submitter.finish_with_error(ins.entry, ins.error)
            else:  # WaitForActor
                asyncio.ensure_future(self._wait_for_actor(q))

    def _pushed(self, q: ActorCallQueue, entry: TaskEntry, incarnation: int,
                reply: core_worker_pb2.PushTaskReply | None, err: BaseException | None) -> None:
        if reply is not None:
            self._run(q, q.replied(entry, reply))
            return
        assert err is not None
        code = err.code() if isinstance(err, grpc.aio.AioRpcError) else grpc.StatusCode.UNKNOWN
        task_events.push_failed(entry, code.name, str(err))
        if incarnation == q.incarnation and q.address is not None:
            log.info("actor %s unreachable (%s); waiting for a restart", q.actor_id.hex()[:8],
                     code.name)
        self._run(q, q.push_failed(entry, incarnation, code.name, delivered=not _never_delivered(err)))

    async def _wait_for_actor(self, q: ActorCallQueue) -> None:
        gcs = self.core.gcs
        try:
            attempts = backoff.Attempts(GCS_WAIT)
            quick = q.restarting  # known to be restarting: ask for its state now, no wait
            while q.needs_actor():
                try:
                    a = await gcs.get_actor_info(
                        q.actor_id, wait_for_change=not quick, after_incarnation=q.incarnation,
                        wait_s=q.grace_s(), timeout_s=15, retry=backoff.NO_RETRY)
                except rpc.NotFound as e:
                    self._run(q, q.actor_dead(f"the GCS does not know it ({e})"))
                    return
                except rpc.ServiceError:
                    await asyncio.sleep(attempts.failed() or GCS_WAIT.max_s)  # the GCS may be restarting
                    continue
                attempts.reset()
                quick = False
                if a.state == A.DEAD:
                    self._run(q, q.actor_dead(a.death_cause))
                    return
                if a.state == A.RESTARTING:  # no word of death within the grace: unavailable
                    self._run(q, q.actor_restarting())
                    continue
                if a.state == A.ALIVE:
                    # A newer incarnation, or (after 5 s with no change) the same worker, which
                    # the GCS still thinks alive: the failure was the network's; try it again.
                    if a.incarnation == q.incarnation and q.incarnation:
                        log.info("actor %s: still alive at the same address; resending",
                                 q.actor_id.hex()[:8])
                    out = q.actor_alive(a.incarnation, f"{a.address.ip}:{a.address.port}")
                    task_events.leased(f"{a.address.ip}:{a.address.port}", a.address.node_id, a.address.worker_id, a.pid)
                    if out is not None:
                        q.resolved()
                        self._run(q, out)
                        return
        finally:
            q.resolved()


def _never_delivered(err: BaseException) -> bool:
    """True when the call failed to connect at all (the worker was already gone), so it cannot
    have run: it is resent without spending a retry."""
    if not isinstance(err, grpc.aio.AioRpcError) or err.code() != grpc.StatusCode.UNAVAILABLE:
        return False
    d = (err.details() or "").lower()
    return "failed to connect" in d or "connection refused" in d
