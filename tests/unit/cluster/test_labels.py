"""Node labels and label selectors (ember_common.labels) and the raylet's scheduling by them
(scheduler.decide / capacity, LeaseQueue), without sockets."""
from __future__ import annotations

import pytest

from ember_common import labels
from ember_common.labels import InvalidLabelError, matches, parse_cli, parse_selector
from ember_raylet.lease_queue import LeaseQueue, LeaseRequest, Spill
from ember_raylet.resources import NodeResources
from ember_raylet.scheduler import RemoteNode, capacity, decide

# ------------------------------------------------------------------ syntax


@pytest.mark.parametrize("key", ["a", "cpu-family", "a.b_c-d", "ray.io/accelerator-type",
                                 "example.com/zone", "A1", "x" * 63, ("p." * 100) + "q/name"])
def test_valid_keys(key):
    assert labels.key_problem(key) is None


@pytest.mark.parametrize("key,says", [
    ("", "key name ''"), ("-a", "key name '-a'"), ("a-", "key name 'a-'"), ("a b", "key name"),
    ("x" * 64, "key name"), ("/name", "prefix ''"), ("bad_/n", "prefix 'bad_'"),
    ("a..b/n", "prefix 'a..b'"), (("p" * 254) + "/n", "prefix"), (3, "not a string")])
def test_invalid_keys_are_named(key, says):
    problem = labels.key_problem(key)
    assert problem is not None and says in problem


def test_values():
    assert labels.value_problem("k", "") is None
    assert labels.value_problem("k", "H100") is None
    assert "invalid value 'sp ot' of label 'k'" in labels.value_problem("k", "sp ot")
    assert "63 characters" in labels.value_problem("k", "v" * 64)
    assert "not a string" in labels.value_problem("k", 3)


def test_node_labels_validation():
    assert labels.validate_node_labels({"zone": "a", "ray.io/accelerator-type": "L4"}) == {
        "zone": "a", "ray.io/accelerator-type": "L4"}
    with pytest.raises(InvalidLabelError, match="--labels: label 'ray.io/node-id' is set by Ember"):
        labels.validate_node_labels({"ray.io/node-id": "x"}, "--labels")
    assert labels.validate_node_labels({"ray.io/node-id": "x"}, system=True)
    with pytest.raises(InvalidLabelError, match="must be a dict"):
        labels.validate_node_labels(["zone"])
    with pytest.raises(InvalidLabelError, match="the value of label 'zone' is a int"):
        labels.validate_node_labels({"zone": 1})


def test_parse_cli_pairs_and_json():
    assert parse_cli("cpu-family=amd, zone = a") == {"cpu-family": "amd", "zone": "a"}
    assert parse_cli('"region="') == {"region": ""}
    assert parse_cli("") == {}
    assert parse_cli('{"zone": "b"}') == {"zone": "b"}
    with pytest.raises(InvalidLabelError, match="'type=type=A100' is not a key=value pair"):
        parse_cli("type=type=A100")
    with pytest.raises(InvalidLabelError, match="'zone' is not a key=value pair"):
        parse_cli("zone")
    with pytest.raises(InvalidLabelError, match="not valid JSON"):
        parse_cli("{zone: b}")
    with pytest.raises(InvalidLabelError, match="invalid value 'a b'"):
        parse_cli("zone=a b")


def test_parse_file(tmp_path):
    f = tmp_path / "labels.yaml"
    f.write_text('"zone": "a"\ntier: gold\n')
    assert labels.parse_file(str(f)) == {"zone": "a", "tier": "gold"}
    f.write_text("- zone\n")
    with pytest.raises(InvalidLabelError, match="must hold a mapping"):
        labels.parse_file(str(f))
    f.write_text("zone: 3\n")
    with pytest.raises(InvalidLabelError, match="the value of label 'zone' is a int"):
        labels.parse_file(str(f))
    with pytest.raises(InvalidLabelError, match="No such file"):
        labels.parse_file(str(tmp_path / "missing.yaml"))


@pytest.mark.parametrize("expr", ["spot", "!GPU", "213521", "in(A123, B456,C789)", "!in(spot,on-demand)", ""])
def test_valid_selector_expressions(expr):
    assert parse_selector({"k": expr})


@pytest.mark.parametrize("expr,says", [
    ("-spot", "value '-spot'"), ("spot_", "value 'spot_'"), ("in()", "value ''"),
    ("in(spot,", "operators"), ("in(H100, TPU!GPU)", "value 'TPU!GPU'"), ("!!in(a)", "value"),
    ("notin(a)", "operators"), ("!", "value ''"), (3, "not a string")])
def test_invalid_selector_expressions_are_named(expr, says):
    with pytest.raises(InvalidLabelError, match="label_selector") as e:
        parse_selector({"zone": expr})
    assert says in str(e.value) and "'zone'" in str(e.value)


def test_invalid_selector_shapes():
    with pytest.raises(InvalidLabelError, match="must be a dict"):
        parse_selector(["zone"])
    with pytest.raises(InvalidLabelError, match="key name 'bad key'"):
        parse_selector({"bad key": "a"})
    assert parse_selector(None) == () and parse_selector({}) == ()


@pytest.mark.parametrize("selector,node,expected", [
    ({"zone": "a"}, {"zone": "a"}, True),
    ({"zone": "a"}, {"zone": "b"}, False),
    ({"zone": "a"}, {}, False),
    ({"zone": "!a"}, {"zone": "b"}, True),
    ({"zone": "!a"}, {}, True),
    ({"zone": "!a"}, {"zone": "a"}, False),
    ({"zone": "in(a, b)"}, {"zone": "b"}, True),
    ({"zone": "in(a,b)"}, {"zone": "c"}, False),
    ({"zone": "in(a,b)"}, {}, False),
    ({"zone": "!in(a,b)"}, {"zone": "c"}, True),
    ({"zone": "!in(a,b)"}, {}, True),
    ({"zone": "!in(a,b)"}, {"zone": "a"}, False),
    ({"zone": "a", "tier": "gold"}, {"zone": "a", "tier": "gold"}, True),
    ({"zone": "a", "tier": "gold"}, {"zone": "a", "tier": "tin"}, False),
])
def test_matching(selector, node, expected):
    assert matches(node, parse_selector(selector)) is expected


# ------------------------------------------------------------------ scheduling by labels


def node(node_id: str, cpus: float, node_labels: dict[str, str], free: float | None = None) -> RemoteNode:
    return RemoteNode(node_id, f"{node_id}:1", {"CPU": cpus}, {"CPU": cpus if free is None else free},
                      True, node_labels)


SEL = parse_selector({"zone": "b"})


def test_local_match_runs_here():
    d = decide(NodeResources({"CPU": 2}), {"x": node("x", 8, {"zone": "a"})}, "me", {"CPU": 1}, 0,
               selector=SEL, local_labels={"zone": "b"})
    assert d.kind == "local"


def test_no_local_match_spills_to_the_matching_node_even_when_here_is_free():
    cl = {"x": node("x", 8, {"zone": "a"}), "y": node("y", 2, {"zone": "b"}, free=0.0)}
    cl["z"] = node("z", 1, {"zone": "b"})
    d = decide(NodeResources({"CPU": 8}), cl, "me", {"CPU": 1}, 0, selector=SEL, local_labels={"zone": "a"})
    assert d.kind == "spill" and d.node is not None and d.node.node_id == "z"
    # A shape that needs nothing a node runs out of still goes where the labels match.
    d = decide(NodeResources({"CPU": 8}), cl, "me", {}, 0, selector=SEL, local_labels={"zone": "a"})
    assert d.kind == "spill" and d.node is not None and d.node.labels["zone"] == "b"


def test_busy_matching_node_still_gets_it_later():
    cl = {"y": node("y", 2, {"zone": "b"}, free=0.0)}
    d = decide(NodeResources({"CPU": 8}), cl, "me", {"CPU": 1}, 0, selector=SEL, local_labels={})
    assert d.kind == "spill" and d.node is not None and d.node.node_id == "y"


def test_no_matching_node_is_infeasible_naming_the_selector():
    cl = {"x": node("x", 8, {"zone": "a"})}
    d = decide(NodeResources({"CPU": 8}), cl, "me", {"CPU": 1}, 0, selector=SEL, local_labels={"zone": "c"})
    assert d.kind == "infeasible"
    assert "label selector {'zone': 'b'}" in d.reason


def test_matching_node_too_small_is_infeasible_naming_resources():
    cl = {"y": node("y", 1, {"zone": "b"})}
    d = decide(NodeResources({"CPU": 8}), cl, "me", {"CPU": 4}, 0, selector=SEL, local_labels={})
    assert d.kind == "infeasible" and "CPU=4 (largest node has 1)" in d.reason


def test_a_pinned_request_on_a_node_that_does_not_match_is_infeasible():
    d = decide(NodeResources({"CPU": 8}), {}, "me", {"CPU": 1}, 1, selector=SEL, local_labels={"zone": "a"})
    assert d.kind == "infeasible" and "do not match" in d.reason


def test_capacity_counts_matching_nodes_only():
    cl = {"x": node("x", 8, {"zone": "a"}), "y": node("y", 2, {"zone": "b"})}
    local = NodeResources({"CPU": 4})
    assert capacity(local, cl, "me", {"CPU": 1}) == 14
    assert capacity(local, cl, "me", {"CPU": 1}, SEL, {"zone": "a"}) == 2
    assert capacity(local, cl, "me", {"CPU": 1}, SEL, {"zone": "b"}) == 6


def test_lease_queue_holds_an_unmatched_request_until_a_matching_node_joins():
    now = [0.0]
    q = LeaseQueue("me", NodeResources({"CPU": 4}), 60.0, lambda: now[0], labels={"zone": "a"})
    req = LeaseRequest(b"l1", {"CPU": 1}, selector=SEL)
    assert q.submit(req) == "infeasible"
    q.update_node(node("x", 4, {"zone": "c"}))
    assert q.tick() == []
    q.update_node(node("y", 4, {"zone": "b"}))
    out = q.tick()
    assert len(out) == 1 and isinstance(out[0], Spill) and out[0].node.node_id == "y"


def test_lease_queue_fails_an_unmatched_request_after_the_timeout():
    now = [0.0]
    q = LeaseQueue("me", NodeResources({"CPU": 4}), 5.0, lambda: now[0], labels={})
    assert q.submit(LeaseRequest(b"l1", {"CPU": 1}, name="f", selector=SEL)) == "infeasible"
    now[0] = 6.0
    (fail,) = q.tick()
    assert "label selector {'zone': 'b'}" in fail.reason


# ------------------------------------------------------------------ placement group bundles


def test_bundles_go_to_the_nodes_their_selectors_allow():
    from ember_gcs.placement_policy import NoPlacement, Placement, place

    nodes = {"x": {"CPU": 4}, "y": {"CPU": 4}}
    got = place("PACK", {0: {"CPU": 1}, 1: {"CPU": 1}}, nodes, nodes, allowed={1: frozenset({"y"})})
    assert isinstance(got, Placement) and got.nodes[1] == "y"  # PACK gives up one node for the label
    got = place("STRICT_PACK", {0: {"CPU": 1}, 1: {"CPU": 1}}, nodes, nodes, allowed={0: frozenset({"y"})})
    assert isinstance(got, Placement) and set(got.nodes.values()) == {"y"}
    got = place("STRICT_SPREAD", {0: {"CPU": 1}, 1: {"CPU": 1}}, nodes, nodes,
                allowed={0: frozenset({"y"}), 1: frozenset({"x", "y"})})
    assert isinstance(got, Placement) and got.nodes == {0: "y", 1: "x"}
    none = place("SPREAD", {0: {"CPU": 1}}, nodes, nodes, allowed={0: frozenset()})
    assert isinstance(none, NoPlacement) and none.infeasible
    assert "no alive node has labels matching the label selector of bundle 0" in none.reason
    small = place("PACK", {0: {"CPU": 8}}, nodes, {"x": {"CPU": 4}, "y": {"CPU": 16}},
                  allowed={0: frozenset({"x"})})
    assert isinstance(small, NoPlacement) and small.infeasible and "bundle 0 could ever hold" in small.reason
    busy = place("PACK", {0: {"CPU": 2}}, {"x": {"CPU": 4}, "y": {"CPU": 1}}, nodes,
                 allowed={0: frozenset({"y"})})
    assert isinstance(busy, NoPlacement) and not busy.infeasible


def test_pg_manager_matches_bundle_selectors_and_refuses_bad_ones():
    from ember_common.proto import common_pb2
    from ember_common.rpc import InvalidArgument
    from ember_gcs.pg_manager import allowed_nodes, selectors

    spec = common_pb2.PlacementGroupInfo(placement_group_id=b"p" * 18, bundles=[
        common_pb2.Bundle(resources={"CPU": 1}),
        common_pb2.Bundle(resources={"CPU": 1}, label_selector={"zone": "!in(a,c)"})])
    got = allowed_nodes(spec, ["x", "y", "z"], {"x": {"zone": "a"}, "y": {"zone": "b"}})
    assert got == {1: frozenset({"y", "z"})}
    spec.bundles[0].label_selector["zone"] = "in("
    with pytest.raises(InvalidArgument, match=r"bundle_label_selector\[0\]"):
        selectors(spec)


# ------------------------------------------------------------------ fallback_strategy


def test_choose_selector_takes_the_first_one_a_node_can_use():
    from ember_raylet.scheduler import choose_selector

    local = NodeResources({"CPU": 4})
    cl = {"x": node("x", 8, {"zone": "a"}), "y": node("y", 2, {"zone": "b"})}
    zone = {z: parse_selector({"zone": z}) for z in "abcd"}
    assert choose_selector(local, cl, "me", {"CPU": 1}, [zone["c"], zone["b"], zone["a"]], {}) == zone["b"]
    # A matching node too small for the request does not count: the next fallback is taken.
    assert choose_selector(local, cl, "me", {"CPU": 4}, [zone["b"], zone["a"]], {}) == zone["a"]
    assert choose_selector(local, cl, "me", {"CPU": 1}, [zone["c"], zone["d"]], {"zone": "d"}) == zone["d"]
    assert choose_selector(local, cl, "me", {"CPU": 1}, [zone["c"], zone["d"]], {}) == zone["c"]


def test_lease_queue_spills_by_the_fallback_and_counts_its_capacity():
    q = LeaseQueue("me", NodeResources({"CPU": 4}), 60.0, lambda: 0.0, labels={"zone": "a"})
    q.update_node(node("y", 2, {"zone": "b"}))
    req = LeaseRequest(b"l1", {"CPU": 1}, selector=parse_selector({"zone": "c"}),
                       fallbacks=(parse_selector({"zone": "b"}),))
    got = q.submit(req)
    assert isinstance(got, Spill) and got.node.node_id == "y"
    assert q.capacity(req) == 2


def test_fallback_strategy_option_is_checked():
    from ember._private.api.options import fallback_selectors

    assert fallback_selectors([{"label_selector": {"zone": "a"}}, {"label_selector": {}}], "f") == [
        {"zone": "a"}, {}]
    with pytest.raises(ValueError, match=r"fallback_strategy\[0\] of f: unsupported option\(s\) \['num_cpus'\]"):
        fallback_selectors([{"label_selector": {"zone": "a"}, "num_cpus": 1}], "f")
    with pytest.raises(ValueError, match="must be a list"):
        fallback_selectors({"label_selector": {}}, "f")
    with pytest.raises(ValueError, match=r"fallback_strategy\[1\] of f must be a non-empty dict"):
        fallback_selectors([{"label_selector": {}}, {}], "f")
    with pytest.raises(ValueError, match=r"fallback_strategy\[0\] of f.*'zone'"):
        fallback_selectors([{"label_selector": {"zone": "in("}}], "f")
