"""Replica placement without a cluster: the checks of placement_group_bundles /
placement_group_strategy / max_replicas_per_node (Ray's rules and messages), the default of one
CPU per replica, and `choose_node`, the pure core of max_replicas_per_node."""
from __future__ import annotations

import pytest

from ember import serve
from ember.serve._private.placement import NodeView, choose_node, replica_request


@serve.deployment
class D:
    pass


def test_a_replica_reserves_one_cpu_unless_it_says_otherwise():
    assert D.ray_actor_options == {"num_cpus": 1}
    assert D.options(ray_actor_options={"num_gpus": 1}).ray_actor_options == {"num_gpus": 1, "num_cpus": 1}
    assert D.options(ray_actor_options={"num_cpus": 0}).ray_actor_options == {"num_cpus": 0}
    assert D.options(ray_actor_options={"num_cpus": None}).ray_actor_options == {"num_cpus": 1}


@pytest.mark.parametrize("opts, exc, message", [
    ({"placement_group_bundles": [{"GPU": 1}]}, ValueError,
     "subset of the first bundle. `num_cpus` for the actor is 1 but the bundle only has 0 `CPU` specified."),
    ({"placement_group_bundles": [{"CPU": 1}], "ray_actor_options": {"num_gpus": 1}}, ValueError,
     "`num_gpus` for the actor is 1 but the bundle only has 0 `GPU` specified."),
    ({"placement_group_bundles": [{"CPU": 1}, {"disk": 1}], "ray_actor_options": {"resources": {"disk": 1}}},
     ValueError, "`disk` requirement for the actor is 1 but the bundle only has 0 `disk` specified."),
    ({"placement_group_bundles": []}, ValueError, "must be a non-empty list of resource dictionaries"),
    ({"placement_group_bundles": [{"CPU": "1"}]}, ValueError, "must be a non-empty list of resource dictionaries"),
    ({"placement_group_bundles": {"CPU": 1}}, ValueError, "must be a non-empty list of resource dictionaries"),
    ({"placement_group_bundles": [{"CPU": 1}, {"CPU": 0}]}, ValueError, "only 0 values"),
    ({"placement_group_bundles": [{"CPU": 1}, {"CPU": -1}]}, ValueError, ">= 0"),
    ({"placement_group_strategy": "PACK"}, ValueError,
     "If `placement_group_strategy` is provided, `placement_group_bundles` must also be provided."),
    ({"placement_group_bundles": [{"CPU": 1}], "placement_group_strategy": "FAKE"}, ValueError,
     "Invalid placement group strategy 'FAKE'"),
    ({"max_replicas_per_node": 0}, ValueError, r"Invalid max_replicas_per_node 0. .*\[1, 100\]"),
    ({"max_replicas_per_node": 101}, ValueError, "Invalid max_replicas_per_node 101"),
    ({"max_replicas_per_node": 1.5}, TypeError, "for max_replicas_per_node"),
    ({"max_replicas_per_node": 2, "placement_group_bundles": [{"CPU": 1}]}, ValueError,
     "Setting max_replicas_per_node is not allowed when placement_group_bundles is provided."),
])
def test_bad_placement_options_are_refused_as_ray_refuses_them(opts, exc, message):
    with pytest.raises(exc, match=message):
        serve.deployment(**opts)(type("X", (), {}))
    with pytest.raises(exc, match=message):
        D.options(**opts)


def test_good_placement_options_are_kept():
    g = D.options(placement_group_bundles=[{"CPU": 1, "GPU": 1}, {"GPU": 1}], placement_group_strategy="STRICT_PACK",
                  ray_actor_options={"num_gpus": 1})
    assert g.config.placement_group_bundles == [{"CPU": 1, "GPU": 1}, {"GPU": 1}]
    assert g.config.placement_group_strategy == "STRICT_PACK"
    assert D.options(placement_group_bundles=[{"CPU": 1}]).config.placement_group_strategy is None  # PACK then
    assert D.options(max_replicas_per_node=3).config.max_replicas_per_node == 3


def test_replica_request_is_what_the_actor_asks_for():
    assert replica_request({"num_cpus": 1}) == {"CPU": 1.0}
    assert replica_request({"num_cpus": 0, "num_gpus": 0.5, "memory": 2**20, "resources": {"a": 2}}) == \
        {"GPU": 0.5, "memory": float(2**20), "a": 2.0}


def _nodes(**free_cpus: float) -> list[NodeView]:
    return [NodeView(n, {"CPU": c}) for n, c in free_cpus.items()]


def test_choose_node_caps_replicas_per_node_and_spreads():
    nodes = _nodes(a=4, b=4, c=4)
    assert choose_node(nodes, {}, 1, {"CPU": 1}) == "a"  # ties: the node id decides, deterministically
    assert choose_node(nodes, {"a": 1}, 1, {"CPU": 1}) == "b"
    assert choose_node(nodes, {"a": 1, "b": 1}, 1, {"CPU": 1}) == "c"
    assert choose_node(nodes, {"a": 1, "b": 1, "c": 1}, 1, {"CPU": 1}) is None  # every node at the cap
    assert choose_node(nodes, {"a": 1, "b": 1, "c": 1}, 2, {"CPU": 1}) == "a"
    assert choose_node(nodes, {"a": 2, "b": 1}, 2, {"CPU": 1}) == "c"  # fewest replicas of it first


def test_choose_node_needs_the_free_resources_and_prefers_the_freest():
    nodes = [NodeView("a", {"CPU": 0.5}), NodeView("b", {"CPU": 3}), NodeView("c", {"CPU": 2, "GPU": 1})]
    assert choose_node(nodes, {}, 1, {"CPU": 1}) == "b"
    assert choose_node(nodes, {}, 1, {"CPU": 1, "GPU": 1}) == "c"
    assert choose_node(nodes, {"c": 1}, 1, {"GPU": 1}) is None
    assert choose_node(nodes, {}, 1, {"CPU": 4}) is None
    assert choose_node([], {}, 1, {}) is None
