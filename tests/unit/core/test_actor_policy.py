"""ActorPolicy: restart accounting against max_restarts, death causes, detached vs job-owned
lifetimes (pure: ActorInfo in, decision out)."""
from __future__ import annotations

from ember_common.proto import common_pb2
from ember_gcs.actor_policy import ActorPolicy, Die, Restart, RetryCreation

A = common_pb2.ActorInfo
P = ActorPolicy()


def actor(max_restarts: int = 0, detached: bool = False, state: int = A.ALIVE) -> common_pb2.ActorInfo:
    spec = common_pb2.TaskSpec(job_id=b"j1", actor_creation=common_pb2.ActorCreationSpec(
        max_restarts=max_restarts, detached=detached))
    spec.caller.worker_id = "owner"
    a = A(actor_id=b"a", state=state, job_id=b"j1", class_name="C", creation_spec=spec)
    a.address.worker_id, a.address.node_id = "w1", "node-1-abcdef"
    return a


def test_restarts_until_max_restarts_then_dies_saying_so():
    a = actor(max_restarts=2)
    for n in (1, 2):
        d = P.worker_died(a, "w1", "exit code -9", intentional=False)
        assert isinstance(d, Restart)
        P.apply(a, d)
        assert a.state == A.RESTARTING and a.num_restarts == n and not a.address.worker_id
        a.state, a.address.worker_id = A.ALIVE, "w1"
    d = P.worker_died(a, "w1", "exit code -9", intentional=False)
    assert isinstance(d, Die) and "exit code -9" in d.cause and "restarts exhausted (2)" in d.cause
    P.apply(a, d)
    assert a.state == A.DEAD and a.death_cause == d.cause


def test_zero_restarts_dies_at_once_and_minus_one_restarts_forever():
    d = P.worker_died(actor(0), "w1", "x", intentional=False)
    assert isinstance(d, Die) and "exhausted" not in d.cause
    forever = actor(-1)
    forever.num_restarts = 10_000
    assert isinstance(P.worker_died(forever, "w1", "x", intentional=False), Restart)


def test_exit_actor_is_a_death_not_a_restart():
    d = P.worker_died(actor(5), "w1", "exit code 0", intentional=True)
    assert isinstance(d, Die) and "exit_actor" in d.cause


def test_events_about_other_workers_or_nodes_are_ignored():
    a = actor(3)
    assert P.worker_died(a, "w2", "x", intentional=False) is None
    assert P.node_died(a, "node-2") is None
    a.state = A.RESTARTING
    assert P.worker_died(a, "w1", "x", intentional=False) is None


def test_node_death_restarts_and_names_the_node():
    d = P.node_died(actor(1), "node-1-abcdef")
    assert isinstance(d, Restart) and "node-1-a" in d.why


def test_job_and_owner_lifetime_spare_detached_actors():
    assert isinstance(P.job_finished(actor(), b"j1"), Die)
    assert P.job_finished(actor(), b"j2") is None
    assert P.job_finished(actor(detached=True), b"j1") is None
    d = P.owner_died(actor(), "owner")
    assert isinstance(d, Die) and "owner" in d.cause and d.release_lease
    assert P.owner_died(actor(detached=True), "owner") is None
    assert P.owner_died(actor(state=A.DEAD), "owner") is None


def test_kill():
    assert P.killed(actor(3), no_restart=False) is None  # the worker's death restarts it
    d = P.killed(actor(3), no_restart=True)
    assert isinstance(d, Die) and "ember.kill" in d.cause
    assert P.killed(actor(state=A.DEAD), no_restart=True) is None


def test_out_of_scope_destroys_non_detached_actors_whatever_their_restarts():
    d = P.out_of_scope(actor(max_restarts=-1))
    assert isinstance(d, Die) and "references to the actor were removed" in d.cause
    assert d.release_lease  # its worker (and the resources it holds) go back
    assert P.out_of_scope(actor(state=A.PENDING_CREATION)) is not None
    assert P.out_of_scope(actor(detached=True)) is None
    assert P.out_of_scope(actor(state=A.DEAD)) is None


def test_creation_failures_count_as_restarts():
    a = actor(1, state=A.PENDING_CREATION)
    d = P.creation_worker_died(a, "UNAVAILABLE")
    assert isinstance(d, RetryCreation)
    P.apply(a, d)
    assert a.num_restarts == 1 and a.state == A.PENDING_CREATION
    d = P.creation_worker_died(a, "UNAVAILABLE")
    assert isinstance(d, Die) and "__init__" in d.cause
    d = P.creation_failed("ZeroDivisionError")
    assert isinstance(d, Die) and "creation task: ZeroDivisionError" in d.cause
    d = P.unschedulable(a, "no GPU")
    assert isinstance(d, Die) and "cannot be scheduled: no GPU" in d.cause and not d.release_lease
