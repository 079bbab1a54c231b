"""A trial's placement request from its PlacementGroupFactory (or resources dict): the empty
head bundle left out of the group as Ray does, the actor's own share, the reuse key, and what
the cluster can never place."""
from __future__ import annotations

import pytest

from ember import tune
from ember.tune import PlacementGroupFactory
from ember.tune._internal.trial_placement import TrialRequest
from ember.tune.trainable.util import request_of


def fn(config):
    pass


def test_a_resources_dict_is_one_bundle_and_the_default_is_one_cpu():
    assert request_of(fn, {}) == PlacementGroupFactory([{"CPU": 1}])
    req = TrialRequest.of(request_of(tune.with_resources(fn, {"cpu": 2, "gpu": 1}), {}))
    assert req.bundle_dicts == [{"CPU": 2.0, "GPU": 1.0}] and req.head_dict == {"CPU": 2.0, "GPU": 1.0}
    assert req.strategy == "PACK"


def test_an_empty_head_bundle_is_left_out_and_the_actor_holds_nothing():
    req = TrialRequest.of(PlacementGroupFactory([{"CPU": 0}, {"CPU": 1}, {"CPU": 1}], strategy="SPREAD"))
    assert req.bundle_dicts == [{"CPU": 1.0}, {"CPU": 1.0}]
    assert req.head_dict == {} and req.need == {"CPU": 2.0}
    with pytest.raises(ValueError, match="asks for no resources at all"):
        TrialRequest.of(PlacementGroupFactory([{}]))


def test_requests_of_equal_factories_are_equal_keys_for_reuse():
    a = TrialRequest.of(PlacementGroupFactory([{"CPU": 1}, {"CPU": 2}]))
    b = TrialRequest.of(PlacementGroupFactory([{"cpu": 1}, {"CPU": 2.0}]))
    c = TrialRequest.of(PlacementGroupFactory([{"CPU": 1}, {"CPU": 2}], strategy="STRICT_SPREAD"))
    assert a == b and hash(a) == hash(b) and a != c


def test_a_group_the_nodes_can_never_hold_says_why():
    nodes = [{"Alive": True, "Resources": {"CPU": 4.0}}]
    req = TrialRequest.of(PlacementGroupFactory([{"CPU": 1}] * 2, strategy="STRICT_SPREAD"))
    assert "STRICT_SPREAD needs 2 distinct nodes" in (req.infeasible(nodes) or "")
    assert TrialRequest.of(PlacementGroupFactory([{"CPU": 1}] * 2)).infeasible(nodes) is None
