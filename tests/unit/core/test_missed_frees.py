"""MissedFrees: the Frees a node missed while dead, kept by the owner until it is back."""
from __future__ import annotations

import pytest

from ember._private.owner.missed_frees import MissedFrees


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_ids_wait_for_their_node_and_are_taken_once():
    m = MissedFrees(Clock())
    m.missed(["b", "c"], [b"1", b"2"])
    m.missed(["b"], [b"3", b"1"])
    assert len(m) == 5 and sorted(m.nodes()) == ["b", "c"]
    assert m.take(["a", "b"]) == {"b": [b"1", b"2", b"3"]}  # a has nothing; b's ids deduplicated
    assert m.take(["b"]) == {}
    assert m.nodes() == ["c"] and len(m) == 2


def test_a_failed_send_puts_the_ids_back_without_a_new_ttl():
    clock = Clock()
    m = MissedFrees(clock, ttl_s=10)
    m.missed(["b"], [b"1"])
    clock.t += 6
    ids = m.take(["b"])["b"]
    m.missed(["b"], ids)  # the node did not answer yet
    clock.t += 6  # 12 s since b first missed one: gone for good
    assert m.expire() == 1 and len(m) == 0 and m.dropped == 1


def test_a_node_dead_past_the_ttl_is_not_waited_for():
    clock = Clock()
    m = MissedFrees(clock, ttl_s=10)
    m.missed(["b"], [b"1"])
    assert m.take(["b"]) == {"b": [b"1"]}  # sent, but no answer seen yet (alive() not called)
    clock.t += 11
    m.missed(["b"], [b"2"])  # b still dead 11 s after the owner first saw it so
    assert len(m) == 0 and m.nodes() == []


def test_a_node_that_answered_starts_a_new_dead_spell():
    clock = Clock()
    m = MissedFrees(clock, ttl_s=10)
    m.missed(["b"], [b"1"])
    m.take(["b"])
    m.alive("b")  # b answered the resent Free
    clock.t += 60
    m.missed(["b"], [b"2"])  # dead again, much later: a new ttl
    clock.t += 5
    assert m.expire() == 0 and m.take(["b"]) == {"b": [b"2"]}


def test_at_most_max_per_node_ids_wait_the_oldest_go():
    m = MissedFrees(Clock(), max_per_node=3)
    m.missed(["b"], [b"1", b"2"])
    m.missed(["b"], [b"3", b"4", b"5"])
    assert m.take(["b"]) == {"b": [b"3", b"4", b"5"]} and m.dropped == 2


def test_expire_keeps_nodes_within_the_ttl():
    clock = Clock()
    m = MissedFrees(clock, ttl_s=10)
    m.missed(["old"], [b"1", b"2"])
    clock.t += 8
    m.missed(["new"], [b"3"])
    clock.t += 4
    assert m.expire() == 2 and m.nodes() == ["new"]


def test_bad_limits_are_refused():
    with pytest.raises(ValueError, match="ttl_s and max_per_node"):
        MissedFrees(ttl_s=0)
    with pytest.raises(ValueError, match="ttl_s and max_per_node"):
        MissedFrees(max_per_node=0)
