"""PgManager: PENDING -> PREPARED -> CREATED, rollback, rescheduling on node death, removal,
job lifetime, names (pure, fake clock)."""
from __future__ import annotations

import pytest

from ember_common.gcs_pg_client import spec
from ember_common.proto import common_pb2
from ember_common.rpc import AlreadyExists, InvalidArgument, NotFound
from ember_gcs.pg_manager import Cancel, PgManager, Prepare, Wait, by_node

PG = common_pb2.PlacementGroupInfo


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        self.t += 1
        return self.t


def view(**cpus: float) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    v = {n: {"CPU": c} for n, c in cpus.items()}
    return v, {n: dict(r) for n, r in v.items()}


def created(m: PgManager, g: common_pb2.PlacementGroupInfo, **cpus: float) -> dict[str, list[int]]:
    d = m.schedule(g.placement_group_id, *view(**cpus))
    assert isinstance(d, Prepare)
    m.prepared(g.placement_group_id, d.plan)
    assert g.state == PG.PREPARED
    m.committed(g.placement_group_id)
    return d.plan


def test_create_validates_and_is_idempotent_by_id():
    m = PgManager(Clock())
    s = spec([{"CPU": 1}], "STRICT_SPREAD", name="g", namespace="ns")
    g, new = m.create(s)
    assert new and g.state == PG.PENDING and g.bundles[0].index == 0
    again, new = m.create(s)
    assert again is g and not new
    with pytest.raises(AlreadyExists, match="'g' already exists in the namespace 'ns'"):
        m.create(spec([{"CPU": 1}], name="g", namespace="ns"))
    m.create(spec([{"CPU": 1}], name="g", namespace="other"))
    with pytest.raises(InvalidArgument, match="at least one bundle"):
        m.create(spec([]))
    with pytest.raises(InvalidArgument, match="bundle 1 is empty"):
        m.create(spec([{"CPU": 1}, {"CPU": 0}]))
    with pytest.raises(InvalidArgument, match="'CPU'"):
        m.create(spec([{"CPU": -1}]))
    with pytest.raises(ValueError, match="invalid placement group strategy 'BEST'"):
        spec([{"CPU": 1}], "BEST")


def test_two_phase_commit_to_created():
    m = PgManager(Clock())
    g, _ = m.create(spec([{"CPU": 1}] * 3, "STRICT_SPREAD"))
    plan = created(m, g, a=1, b=1, c=1)
    assert sorted(plan) == ["a", "b", "c"]
    assert g.state == PG.CREATED and g.placement_version == 1
    assert sorted(bb.node_id for bb in g.bundles) == ["a", "b", "c"]
    assert m.waiting() == []


def test_infeasible_group_waits_saying_why():
    m = PgManager(Clock())
    g, _ = m.create(spec([{"CPU": 1}] * 3, "STRICT_SPREAD"))
    d = m.schedule(g.placement_group_id, *view(a=4))
    assert isinstance(d, Wait) and d.infeasible
    assert g.state == PG.PENDING and "needs 3 different nodes" in g.state_message


def test_a_failed_prepare_rolls_back_every_bundle_of_the_attempt():
    m = PgManager(Clock())
    g, _ = m.create(spec([{"CPU": 1}] * 2, "SPREAD"))
    d = m.schedule(g.placement_group_id, *view(a=1, b=1))
    assert isinstance(d, Prepare)
    cancels = m.failed(g.placement_group_id, d.plan, "bundles [1] no longer fit on node b")
    assert sorted(c.node_id for c in cancels) == ["a", "b"]
    assert g.state == PG.PENDING and "no longer fit" in g.state_message
    assert all(not bb.node_id for bb in g.bundles)
    assert m.waiting() == [g]


def test_node_death_reschedules_only_the_lost_bundles():
    m = PgManager(Clock())
    g, _ = m.create(spec([{"CPU": 1}] * 2, "STRICT_SPREAD"))
    created(m, g, a=1, b=1)
    lost_node = g.bundles[0].node_id
    kept_node = g.bundles[1].node_id
    assert m.node_dead(lost_node) == [g.placement_group_id]
    assert g.state == PG.RESCHEDULING and "died" in g.state_message
    d = m.schedule(g.placement_group_id, *view(**{kept_node: 1, "c": 1}))
    assert isinstance(d, Prepare) and d.plan == {"c": [0]}  # STRICT_SPREAD avoids kept_node
    m.prepared(g.placement_group_id, d.plan)
    m.committed(g.placement_group_id)
    assert [bb.node_id for bb in g.bundles] == ["c", kept_node] and g.placement_version == 2
    # a failed commit of a rescheduling group keeps it RESCHEDULING
    m.node_dead("c")
    d = m.schedule(g.placement_group_id, *view(**{kept_node: 1, "d": 1}))
    assert isinstance(d, Prepare)
    m.failed(g.placement_group_id, d.plan, "commit failed")
    assert g.state == PG.RESCHEDULING and g.bundles[1].node_id == kept_node


def test_remove_is_idempotent_frees_the_name_and_cancels_every_node():
    m = PgManager(Clock())
    g, _ = m.create(spec([{"CPU": 1}] * 2, "STRICT_PACK", name="n"))
    created(m, g, a=4)
    cancels = m.remove(g.placement_group_id)
    assert cancels == [Cancel(g.placement_group_id, "a", [0, 1])]
    assert g.state == PG.REMOVED and m.remove(g.placement_group_id) == []
    with pytest.raises(NotFound, match="'n'"):
        m.get_named("n", "")
    m.create(spec([{"CPU": 1}], name="n"))  # the name is free again
    with pytest.raises(NotFound):
        m.get(b"nope")


def test_job_lifetime_spares_detached_groups_and_counts_by_state():
    m = PgManager(Clock())
    a, _ = m.create(spec([{"CPU": 1}], job_id=b"j1"))
    m.create(spec([{"CPU": 1}], job_id=b"j1", detached=True))
    m.create(spec([{"CPU": 1}], job_id=b"j2"))
    assert m.job_finished(b"j1") == [a.placement_group_id]
    m.remove(a.placement_group_id)
    assert m.counts()["PENDING"] == 2 and m.counts()["REMOVED"] == 1 and m.counts()["CREATED"] == 0


def test_waiting_groups_in_creation_order_and_reload():
    m = PgManager(Clock())
    first, _ = m.create(spec([{"CPU": 1}], name="x"))
    second, _ = m.create(spec([{"CPU": 1}]))
    assert m.waiting() == [first, second]
    again = PgManager(Clock())
    for g in (first, second):
        again.load(PG.FromString(g.SerializeToString()))
    assert again.get_named("x", "").placement_group_id == first.placement_group_id


def test_a_round_decides_every_waiting_group_each_on_what_the_earlier_left():
    m = PgManager(Clock())
    first, _ = m.create(spec([{"CPU": 2}], "STRICT_PACK"))
    second, _ = m.create(spec([{"CPU": 1}, {"CPU": 1}], "STRICT_SPREAD"))
    third, _ = m.create(spec([{"CPU": 2}], "STRICT_PACK"))
    fourth, _ = m.create(spec([{"CPU": 1}], "PACK"))
    available, total = view(a=3, b=2)
    decisions = m.schedule_round(available, total)
    assert [d.pg_id for d in decisions] == [g.placement_group_id for g in (first, second, third, fourth)]
    one, two, three, four = decisions
    # The first takes 2 of a's 3 CPUs, the second one CPU on each node: 2 CPUs are left, one
    # per node, so the third (2 on one node) waits and the fourth, behind it, is placed.
    assert isinstance(one, Prepare) and one.plan == {"a": [0]}
    assert isinstance(two, Prepare) and sorted(two.plan) == ["a", "b"]
    assert isinstance(three, Wait) and not three.infeasible
    assert "waiting for resources" in third.state_message
    assert isinstance(four, Prepare) and four.plan == {"b": [0]}
    assert available == {"a": {"CPU": 3}, "b": {"CPU": 2}}  # the caller's view is untouched
    # Only waiting groups are decided: once placed, a round leaves them alone.
    for d in (one, two, four):
        m.prepared(d.pg_id, d.plan)
        m.committed(d.pg_id)
    assert [d.pg_id for d in m.schedule_round(*view(a=3, b=2))] == [third.placement_group_id]


def test_by_node_puts_every_group_of_a_round_in_one_call_per_node():
    a, b = b"\x01" * 18, b"\x02" * 18
    got = by_node([(a, {"n1": [0, 2], "n2": [1]}), (b, {"n2": [0]})])
    assert got == {"n1": [(a, [0, 2])], "n2": [(a, [1]), (b, [0])]}
    assert by_node([]) == {}


def test_only_the_newest_removed_groups_are_kept():
    m = PgManager(Clock())
    groups = [m.create(spec([{"CPU": 1}]))[0] for _ in range(5)]
    live = m.create(spec([{"CPU": 1}]))[0]
    for g in groups:
        m.remove(g.placement_group_id)
    assert m.waiting() == [live]  # removed ones leave the waiting index
    gone = m.evict_removed(keep=2)
    assert gone == [g.placement_group_id for g in groups[:3]]  # the oldest removals
    assert set(m.groups) == {g.placement_group_id for g in groups[3:]} | {live.placement_group_id}
    assert m.evict_removed(keep=2) == []
    with pytest.raises(NotFound):
        m.get(groups[0].placement_group_id)
    # Reloaded records go back into the indexes.
    again = PgManager(Clock())
    for g in m.groups.values():
        again.load(g)
    assert again.waiting() == [live] and again.evict_removed(keep=1) == [groups[3].placement_group_id]
