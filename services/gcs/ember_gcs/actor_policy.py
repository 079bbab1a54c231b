"""The actor lifecycle rules, pure: events about one actor in, a decision out.

States: PENDING_CREATION -> ALIVE -> (RESTARTING -> ALIVE)* -> DEAD. Restarts are counted
against `max_restarts` (-1: forever; 0: never); a failure while `__init__` runs counts as a
restart too. Death causes say what happened. Lifetime: a non-detached actor dies with its job,
with the worker that created it (its owner), and when its owner reports that no handle to it is
left anywhere (out of scope); a detached one lives until killed. The driver
(actors.ActorManager) persists the result, (re)starts creation and returns leases.
"""
from __future__ import annotations

from dataclasses import dataclass

from ember_common.proto import common_pb2

A = common_pb2.ActorInfo


@dataclass(frozen=True)
class Restart:
    """Create the actor again (state RESTARTING, one more restart counted)."""

    why: str


@dataclass(frozen=True)
class RetryCreation:
    """The worker died during __init__: lease another one (one more restart counted)."""

    why: str


@dataclass(frozen=True)
class Die:
    """The actor is DEAD for good; release_lease: return its worker (killing it)."""

    cause: str
    release_lease: bool = True


Decision = Restart | RetryCreation | Die

OUT_OF_SCOPE = ("all references to the actor were removed: its handles went out of scope "
                "(a non-detached actor lives while a handle to it does)")


class ActorPolicy:
    """Decides restarts and deaths; `apply` writes a decision into the ActorInfo."""

    @staticmethod
    def may_restart(a: common_pb2.ActorInfo) -> bool:
        """True while max_restarts allows another restart."""
        max_restarts = a.creation_spec.actor_creation.max_restarts
        return max_restarts == -1 or a.num_restarts < max_restarts

    def _restart_or_die(self, a: common_pb2.ActorInfo, why: str) -> Decision:
        if self.may_restart(a):
            return Restart(why)
        max_restarts = a.creation_spec.actor_creation.max_restarts
        return Die(why + (f"; restarts exhausted ({max_restarts})" if max_restarts else ""),
                   release_lease=False)

    def worker_died(self, a: common_pb2.ActorInfo, worker_id: str, reason: str,
                    intentional: bool) -> Decision | None:
        """The worker hosting the actor exited. None if it was not this actor's live worker."""
        if a.state != A.ALIVE or a.address.worker_id != worker_id:
            return None
        if intentional:
            return Die("the actor exited via exit_actor()", release_lease=False)
        return self._restart_or_die(a, f"the actor's worker process died ({reason})")

    def node_died(self, a: common_pb2.ActorInfo, node_id: str) -> Decision | None:
        """A node died: the actor restarts elsewhere or dies if it lived there."""
        if a.state != A.ALIVE or a.address.node_id != node_id:
            return None
        return self._restart_or_die(a, f"its node {node_id[:8]} died")

    def owner_died(self, a: common_pb2.ActorInfo, worker_id: str) -> Decision | None:
        """The worker that created the actor exited: non-detached actors go with it."""
        if (a.state == A.DEAD or a.creation_spec.actor_creation.detached
                or a.creation_spec.caller.worker_id != worker_id):
            return None
        return Die("its owner (the worker that created it) died")

    def job_finished(self, a: common_pb2.ActorInfo, job_id: bytes) -> Decision | None:
        """The job ended: its non-detached actors go with it."""
        if a.job_id != job_id or a.state == A.DEAD or a.creation_spec.actor_creation.detached:
            return None
        return Die("its job finished (the driver exited)")

    def killed(self, a: common_pb2.ActorInfo, no_restart: bool) -> Decision | None:
        """ember.kill(): with no_restart the actor dies; otherwise its worker is killed and the
        worker's death (reported by its raylet) restarts it if it may (None here)."""
        if a.state == A.DEAD or not no_restart:
            return None
        return Die("killed by ember.kill()")

    def out_of_scope(self, a: common_pb2.ActorInfo) -> Decision | None:
        """The owner says no handle to the actor is left (Ray's reference-counted lifetime):
        a non-detached actor dies, whatever its max_restarts; a detached one stays."""
        if a.state == A.DEAD or a.creation_spec.actor_creation.detached:
            return None
        return Die(OUT_OF_SCOPE)

    def creation_worker_died(self, a: common_pb2.ActorInfo, code: str) -> Decision:
        """The worker died while running __init__ (the push failed with this status code)."""
        if self.may_restart(a):
            return RetryCreation(f"the worker died while running __init__ ({code})")
        return Die(f"the worker died while running __init__ ({code})")

    @staticmethod
    def creation_failed(message: str) -> Decision:
        """__init__ raised: no restart (as Ray)."""
        return Die("The actor died because of an error raised in its creation task: " + message)

    @staticmethod
    def unschedulable(a: common_pb2.ActorInfo, reason: str) -> Decision:
        """No node can ever host the actor."""
        return Die(f"The actor {a.class_name} cannot be scheduled: {reason}", release_lease=False)

    @staticmethod
    def apply(a: common_pb2.ActorInfo, d: Decision) -> None:
        """Writes the decision's state change into the ActorInfo (the driver persists it)."""
        if isinstance(d, Restart):
            a.num_restarts += 1
            a.state = A.RESTARTING
            a.ClearField("address")
        elif isinstance(d, RetryCreation):
            a.num_restarts += 1
        else:
            a.state = A.DEAD
            a.death_cause = d.cause
