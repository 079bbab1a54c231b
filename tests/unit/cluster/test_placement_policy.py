"""place(): the four strategies over a static cluster view; infeasible vs waiting."""
from __future__ import annotations

import pytest

from ember_gcs.placement_policy import NoPlacement, Placement, place


def nodes(**cpus: float) -> dict[str, dict[str, float]]:
    return {n: {"CPU": c} for n, c in cpus.items()}


def b(*cpus: float) -> dict[int, dict[str, float]]:
    return {i: {"CPU": c} for i, c in enumerate(cpus)}


def test_strict_pack_puts_every_bundle_on_one_node_with_most_room():
    avail = nodes(a=2, b=8, c=4)
    got = place("STRICT_PACK", b(1, 2, 1), avail, avail)
    assert isinstance(got, Placement) and set(got.nodes.values()) == {"b"}


def test_strict_pack_waits_when_only_the_totals_fit_and_is_infeasible_otherwise():
    got = place("STRICT_PACK", b(2, 2), nodes(a=1, b=3), nodes(a=4, b=4))
    assert isinstance(got, NoPlacement) and not got.infeasible and "waiting" in got.reason
    got = place("STRICT_PACK", b(2, 2), nodes(a=3, b=3), nodes(a=3, b=3))
    assert isinstance(got, NoPlacement) and got.infeasible and "STRICT_PACK needs one node" in got.reason


def test_strict_spread_uses_distinct_nodes_or_says_how_many_it_needs():
    avail = nodes(a=2, b=2, c=2)
    got = place("STRICT_SPREAD", b(1, 1, 1), avail, avail)
    assert isinstance(got, Placement) and sorted(got.nodes.values()) == ["a", "b", "c"]
    got = place("STRICT_SPREAD", b(1, 1, 1, 1), avail, avail)
    assert isinstance(got, NoPlacement) and got.infeasible and "needs 4 different nodes" in got.reason


def test_strict_spread_places_large_bundles_first():
    avail = nodes(a=1, b=4)
    got = place("STRICT_SPREAD", b(1, 4), avail, avail)
    assert isinstance(got, Placement) and got.nodes == {0: "a", 1: "b"}


def test_strict_spread_avoids_nodes_of_bundles_already_placed():
    avail = nodes(a=4, b=4, c=4)
    got = place("STRICT_SPREAD", {1: {"CPU": 1}}, avail, avail, fixed={0: "a", 2: "b"})
    assert isinstance(got, Placement) and got.nodes == {1: "c"}


def test_pack_prefers_one_node_then_fewest_nodes():
    avail = nodes(a=2, b=3)
    got = place("PACK", b(1, 1), avail, avail)
    assert isinstance(got, Placement) and len(set(got.nodes.values())) == 1
    got = place("PACK", b(2, 2, 1), avail, avail)  # 5 CPUs: must use both, packs the rest
    assert isinstance(got, Placement)
    used = {n: sum(1 for v in got.nodes.values() if v == n) for n in "ab"}
    assert used == {"a": 1, "b": 2} or used == {"a": 2, "b": 1}


def test_spread_spreads_then_doubles_up():
    avail = nodes(a=4, b=4)
    got = place("SPREAD", b(1, 1), avail, avail)
    assert isinstance(got, Placement) and sorted(got.nodes.values()) == ["a", "b"]
    got = place("SPREAD", b(1, 1, 1), avail, avail)
    assert isinstance(got, Placement) and sorted(got.nodes.values()).count("a") in (1, 2)


def test_a_bundle_no_node_could_hold_is_infeasible_naming_it():
    got = place("PACK", {0: {"GPU": 1}}, nodes(a=4), nodes(a=4))
    assert isinstance(got, NoPlacement) and got.infeasible and "{'GPU': 1}" in got.reason
    got = place("SPREAD", b(1), {}, {})
    assert isinstance(got, NoPlacement) and "no alive nodes" in got.reason


def test_unknown_strategy():
    with pytest.raises(ValueError, match="unknown placement strategy 'RANDOM'"):
        place("RANDOM", b(1), nodes(a=1), nodes(a=1))
