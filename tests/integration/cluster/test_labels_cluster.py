"""Node labels and label selectors on a two-node LocalCluster of real processes: the nodes'
labels in the node table, tasks and actors placed by `label_selector` (spilled from the head
to the node that matches), a selector no node matches held as infeasible, then failed with
the selector named; placement group bundles placed by `bundle_label_selector`; and
`ember.init(labels=...)` on an embedded cluster."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import ember
from ember.exceptions import TaskUnschedulableError
from ember.testing import LocalCluster
from ember.util.placement_group import placement_group, placement_group_table, remove_placement_group
from ember.util.scheduling_strategies import PlacementGroupSchedulingStrategy
from ember.util.state import list_actors, list_nodes

T = 60


@pytest.fixture(scope="module")
def cluster():
    mp = pytest.MonkeyPatch()
    mp.setenv("EMBER_INFEASIBLE_TIMEOUT_S", "4")  # the raylets read it at start
    try:
        c = LocalCluster()
        try:
            head = c.add_node({"CPU": 2}, is_head=True, labels={"zone": "a"})
            other = c.add_node({"CPU": 2}, labels={"zone": "b", "tier": "gold"})
            ember.init(address=c.gcs_address)
            yield c, head.node_id, other.node_id
        finally:
            ember.shutdown()
            c.shutdown()
    finally:
        mp.undo()


@ember.remote(num_cpus=0.5)
def where():
    ctx = ember.get_runtime_context()
    return ctx.get_node_id(), ctx.get_node_labels()


@ember.remote(num_cpus=0.5)
class Pinned:
    def node(self):
        return ember.get_runtime_context().get_node_id()


def test_nodes_show_their_labels(cluster):
    _, head, other = cluster
    by_id = {n["NodeID"]: n for n in ember.nodes()}
    assert by_id[head]["Labels"] == {"ray.io/node-id": head, "zone": "a"}
    assert by_id[other]["Labels"] == {"ray.io/node-id": other, "zone": "b", "tier": "gold"}
    rows = {n.node_id: n for n in list_nodes(address=cluster[0].gcs_address)}
    assert rows[other].labels == {"ray.io/node-id": other, "zone": "b", "tier": "gold"}


@pytest.mark.parametrize("selector,on", [
    ({"zone": "b"}, "other"), ({"zone": "!b"}, "head"), ({"tier": "in(silver,gold)"}, "other"),
    ({"tier": "!in(gold)"}, "head"), ({"zone": "a", "tier": "!gold"}, "head")])
def test_tasks_run_where_the_selector_matches(cluster, selector, on):
    _, head, other = cluster
    want = head if on == "head" else other
    got = ember.get([where.options(label_selector=selector).remote() for _ in range(6)], timeout=T)
    assert {node for node, _ in got} == {want}
    assert got[0][1]["ray.io/node-id"] == want


def test_node_id_default_label_selects_a_node(cluster):
    _, _, other = cluster
    node, labels = ember.get(where.options(label_selector={"ray.io/node-id": other}).remote(), timeout=T)
    assert node == other and labels["zone"] == "b"


def test_an_actor_lives_where_the_selector_matches(cluster):
    _, head, other = cluster
    gold = Pinned.options(label_selector={"tier": "gold"}).remote()
    plain = Pinned.options(label_selector={"zone": "a"}).remote()
    assert ember.get(gold.node.remote(), timeout=T) == other
    assert ember.get(plain.node.remote(), timeout=T) == head
    ember.kill(gold)
    ember.kill(plain)


def test_fallback_strategy_is_used_when_no_node_matches_the_selector(cluster):
    _, head, other = cluster
    fallback = [{"label_selector": {"zone": "c"}}, {"label_selector": {"tier": "gold"}}]
    got = ember.get([where.options(label_selector={"zone": "d"}, fallback_strategy=fallback).remote()
                     for _ in range(4)], timeout=T)
    assert {node for node, _ in got} == {other}
    # The primary selector wins when a node matches it.
    node, _ = ember.get(where.options(label_selector={"zone": "a"}, fallback_strategy=fallback).remote(),
                        timeout=T)
    assert node == head
    actor = Pinned.options(label_selector={"zone": "d"}, fallback_strategy=fallback).remote()
    assert ember.get(actor.node.remote(), timeout=T) == other
    (row,) = [r for r in list_actors(address=cluster[0].gcs_address, detail=True)
              if r.state == "ALIVE" and r.label_selector == {"zone": "d"}]
    assert row.fallback_strategy == fallback
    ember.kill(actor)


def test_a_selector_no_node_matches_stays_pending_then_fails_naming_it(cluster):
    ref = where.options(label_selector={"zone": "c"}).remote()
    ready, pending = ember.wait([ref], timeout=2)
    assert not ready and pending == [ref]
    with pytest.raises(TaskUnschedulableError, match=r"label selector \{'zone': 'c'\}"):
        ember.get(ref, timeout=T)
    # The cluster still works.
    assert ember.get(where.options(label_selector={"zone": "a"}).remote(), timeout=T)[1]["zone"] == "a"


def test_bad_selectors_and_unsupported_options_are_named(cluster):
    with pytest.raises(ValueError, match="label_selector of remote function where.*'zone'.*operators"):
        where.options(label_selector={"zone": "notin(a)"})
    with pytest.raises(ValueError, match="key name 'bad key'"):
        Pinned.options(label_selector={"bad key": "a"})
    with pytest.raises(ValueError, match=r"fallback_strategy\[0\].*unsupported option"):
        where.options(fallback_strategy=[{"label_selector": {"zone": "a"}, "memory": 1}])
    with pytest.raises(ValueError, match=r"bundle_label_selector\[0\].*'zone'"):
        placement_group([{"CPU": 0.1}], bundle_label_selector=[{"zone": "in("}])
    with pytest.raises(ValueError, match="one per bundle"):
        placement_group([{"CPU": 0.1}, {"CPU": 0.1}], bundle_label_selector=[{"zone": "a"}])


def test_bundles_are_placed_where_their_selectors_match(cluster):
    _, head, other = cluster
    pg = placement_group([{"CPU": 0.5}, {"CPU": 0.5}], strategy="PACK",
                         bundle_label_selector=[{"zone": "a"}, {"tier": "gold"}])
    assert pg.wait(30)
    assert placement_group_table(pg)["bundles_to_node_id"] == {0: head, 1: other}
    for i, want in ((0, head), (1, other)):
        strategy = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i)
        assert ember.get(where.options(scheduling_strategy=strategy).remote(), timeout=T)[0] == want
    remove_placement_group(pg)


def test_a_bundle_no_node_matches_keeps_its_group_pending(cluster):
    pg = placement_group([{"CPU": 0.5}], bundle_label_selector=[{"zone": "in(c,d)"}])
    assert not pg.wait(2)
    table = placement_group_table(pg)
    assert table["state"] == "PENDING"
    remove_placement_group(pg)


def test_init_labels_label_the_embedded_node(tmp_path):
    script = textwrap.dedent("""
        import ember as ray
        ray.init(num_cpus=1, labels={"env": "dev", "hardware": "mock_gpu"})
        @ray.remote(label_selector={"hardware": "mock_gpu"})
        def matching():
            return ray.get_runtime_context().get_node_labels()
        labels = ray.get(matching.remote(), timeout=60)
        print("LABELS", sorted(labels.items()))
        ready, _ = ray.wait([matching.options(label_selector={"hardware": "real_h100"}).remote()], timeout=2)
        print("PENDING", not ready)
        ray.shutdown()
        try:
            ray.init(num_cpus=1, labels={"ray.io/node-id": "mine"})
        except ValueError as e:
            print("RESERVED", "ray.io/node-id" in str(e))
    """)
    env = dict(os.environ, EMBER_TEMP_DIR=str(tmp_path / "tmp"))
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert "('env', 'dev'), ('hardware', 'mock_gpu'), ('ray.io/node-id'" in r.stdout, r.stdout
    assert "PENDING True" in r.stdout
    assert "RESERVED True" in r.stdout
