"""Train's worker group in a real placement group, on a LocalCluster of three nodes (real GCS,
raylets and object managers on loopback): STRICT_SPREAD puts the ranks on three distinct nodes,
a group the cluster can never place fails at once, a group the cluster cannot place now fails
within TRAIN_PLACEMENT_GROUP_TIMEOUT_S naming what is missing, and no group outlives fit()."""
from __future__ import annotations

import time

import pytest

import ember
from ember import train
from ember.testing import LocalCluster
from ember.train import RunConfig, ScalingConfig
from ember.train.data_parallel_trainer import DataParallelTrainer
from ember.util.placement_group import placement_group, placement_group_table, remove_placement_group


@pytest.fixture(scope="module")
def cluster():
    c = LocalCluster()
    try:
        for i in range(3):
            c.add_node({"CPU": 2}, is_head=i == 0, num_prestart_workers=1)
        ember.init(address=c.gcs_address)
        yield c
    finally:
        ember.shutdown()
        c.shutdown()


def live_groups() -> dict[str, str]:
    """Groups not removed (hex id -> state)."""
    return {k: v["state"] for k, v in placement_group_table().items() if v["state"] != "REMOVED"}


def where(config):
    from ember.util.placement_group import get_current_placement_group

    pg = get_current_placement_group()
    train.report({"rank": train.get_context().get_world_rank(),
                  "node": ember.get_runtime_context().get_node_id(),
                  "pg": pg.id.hex() if pg is not None else None})


def test_ranks_run_in_their_bundles_on_distinct_nodes(cluster, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()

    def loop(config):
        import json
        import os

        from ember.util.placement_group import get_current_placement_group

        ctx = train.get_context()
        pg = get_current_placement_group()
        with open(os.path.join(config["dir"], f"rank{ctx.get_world_rank()}"), "w") as f:
            json.dump({"node": ember.get_runtime_context().get_node_id(), "pg": pg.id.hex()}, f)
        train.report({"ok": 1})

    DataParallelTrainer(loop, train_loop_config={"dir": str(marks)},
                        scaling_config=ScalingConfig(num_workers=3, placement_strategy="STRICT_SPREAD"),
                        run_config=RunConfig(storage_path=str(tmp_path / "r"))).fit()
    import json

    rows = [json.loads((marks / f"rank{r}").read_text()) for r in range(3)]
    assert len({r["node"] for r in rows}) == 3
    assert len({r["pg"] for r in rows}) == 1
    entry = placement_group_table()[rows[0]["pg"]]
    assert entry["strategy"] == "STRICT_SPREAD" and entry["state"] == "REMOVED"
    assert sorted(entry["bundles_to_node_id"].values()) == sorted(r["node"] for r in rows)
    assert {r["node"] for r in rows} == {n.node_id for n in cluster.nodes}
    assert live_groups() == {}


def test_a_group_the_cluster_can_never_place_fails_at_once(cluster, tmp_path):
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="STRICT_SPREAD needs 4 distinct nodes"):
        DataParallelTrainer(where, scaling_config=ScalingConfig(num_workers=4, placement_strategy="STRICT_SPREAD"),
                            run_config=RunConfig(storage_path=str(tmp_path))).fit()
    assert time.monotonic() - t0 < 10
    assert live_groups() == {}


def test_a_group_that_cannot_be_placed_now_times_out_naming_what_is_missing(cluster, tmp_path, monkeypatch,
                                                                           capsys):
    from ember.train._internal import worker_group

    monkeypatch.setenv("TRAIN_PLACEMENT_GROUP_TIMEOUT_S", "3")
    monkeypatch.setattr(worker_group, "WARN_AFTER_S", 1.0)
    blocker = placement_group([{"CPU": 2}] * 3, strategy="STRICT_SPREAD")  # every CPU of the cluster
    try:
        assert blocker.wait(60)
        t0 = time.monotonic()
        with pytest.raises(train.ControllerError, match=r"not placed within 3 s; missing now: CPU: need 2, available 0"):
            DataParallelTrainer(where, scaling_config=ScalingConfig(num_workers=2),
                                run_config=RunConfig(storage_path=str(tmp_path))).fit()
        assert time.monotonic() - t0 < 20
        assert "waiting up to 3 s for the placement group of 2 workers" in capsys.readouterr().out
        assert live_groups() == {blocker.id.hex(): "CREATED"}
    finally:
        remove_placement_group(blocker)
    # the cluster keeps working: the same run fits once the CPUs are free
    result = DataParallelTrainer(where, scaling_config=ScalingConfig(num_workers=2),
                                 run_config=RunConfig(storage_path=str(tmp_path / "again"))).fit()
    assert result.metrics["pg"] is not None
    assert live_groups() == {}
