"""The fault schedule and fault log, pure: no Docker, an injected clock."""
from __future__ import annotations

import io
import json

import pytest

from .faults import FaultEvent, FaultLog, FaultSchedule, availability_by_kind, summarize


def test_same_seed_same_faults_other_seed_other_faults() -> None:
    a, b, c = FaultSchedule(7).first(40), FaultSchedule(7).first(40), FaultSchedule(8).first(40)
    assert a == b
    assert a != c
    assert [e.index for e in a] == list(range(40))


def test_every_kind_and_bounds_respected() -> None:
    s = FaultSchedule(1, down_s=(1.0, 2.0), netcut_down_s=(5.0, 6.0), gap_s=(3.0, 4.0))
    evs = s.first(300)
    assert {e.kind for e in evs} == {"kill", "sigkill", "netcut"}
    for e in evs:
        assert e.target in s.kinds[e.kind]
        lo, hi = (5.0, 6.0) if e.kind == "netcut" else (1.0, 2.0)
        assert lo <= e.down_s <= hi and 3.0 <= e.gap_s <= 4.0
    killed = {e.target for e in evs if e.kind == "kill"}
    assert {"raylet-head", "raylet-worker", "objmgr-worker", "gcs", "etcd", "serve-proxy"} <= killed


def test_kinds_restricted_and_bad_settings_named() -> None:
    evs = FaultSchedule(3, kinds={"kill": ("gcs",), "netcut": ()}).first(20)
    assert {(e.kind, e.target) for e in evs} == {("kill", "gcs")}
    with pytest.raises(ValueError, match="unknown fault kinds \\['explode'\\]"):
        FaultSchedule(1, kinds={"explode": ("gcs",)})
    assert {e.kind for e in FaultSchedule.of_kinds(3, ["netcut"]).first(10)} == {"netcut"}
    with pytest.raises(ValueError, match="unknown fault kinds \\['boom'\\]"):
        FaultSchedule.of_kinds(3, ["kill", "boom"])
    with pytest.raises(ValueError, match="at least one kind"):
        FaultSchedule(1, kinds={"kill": ()})
    with pytest.raises(ValueError, match="down_s"):
        FaultSchedule(1, down_s=(3.0, 1.0))


def test_log_names_seed_and_summary_counts_recoveries() -> None:
    now = [100.0]
    buf = io.StringIO()
    log = FaultLog(buf, seed=42, clock=lambda: now[0])
    ev1 = FaultEvent(0, "kill", "gcs", 2.0, 3.0, 5)
    ev2 = FaultEvent(1, "netcut", "objmgr-worker", 1.5, 3.0, 9)
    ev3 = FaultEvent(2, "kill", "gcs", 1.0, 3.0, 1)
    log.fault(ev1, "inject")
    now[0] = 104.5
    log.fault(ev1, "recovered", recovery_s=4.5)
    log.fault(ev2, "recovered", recovery_s=2.0)
    log.fault(ev3, "recovered", recovery_s=1.5)
    log.fault(FaultEvent(3, "sigkill", "raylet-head", 1.0, 1.0, 2), "not_recovered", error="2 nodes")
    lines = [json.loads(x) for x in buf.getvalue().splitlines()]
    assert lines[0]["seed"] == 42 and "EMBER_CHAOS_SEED=42" in lines[0]["replay"]
    assert lines[2]["t"] == 4.5 and lines[2]["target"] == "gcs"
    s = summarize(log.records)
    assert s["faults_by_kind"] == {"kill": 2, "netcut": 1, "sigkill": 1}
    assert s["recovery"]["kill:gcs"] == {"n": 2, "max_s": 4.5, "mean_s": 3.0}
    assert s["not_recovered"] == ["#3 sigkill raylet-head: 2 nodes"]


def test_leader_kinds_lead_the_schedule_in_a_seeded_order() -> None:
    kinds = ["kill", "sigkill", "netcut", "leader-kill", "leader-partition"]
    lead = ("leader-kill", "leader-partition")
    firsts = {tuple(e.kind for e in FaultSchedule.of_kinds(seed, kinds, lead=lead).first(2))
              for seed in range(20)}
    assert firsts == {lead, lead[::-1]}  # both, each once, in either order by seed
    s = FaultSchedule.of_kinds(5, kinds, lead=lead)
    assert s.first(30) == FaultSchedule.of_kinds(5, kinds, lead=lead).first(30)
    evs = s.first(300)
    assert {e.kind for e in evs[2:]} == set(kinds)  # then the weighted draws, leader kinds too
    for e in evs:
        if e.kind.startswith("leader-"):
            assert e.target == "gcs-leader"
        if e.kind == "leader-partition":  # outlasts the suite's 4 s lease
            assert s.partition_down_s[0] <= e.down_s <= s.partition_down_s[1] and e.down_s > 4
    # the single-GCS schedule is unchanged by the new kinds: same seed, same faults
    assert FaultSchedule.of_kinds(9, ["kill", "sigkill", "netcut"], lead=lead).first(20) == \
        FaultSchedule(9).first(20)
    with pytest.raises(ValueError, match="lead kinds \\['leader-kill'\\] are not among"):
        FaultSchedule(1, lead=("leader-kill",))


def test_availability_by_kind_counts_requests_inside_each_fault() -> None:
    now = [0.0]
    log = FaultLog(io.StringIO(), seed=1, clock=lambda: now[0])
    kill, part = FaultEvent(0, "leader-kill", "gcs-leader", 2.0, 3.0, 0), \
        FaultEvent(1, "leader-partition", "gcs-leader", 6.0, 3.0, 0)
    for ev, t_in, t_out in ((kill, 10.0, 20.0), (part, 30.0, 40.0)):
        now[0] = t_in
        log.fault(ev, "inject")
        now[0] = t_out
        log.fault(ev, "recovered", recovery_s=t_out - t_in)
    samples = [(5.0, False), (12.0, True), (15.0, False), (19.0, True), (25.0, False),
               *((30.0 + i / 10, True) for i in range(100))]
    got = availability_by_kind(log.records, samples)
    assert got["leader-kill"] == {"requests": 3, "failed": 1, "availability": 0.6667}
    assert got["leader-partition"] == {"requests": 100, "failed": 0, "availability": 1.0}


def test_leader_of_needs_one_answer_and_agreeing_hints() -> None:
    from .leader_faults import leader_of

    follower = {"leads": False, "code": "UNAVAILABLE", "hint": "gcs-2:6379"}
    assert leader_of({"gcs": follower, "gcs-2": {"leads": True}, "gcs-3": follower}) == "gcs-2"
    silent = {"leads": False, "code": "UNAVAILABLE", "hint": None}
    assert leader_of({"gcs": silent, "gcs-2": {"leads": True}, "gcs-3": {**follower, "hint": ""}}) == "gcs-2"
    assert leader_of({"gcs": {**follower, "hint": "gcs:6379"}, "gcs-2": {"leads": True}}) is None
    assert leader_of({"gcs": {"leads": True}, "gcs-2": {"leads": True}}) is None
    assert leader_of({"gcs": silent, "gcs-2": silent, "write:gcs": {"leads": True}}) is None
