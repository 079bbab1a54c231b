"""The actor call queue: one caller's calls to one actor, as a pure state machine.

Calls get consecutive sequence numbers when submitted; once their arguments are resolved they
are sent strictly in sequence order, at most `max_inflight` at once, to the actor's current
address (the worker puts each caller's calls back in order before running them). Events in,
instructions out (carried out by actor_submitter.py):

- `PushCall(entry, address, incarnation)`: send the call;
- `WaitForActor()`: the address is unknown (first call, or the worker died): ask the GCS for
  the actor's next incarnation and report back with `actor_alive` / `actor_dead`;
- `Complete(entry, reply)` / `Fail(entry, error)` (from task_queue): the call is done.

A call whose push fails is resent to the next incarnation if it never reached the worker (free)
or if it has `max_task_retries` left (-1: forever; each resend after delivery costs one);
otherwise it is *doomed*: it fails once the GCS has said what became of the actor — DEAD:
ActorDiedError with the death cause (e.g. "killed by ember.kill()"); RESTARTING (`actor_restarting`)
or alive again: ActorUnavailableError (the actor lives on; the call may or may not have run), as
Ray. While the actor is RESTARTING, an actor whose calls have no retries (max_task_retries=0,
Ray's fail-if-unreachable) fails its calls waiting to be sent with ActorUnavailableError too,
and so later calls until the GCS says it is ALIVE again. Once the actor is DEAD — reported by
the GCS, or killed by this process (`actor_dead` right after its `ember.kill`) — every waiting,
in-flight and later call fails with ActorDiedError naming the cause (OutOfMemoryError when the memory monitor killed it). A cancelled call that was not sent yet fails
with TaskCancelledError and is skipped (`cancel`); one in flight is the worker's to drop. Pure:
no I/O.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Union

from ember import exceptions as exc
from ember_common.proto import core_worker_pb2

from .. import runtime_env
from .task_queue import Complete, Fail, TaskEntry

Classify = Callable[[core_worker_pb2.PushTaskReply, tuple[type[BaseException], ...]], bool]

# Calls to one actor in flight at once from one caller (all on one task stream).
MAX_INFLIGHT = 1000
# In the death cause of an actor whose worker the raylet's memory monitor killed (the reason the
# raylet reports; ember_raylet.memory_monitor): its calls fail with OutOfMemoryError, as Ray's
# (an OOM death cause is an OUT_OF_MEMORY error there, not ACTOR_DIED).
OOM_MARKER = "was killed by the memory monitor"


class PushCall(NamedTuple):
    entry: TaskEntry
    address: str
    incarnation: int


class WaitForActor(NamedTuple):
    pass


Instruction = Union[PushCall, WaitForActor, Complete, Fail]


class ActorCallQueue:
    """Sequence numbers, the in-flight window, resends and failure of one actor's calls."""

    def __init__(self, actor_id: bytes, max_task_retries: int,
                 max_inflight: int = MAX_INFLIGHT, classify: Classify | None = None) -> None:
        self.actor_id = actor_id
        # Whether a reply's error is of an allowlisted class (task_errors.error_in_allowlist;
        # None: no allowlisted error is retried).
        self.classify = classify
        self.max_task_retries = max_task_retries
        self.max_inflight = max_inflight
        self.next_seq = 0
        self.address: str | None = None
        self.incarnation = 0
        self.dead_cause: str | None = None
        self.restarting = False  # the GCS last said RESTARTING (cleared when ALIVE again)
        self.waiting: dict[int, TaskEntry] = {}   # ready to send (arguments resolved), by seq
        self.inflight: dict[int, TaskEntry] = {}  # sent, no reply yet
        # Broke after delivery with no retry left: failed once the GCS says what happened
        # (entry, the push's status code).
        self.doomed: dict[int, tuple[TaskEntry, str]] = {}
        self.send_ptr = 0  # calls go out strictly in seq order
        self.resolving = False  # a WaitForActor is being carried out
        # Every seq below `low` is finished (replied or failed); `done` holds finished ones above.
        self.low = 0
        self.done: set[int] = set()
        # Calls given no retries (their own max_task_retries, else the actor's, is 0), by seq:
        # Ray's fail-if-unreachable while the actor restarts. A call that has spent its retries
        # on a resend is not one of them: that resend waits for the restart.
        self.unretried: set[int] = set()

    # ------------------------------------------------------------------ events
    def assign_seq(self, entry: TaskEntry) -> None:
        """A call was submitted: it takes the next sequence number."""
        entry.spec.seq_no = self.next_seq
        self.next_seq += 1

    def ready(self, entry: TaskEntry) -> list[Instruction]:
        """A call's arguments are resolved: it may be sent."""
        if entry.retries_left is None:
            entry.retries_left = self.max_task_retries
        if entry.retries_left == 0:
            self.unretried.add(entry.spec.seq_no)
        out: list[Instruction] = []
        if entry.cancelled:
            return out  # cancelled while its arguments were resolved: already failed
        if self.dead_cause is not None:
            self._fail(entry, self._died_error(), out)
        else:
            self.waiting[entry.spec.seq_no] = entry
            self._flush(out)
        return out

    def replied(self, entry: TaskEntry, reply: core_worker_pb2.PushTaskReply) -> list[Instruction]:
        """The actor answered a call. An application error with `retry_exceptions` (and the
        error's class allowlisted, when there is a list) and retries left is sent again, as a
        new call at the end of the sequence, costing one retry."""
        self.inflight.pop(entry.spec.seq_no, None)
        self._finish(entry.spec.seq_no)
        out: list[Instruction] = []
        if _retries_error(entry, reply, self.classify):
            if entry.retries_left is not None and entry.retries_left > 0:
                entry.retries_left -= 1
            entry.spec.attempt += 1
            self.assign_seq(entry)
            self.waiting[entry.spec.seq_no] = entry
        else:
            out.append(Complete(entry, reply))
        self._flush(out)
        return out

    def push_failed(self, entry: TaskEntry, incarnation: int, code: str,
                    delivered: bool) -> list[Instruction]:
        """A push to incarnation broke; delivered=False when it never reached the worker."""
        self.inflight.pop(entry.spec.seq_no, None)
        if incarnation == self.incarnation and self.address is not None:
            self.address = None  # the worker is gone: wait for a restart
        out: list[Instruction] = []
        if entry.cancelled:  # never resent
            self._fail(entry, exc.TaskCancelledError(entry.spec.task_id.hex()), out)
        elif self.dead_cause is not None:
            self._fail(entry, self._died_error(), out)
        elif not delivered or entry.retries_left != 0:
            if delivered:  # it may have run: this costs one of its retries
                assert entry.retries_left is not None
                entry.retries_left -= 1
            self.waiting[entry.spec.seq_no] = entry
            self.send_ptr = min(self.send_ptr, entry.spec.seq_no)
        else:  # never resent: later calls must not wait for it, but its error waits for the GCS
            self._finish(entry.spec.seq_no)
            self.doomed[entry.spec.seq_no] = (entry, code)
        self._want_actor(out)
        return out

    def cancel(self, entry: TaskEntry) -> tuple[list[Instruction], str | None]:
        """ember.cancel on a call. One not sent yet (waiting for its arguments, its turn or the
        actor) never will be: it fails with TaskCancelledError now and later calls no longer
        wait for it. For one in flight, returns the address of the worker that must drop it
        if it has not started (None: nothing to ask)."""
        entry.cancelled = True
        seq = entry.spec.seq_no
        out: list[Instruction] = []
        if seq in self.inflight:
            return out, self.address
        if seq < self.low or seq in self.done:
            return out, None  # finished (or doomed: it fails with the actor's fate)
        self.waiting.pop(seq, None)
        self._fail(entry, exc.TaskCancelledError(entry.spec.task_id.hex()), out)
        self._flush(out)
        return out, None

    def needs_actor(self) -> bool:
        """Calls are waiting for an address (or for the actor's fate) and the actor is not
        known to be dead."""
        return bool(self.waiting or self.doomed) and self.dead_cause is None

    def actor_alive(self, incarnation: int, address: str) -> list[Instruction] | None:
        """The GCS says the actor is ALIVE at address; None when that incarnation is older than
        the one known here (keep waiting)."""
        if incarnation < self.incarnation:
            return None
        self.incarnation = incarnation
        self.address = address
        self.restarting = False
        if self.waiting:
            self.send_ptr = min(self.send_ptr, min(self.waiting))
        out: list[Instruction] = []
        for seq in sorted(self.doomed):
            entry, code = self.doomed.pop(seq)
            out.append(Fail(entry, self._unavailable(entry, f"its worker was lost ({code})")))
        self._flush(out)
        return out

    def actor_restarting(self) -> list[Instruction]:
        """The GCS says the actor is RESTARTING: doomed calls fail with ActorUnavailableError,
        and so do waiting ones that have no retries (the call's max_task_retries, else the
        actor's, is 0)."""
        self.restarting = True
        out: list[Instruction] = []
        for seq in sorted(self.doomed):
            entry, code = self.doomed.pop(seq)
            out.append(Fail(entry, self._unavailable(entry, f"its worker was lost ({code})")))
        for seq in sorted(self.waiting):
            if seq in self.unretried:
                entry = self.waiting.pop(seq)
                self._fail(entry, self._unavailable(entry, "the actor is restarting"), out)
        return out

    def grace_s(self) -> float:
        """How long to wait for the GCS's word on the actor before taking silence as "not
        dead": short when calls wait to fail (Ray's timeout_ms_task_wait_for_death_info)."""
        no_retry = not self.unretried.isdisjoint(self.waiting)
        return 1.0 if self.doomed or no_retry else 5.0

    def actor_dead(self, cause: str) -> list[Instruction]:
        """The actor is DEAD: every waiting and doomed call fails, and so will later ones (and
        in-flight ones when their push breaks). Idempotent: the first cause stays."""
        if self.dead_cause is None:
            self.dead_cause = cause or "unknown cause"
        err = self._died_error()
        out: list[Instruction] = []
        for seq in sorted(self.waiting):
            self._fail(self.waiting.pop(seq), err, out)
        for seq in sorted(self.doomed):
            out.append(Fail(self.doomed.pop(seq)[0], err))
        return out

    def resolved(self) -> None:
        """The WaitForActor instruction is finished (whatever its outcome)."""
        self.resolving = False

    # ------------------------------------------------------------------ policy
    def _flush(self, out: list[Instruction]) -> None:
        """Sends ready calls in seq order, at most max_inflight at once. A call whose arguments
        are still being resolved holds back the later ones, so the worker never waits for a
        call that cannot be sent."""
        address = self.address
        if address is None:
            self._want_actor(out)
            return
        while len(self.inflight) < self.max_inflight:
            while self.send_ptr < self.low or self.send_ptr in self.done:
                self.send_ptr += 1
            entry = self.waiting.pop(self.send_ptr, None)
            if entry is None:
                return
            self.send_ptr += 1
            self.inflight[entry.spec.seq_no] = entry
            entry.spec.lowest_unacked = self.low
            out.append(PushCall(entry, address, self.incarnation))

    def _want_actor(self, out: list[Instruction]) -> None:
        if not self.resolving and self.needs_actor():
            self.resolving = True
            out.append(WaitForActor())

    def _finish(self, seq: int) -> None:
        self.done.add(seq)
        self.unretried.discard(seq)
        while self.low in self.done:
            self.done.discard(self.low)
            self.low += 1

    def _fail(self, entry: TaskEntry, error: BaseException, out: list[Instruction]) -> None:
        self._finish(entry.spec.seq_no)
        out.append(Fail(entry, error))

    def _died_error(self) -> exc.RayError:
        if OOM_MARKER in (self.dead_cause or ""):
            return exc.OutOfMemoryError(self._died_msg())
        err = exc.ActorDiedError(self._died_msg(), self.actor_id.hex())
        setup = runtime_env.setup_error_from(self.dead_cause or "")
        if setup is not None:  # its runtime env could not be set up: that is the cause
            err.__cause__ = err.cause = exc.RuntimeEnvSetupError(setup)
        return err

    def _unavailable(self, entry: TaskEntry, why: str) -> exc.ActorUnavailableError:
        return exc.ActorUnavailableError(
            f"{why} during {entry.spec.name}(), and the call is not retried "
            f"(max_task_retries={self.max_task_retries})", self.actor_id)

    def _died_msg(self) -> str:
        return f"The actor {self.actor_id.hex()} is dead: {self.dead_cause}"


def _retries_error(entry: TaskEntry, reply: core_worker_pb2.PushTaskReply, classify: Classify | None) -> bool:
    """Whether the call's application error is retried (see `ActorCallQueue.replied`)."""
    if (not reply.is_application_error or reply.refused or not entry.spec.retry_exceptions
            or entry.retries_left == 0):
        return False
    allow = entry.retry_allowlist
    return allow is None or (bool(allow) and classify is not None and classify(reply, allow))
