"""scheduling.resolve: how options become a placement (Ray's precedence), without a cluster."""
from __future__ import annotations

import pytest

from ember._private.api.scheduling import DEFAULT, Placement, check_fits, resolve
from ember.util.placement_group import PlacementGroup, PlacementGroupID
from ember.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)

PG = PlacementGroup(PlacementGroupID(b"g" * 18), bundle_cache=[{"CPU": 1.0}, {"CPU": 2.0, "GPU": 1.0}])
PARENT = b"p" * 18


def test_strategy_object_beats_legacy_options_and_context():
    s = PlacementGroupSchedulingStrategy(PG, 1, True)
    assert resolve({"scheduling_strategy": s, "placement_group": None}, "f", PARENT, True) == \
        Placement(pg_id=PG.id.binary(), bundle_index=1, capture=True)
    assert resolve({"placement_group": PG, "placement_group_bundle_index": 0}, "f") == \
        Placement(pg_id=PG.id.binary(), bundle_index=0)


def test_capture_follows_the_parent_unless_opted_out():
    assert resolve({}, "f", PARENT, True) == Placement(pg_id=PARENT, bundle_index=-1, capture=True)
    assert resolve({}, "f", PARENT, False) == DEFAULT
    assert resolve({"scheduling_strategy": "DEFAULT"}, "f", PARENT, True) == DEFAULT
    assert resolve({"placement_group": None}, "f", PARENT, True) == DEFAULT
    assert resolve({"scheduling_strategy": "SPREAD"}, "f", PARENT, True) == Placement(spread=True)


def test_node_affinity():
    s = NodeAffinitySchedulingStrategy("ab" * 14, soft=True)
    assert resolve({"scheduling_strategy": s}, "f") == Placement(node_id="ab" * 14, soft=True)
    with pytest.raises(ValueError, match="needs a node id"):
        NodeAffinitySchedulingStrategy("", soft=False)


@pytest.mark.parametrize("opts, error, match", [
    ({"scheduling_strategy": "PACK"}, ValueError, "must be 'DEFAULT', 'SPREAD'"),
    ({"placement_group": PG, "placement_group_bundle_index": 2}, ValueError, "index 2 .* invalid"),
    ({"placement_group": PG, "placement_group_bundle_index": -2}, ValueError, "index -2 .* invalid"),
    ({"placement_group": "mine"}, TypeError, "must be a PlacementGroup"),
])
def test_bad_options_name_the_problem(opts, error, match):
    with pytest.raises(error, match=match):
        resolve(opts, "f")


def test_requests_must_fit_a_bundle_they_may_use():
    check_fits({"CPU": 2.0}, PG.bundle_cache, -1, "f")
    check_fits({"CPU": 2.0, "GPU": 1.0}, PG.bundle_cache, 1, "f")
    with pytest.raises(ValueError, match="cannot fit into bundle 0"):
        check_fits({"CPU": 2.0}, PG.bundle_cache, 0, "f")
    with pytest.raises(ValueError, match="cannot fit into any bundle"):
        resolve({"placement_group": PG}, "f", request={"GPU": 2.0})
