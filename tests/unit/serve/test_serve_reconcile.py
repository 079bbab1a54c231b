"""reconcile(): the replica state machine (scale, rolling update, stuck surge)."""
from __future__ import annotations

from ember.serve._private.reconcile import RUNNING, STARTING, STOPPING, ReplicaView, reconcile


def R(rid, version, state=RUNNING, t=0.0):
    return ReplicaView(rid, version, state, t)


def test_scale_up_and_down():
    assert reconcile("v1", 3, [], 0).start == 3
    d = reconcile("v1", 1, [R("a", "v1", t=1), R("b", "v1", t=2), R("c", "v1", STARTING, t=3)], 5)
    assert d.start == 0 and sorted(d.stop) == ["b", "c"]  # starting first, then the newest


def test_stopping_replicas_do_not_count():
    d = reconcile("v1", 2, [R("a", "v1"), R("b", "v1", STOPPING)], 0)
    assert d.start == 1 and d.stop == []


def test_rolling_update_keeps_capacity():
    reps = [R("a", "v1", t=1), R("b", "v1", t=2)]
    d = reconcile("v2", 2, reps, 3)
    assert d.stop == [] and d.start == 1  # surge of one: 2 old + 1 new
    reps.append(R("n1", "v2", STARTING, t=3))
    d = reconcile("v2", 2, reps, 4)
    assert d.stop == [] and d.start == 0  # nothing stops until a new one runs
    reps[-1] = R("n1", "v2", RUNNING, t=3)
    d = reconcile("v2", 2, reps, 5)
    assert d.stop == ["a"] and d.start == 1  # oldest old replica goes, next new one starts
    reps = [R("b", "v1", t=2), R("n1", "v2", t=3), R("n2", "v2", t=6)]
    d = reconcile("v2", 2, reps, 7)
    assert d.stop == ["b"] and d.start == 0


def test_old_starting_replicas_are_dropped_at_once():
    d = reconcile("v2", 1, [R("a", "v1", STARTING)], 0)
    assert d.stop == ["a"] and d.start == 1


def test_surge_that_does_not_fit_lets_one_old_replica_go():
    # two GPU replicas on two GPUs: the new one cannot start until an old one frees its GPU
    reps = [R("a", "v1", t=1), R("b", "v1", t=2), R("n1", "v2", STARTING, t=10)]
    assert reconcile("v2", 2, reps, 15, pending_grace_s=10).stop == []
    d = reconcile("v2", 2, reps, 21, pending_grace_s=10)
    assert d.stop == ["a"] and d.start == 0  # the oldest goes; no further surge while stuck


def test_converged_state_does_nothing():
    d = reconcile("v1", 2, [R("a", "v1"), R("b", "v1")], 0)
    assert d.start == 0 and d.stop == []
    d = reconcile("v1", 0, [], 0)
    assert d.start == 0 and d.stop == []
