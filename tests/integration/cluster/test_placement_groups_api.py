"""Placement groups and scheduling strategies through the public API (`ember.util`), against
real clusters of several nodes (a GCS, raylets, object managers, workers): tasks and actors in
bundles land on the bundle's node and are held to its resources, STRICT_SPREAD over 3 nodes,
removal kills the actors and tasks inside and frees the resources, child-task capture, node affinity
hard/soft, SPREAD, named groups, a group that can never fit saying why (table and `ember status`)
and the errors that name the problem (the lifecycle across jobs
and node changes: test_placement_groups_lifecycle.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import ember
from ember.exceptions import ActorUnschedulableError, RayActorError, TaskUnschedulableError
from ember.testing import LocalCluster, process_gone, wait_for
from ember.util.placement_group import (
    PlacementGroup,
    PlacementGroupID,
    get_current_placement_group,
    get_placement_group,
    placement_group,
    placement_group_table,
    remove_placement_group,
)
from ember.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)


@ember.remote(num_cpus=1)
def where(sleep_s: float = 0.0) -> tuple[str, str | None, float, float]:
    """(node id, current group id or None, start, end)."""
    start = time.time()
    time.sleep(sleep_s)
    pg = get_current_placement_group()
    return ember.get_runtime_context().get_node_id(), pg.id.hex() if pg else None, start, time.time()


@ember.remote(num_cpus=1)
def parent() -> tuple[str, str | None]:
    """Submits a child with no strategy of its own: captured or not by this task's group."""
    node, pg, _, _ = ember.get(where.remote())
    return node, pg


@ember.remote
class Where:
    def node(self) -> str:
        return ember.get_runtime_context().get_node_id()

    def group(self) -> str | None:
        pg = get_current_placement_group()
        return pg.id.hex() if pg else None


def cli(cluster: LocalCluster, *args: str) -> str:
    """Runs the installed `ember` command against the cluster; its stdout."""
    exe = os.path.join(os.path.dirname(sys.executable), "ember")
    r = subprocess.run([exe, *args, "--address", cluster.gcs_address], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def in_bundle(pg, index: int = -1, capture: bool = False) -> PlacementGroupSchedulingStrategy:
    return PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=index,
                                            placement_group_capture_child_tasks=capture)


@pytest.fixture(scope="module")
def three_nodes():
    with LocalCluster() as c:
        for i in range(3):
            c.add_node({"CPU": 2}, is_head=i == 0, num_prestart_workers=0)
        ember.init(address=c.gcs_address)
        try:
            yield c
        finally:
            ember.shutdown()


def test_strict_spread_tasks_and_actors_land_on_their_bundles(three_nodes):
    pg = placement_group([{"CPU": 1}] * 3, strategy="STRICT_SPREAD", name="spread3")
    assert ember.get(pg.ready(), timeout=60) == pg
    table = placement_group_table(pg)
    assert table["state"] == "CREATED" and table["strategy"] == "STRICT_SPREAD"
    assert table["bundles"] == {i: {"CPU": 1.0} for i in range(3)}
    placed = table["bundles_to_node_id"]
    assert sorted(placed.values()) == sorted(n.node_id for n in three_nodes.nodes)
    assert pg.bundle_count == 3 and pg.bundle_specs == [{"CPU": 1.0}] * 3
    for i in range(3):
        node, group, _, _ = ember.get(where.options(scheduling_strategy=in_bundle(pg, i)).remote(),
                                      timeout=60)
        assert (node, group) == (placed[i], pg.id.hex())
        # the legacy options say the same
        node, _, _, _ = ember.get(where.options(placement_group=pg, placement_group_bundle_index=i)
                                  .remote(), timeout=60)
        assert node == placed[i]
    actors = [Where.options(scheduling_strategy=in_bundle(pg, i)).remote() for i in range(3)]
    assert ember.get([a.node.remote() for a in actors], timeout=60) == [placed[i] for i in range(3)]
    assert ember.get(actors[0].group.remote(), timeout=60) == pg.id.hex()
    assert get_current_placement_group() is None  # the driver is in no group
    assert placement_group_table()[pg.id.hex()]["name"] == "spread3"
    remove_placement_group(pg)
    wait_for(lambda: placement_group_table(pg)["state"] == "REMOVED", what="removal")


def test_a_bundle_holds_its_tasks_to_its_resources(three_nodes):
    pg = placement_group([{"CPU": 1}], strategy="STRICT_PACK")
    assert pg.wait(60)
    with pytest.raises(ValueError, match="cannot fit into bundle 0"):
        where.options(num_cpus=2, scheduling_strategy=in_bundle(pg, 0)).remote()
    with pytest.raises(ValueError, match="bundle_index 3 .* is invalid"):
        where.options(scheduling_strategy=in_bundle(pg, 3)).remote()
    # Two 1-CPU tasks in a 1-CPU bundle run one after the other (the node has 2 CPUs).
    runs = ember.get([where.options(scheduling_strategy=in_bundle(pg)).remote(1.0) for _ in range(2)],
                     timeout=60)
    (_, _, s0, e0), (_, _, s1, e1) = sorted(runs, key=lambda r: r[2])
    assert s1 >= e0 - 0.05, f"tasks overlapped in a 1-CPU bundle: {runs}"
    remove_placement_group(pg)


def test_removal_kills_the_actors_inside_and_frees_the_resources(three_nodes):
    wait_for(lambda: ember.available_resources().get("CPU") == 6.0, what="an idle cluster")
    pg = placement_group([{"CPU": 2}], strategy="STRICT_PACK")
    assert pg.wait(60)
    wait_for(lambda: ember.available_resources().get("CPU") == 4.0, what="the bundle to be reserved")
    a = Where.options(scheduling_strategy=in_bundle(pg, 0)).remote()
    assert ember.get(a.node.remote(), timeout=60) == placement_group_table(pg)["bundles_to_node_id"][0]
    remove_placement_group(pg)

    def dead() -> bool:
        try:
            ember.get(a.node.remote(), timeout=10)
        except RayActorError:
            return True
        return False

    wait_for(dead, timeout_s=30, what="the actor in the removed group to die")
    wait_for(lambda: ember.available_resources().get("CPU") == 6.0, what="the bundle's CPUs to free")
    with pytest.raises(ValueError, match="does not exist"):
        remove_placement_group(PlacementGroup(PlacementGroupID(bytes(18))))


@ember.remote(num_cpus=1)
def sleeper(marker: str) -> None:
    """Says it started (its pid in marker), then sleeps far longer than any test."""
    with open(marker + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(marker + ".tmp", marker)
    time.sleep(600)


@pytest.mark.parametrize("retries", [0, 3])
def test_removal_kills_the_tasks_running_inside(three_nodes, tmp_path, retries):
    wait_for(lambda: ember.available_resources().get("CPU") == 6.0, what="an idle cluster")
    pg = placement_group([{"CPU": 1}], strategy="STRICT_PACK")
    assert pg.wait(60)
    marker = tmp_path / "started"
    ref = sleeper.options(scheduling_strategy=in_bundle(pg, 0), max_retries=retries).remote(str(marker))
    wait_for(marker.exists, timeout_s=60, what="the task in the bundle to start")
    pid = int(marker.read_text())
    start = time.monotonic()
    remove_placement_group(pg)
    # Killed, not left to sleep: a retry (if any) finds its group gone and fails too.
    with pytest.raises(ember.exceptions.RayError) as info:
        ember.get(ref, timeout=60)
    assert not isinstance(info.value, ember.exceptions.GetTimeoutError), info.value
    assert time.monotonic() - start < 50
    wait_for(lambda: process_gone(pid),
             what="the task's worker to be killed")
    wait_for(lambda: ember.available_resources().get("CPU") == 6.0, what="the bundle's CPU to free")


def test_many_pipelined_groups_are_waited_for_and_removed_in_order(three_nodes):
    pgs = [placement_group([{"CPU": 0.01}]) for _ in range(30)]  # batched creations
    assert all(pg.wait(60) for pg in pgs)
    assert all(placement_group_table(pg)["state"] == "CREATED" for pg in pgs)
    for pg in pgs:
        remove_placement_group(pg)  # batched removals, after their creations
    assert all(placement_group_table(pg)["state"] == "REMOVED" for pg in pgs)
    # A wait's reply saw `other` CREATED; removed since by this process, it is not ready.
    first, other = placement_group([{"CPU": 0.01}]), placement_group([{"CPU": 0.01}])
    assert first.wait(60)
    remove_placement_group(other)
    assert not other.wait(1)
    remove_placement_group(first)
    wait_for(lambda: ember.available_resources().get("CPU") == 6.0, what="every bundle released")


def test_child_tasks_are_captured_only_when_asked(three_nodes):
    pg = placement_group([{"CPU": 2}], strategy="STRICT_PACK")
    assert pg.wait(60)
    node = placement_group_table(pg)["bundles_to_node_id"][0]
    child_node, child_pg = ember.get(parent.options(scheduling_strategy=in_bundle(pg, 0, capture=True))
                                     .remote(), timeout=60)
    assert (child_node, child_pg) == (node, pg.id.hex())
    _, child_pg = ember.get(parent.options(scheduling_strategy=in_bundle(pg, 0)).remote(), timeout=60)
    assert child_pg is None
    remove_placement_group(pg)


@ember.remote(num_cpus=1)
def fills_its_bundle(pg: PlacementGroup) -> int:
    """Blocks in get on a child that needs the very CPU this task holds in the bundle."""
    return ember.get(where.options(scheduling_strategy=in_bundle(pg, 0)).remote(), timeout=30)[0] != ""


def test_a_task_blocked_in_get_lends_its_bundles_cpu_to_a_child_in_the_same_bundle(three_nodes):
    """Ray lends a blocked task's bundle CPUs: a child scheduled into the same one-CPU bundle runs
    while its parent waits for it (instead of both waiting for ever)."""
    pg = placement_group([{"CPU": 1}])
    assert pg.wait(60)
    assert ember.get(fills_its_bundle.options(scheduling_strategy=in_bundle(pg, 0)).remote(pg), timeout=60)
    assert ember.get(fills_its_bundle.options(scheduling_strategy=in_bundle(pg, 0)).remote(pg), timeout=60)
    remove_placement_group(pg)


def test_node_affinity_hard_and_soft_and_spread(three_nodes):
    for n in three_nodes.nodes:
        hard = NodeAffinitySchedulingStrategy(n.node_id, soft=False)
        assert ember.get(where.options(scheduling_strategy=hard).remote(), timeout=60)[0] == n.node_id
        actor = Where.options(scheduling_strategy=hard).remote()
        assert ember.get(actor.node.remote(), timeout=60) == n.node_id
        ember.kill(actor)
    unknown = "ab" * 14
    with pytest.raises(TaskUnschedulableError, match=f"names node {unknown}, which is unknown"):
        ember.get(where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(unknown, soft=False))
                  .remote(), timeout=60)
    with pytest.raises(ActorUnschedulableError, match="which is unknown"):
        Where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(unknown, soft=False)).remote()
    soft = NodeAffinitySchedulingStrategy(unknown, soft=True)
    assert ember.get(where.options(scheduling_strategy=soft).remote(), timeout=60)[0] in {
        n.node_id for n in three_nodes.nodes}
    spread = ember.get([where.options(scheduling_strategy="SPREAD").remote(3.0) for _ in range(3)],
                       timeout=60)
    assert len({r[0] for r in spread}) == 3, spread


def test_named_groups_and_errors_naming_the_problem(three_nodes):
    pg = placement_group([{"CPU": 1}], name="named-pg")
    assert pg.wait(60)
    got = get_placement_group("named-pg")
    assert got == pg and got.bundle_specs == [{"CPU": 1.0}]
    with pytest.raises(ValueError, match="already|exists|taken"):
        placement_group([{"CPU": 1}], name="named-pg")
    with pytest.raises(ValueError, match="Failed to look up placement group with name: nope"):
        get_placement_group("nope")
    waiting = placement_group([{"CPU": 64}], name="too-big")
    wait_for(lambda: placement_group_table(waiting)["state_message"].startswith("infeasible"),
             what="the GCS to judge the group infeasible")
    never = placement_group_table(waiting)
    assert never["state"] == "PENDING" and not waiting.wait(0.1)
    assert "no node could ever hold the bundle {'CPU': 64.0}" in never["state_message"], never
    listed = cli(three_nodes, "list", "placement-groups", "--detail")
    row = next(line for line in listed.splitlines() if line.startswith(pg.id.hex()))
    assert row.split()[1:5] == ["named-pg", "CREATED", "PACK", "job"], listed
    assert f"0:CPU=1@{placement_group_table(pg)['bundles_to_node_id'][0][:8]}" in row
    assert "too-big" in listed and "PENDING" in listed and "CPU" in listed.split("too-big")[1]
    status = cli(three_nodes, "status")
    assert "Placement groups: 1 CREATED, 1 PENDING" in status, status
    assert f"{waiting.id.hex()[:12]}  infeasible: no node could ever hold the bundle" in status, status
    remove_placement_group(pg)
    remove_placement_group(waiting)


@pytest.mark.parametrize("kwargs, match", [
    ({"bundles": []}, "cannot contain an empty list"),
    ({"bundles": [{"CPU": 0}]}, "only 0 values"),
    ({"bundles": [{}]}, "empty dictionary"),
    ({"bundles": [{"CPU": -1}]}, "must be a number >= 0"),
    ({"bundles": [{"CPU": 1}], "strategy": "TIGHT"}, "Invalid placement group strategy 'TIGHT'"),
    ({"bundles": [{"CPU": 1}], "lifetime": "forever"}, "either `None` or 'detached'"),
])
def test_validation_errors_are_value_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        placement_group(**kwargs)
