"""Placement groups across jobs and node changes, each test on its own real cluster: detached
groups outlive their job (others are removed with it), a pending group is placed when a node
joins (`ember.wait` on `pg.ready()`), and an actor in a group restarts in the rescheduled bundle
after its node dies."""
from __future__ import annotations

import ember
from ember.testing import LocalCluster, wait_for
from ember.util.placement_group import (
    get_placement_group,
    placement_group,
    placement_group_table,
    remove_placement_group,
)
from ember.util.scheduling_strategies import PlacementGroupSchedulingStrategy


@ember.remote
class Where:
    def node(self) -> str:
        return ember.get_runtime_context().get_node_id()


def in_bundle(pg, index: int = -1) -> PlacementGroupSchedulingStrategy:
    return PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=index)


def test_detached_groups_outlive_their_job_others_do_not():
    with LocalCluster() as c:
        c.add_node({"CPU": 2}, is_head=True, num_prestart_workers=0)
        ember.init(address=c.gcs_address, namespace="pgns")
        try:
            kept = placement_group([{"CPU": 1}], name="kept", lifetime="detached")
            gone = placement_group([{"CPU": 1}], name="gone")
            assert kept.wait(60) and gone.wait(60)
        finally:
            ember.shutdown()
        ember.init(address=c.gcs_address, namespace="pgns")
        try:
            assert get_placement_group("kept") == kept
            wait_for(lambda: placement_group_table(gone)["state"] == "REMOVED",
                     what="the job's group to be removed with its job")
            remove_placement_group(kept)
        finally:
            ember.shutdown()


def test_a_pending_group_is_placed_when_a_node_joins():
    with LocalCluster() as c:
        c.add_node({"CPU": 1}, is_head=True, num_prestart_workers=0)
        ember.init(address=c.gcs_address)
        try:
            pg = placement_group([{"CPU": 2}])
            ready = pg.ready()
            done, pending = ember.wait([ready], timeout=1.5)
            assert (done, pending) == ([], [ready])
            table = placement_group_table(pg)
            assert table["state"] == "PENDING" and "CPU" in table["state_message"]
            big = c.add_node({"CPU": 2}, num_prestart_workers=0)
            done, _ = ember.wait([ready], timeout=60)
            assert done == [ready] and ember.get(ready) == pg
            assert placement_group_table(pg)["bundles_to_node_id"] == {0: big.node_id}
        finally:
            ember.shutdown()


def test_an_actor_in_a_group_restarts_in_the_rescheduled_bundle(monkeypatch):
    monkeypatch.setenv("EMBER_NODE_DEATH_TIMEOUT_S", "2")
    with LocalCluster() as c:
        c.add_node({"CPU": 0}, is_head=True, num_prestart_workers=0)  # the driver's node
        for _ in range(2):
            c.add_node({"CPU": 1}, num_prestart_workers=0)
        ember.init(address=c.gcs_address)
        try:
            pg = placement_group([{"CPU": 1}])
            assert pg.wait(60)
            first = placement_group_table(pg)["bundles_to_node_id"][0]
            a = Where.options(max_restarts=1, max_task_retries=-1,
                              scheduling_strategy=in_bundle(pg, 0)).remote()
            assert ember.get(a.node.remote(), timeout=60) == first
            c.kill_raylet(next(n for n in c.nodes if n.node_id == first))
            other = next(n.node_id for n in c.nodes[1:] if n.node_id != first)

            def moved() -> bool:
                t = placement_group_table(pg)
                return t["state"] == "CREATED" and t["bundles_to_node_id"].get(0) == other

            wait_for(moved, timeout_s=60, what="the bundle to be rescheduled")
            assert ember.get(a.node.remote(), timeout=60) == other
        finally:
            ember.shutdown()
