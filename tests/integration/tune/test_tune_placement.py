"""Tune trials in real placement groups, on a LocalCluster of three nodes (1, 1 and 2 CPUs: 4 in
all): a STRICT_SPREAD trial's bundles sit on three distinct nodes and the tasks it starts in
bundles 1 and 2 run there; 2-CPU trials never run more than two at a time on 4 CPUs (timestamps
written by the trials); a TorchTrainer-style trainer's workers run in the trial's own group; no
group is left after fit()."""
from __future__ import annotations

import json
import time

import pytest

import ember
from ember import train, tune
from ember.testing import LocalCluster
from ember.train import ScalingConfig
from ember.train.data_parallel_trainer import DataParallelTrainer
from ember.tune import PlacementGroupFactory, Tuner
from ember.util.placement_group import placement_group_table


@pytest.fixture(scope="module")
def cluster():
    c = LocalCluster()
    try:
        for i, cpus in enumerate((1, 1, 2)):
            c.add_node({"CPU": cpus}, is_head=i == 0, num_prestart_workers=1)
        ember.init(address=c.gcs_address)
        yield c
    finally:
        ember.shutdown()
        c.shutdown()


def live_groups() -> dict[str, str]:
    return {k: v["state"] for k, v in placement_group_table().items() if v["state"] != "REMOVED"}


def spread_trial(config):
    from ember.util.placement_group import get_current_placement_group
    from ember.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    @ember.remote(num_cpus=1)
    def node():
        return ember.get_runtime_context().get_node_id()

    pg = get_current_placement_group()
    children = [node.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        pg, placement_group_bundle_index=i)).remote() for i in (1, 2)]
    tune.report({"nodes": [ember.get_runtime_context().get_node_id(), *ember.get(children)],
                 "pg": pg.id.hex()})


def test_a_strict_spread_trial_and_its_tasks_run_on_three_nodes(cluster, tmp_path):
    trainable = tune.with_resources(spread_trial, PlacementGroupFactory(
        [{"CPU": 1}, {"CPU": 1}, {"CPU": 1}], strategy="STRICT_SPREAD"))
    grid = Tuner(trainable, run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0)).fit()
    assert grid.num_errors == 0, grid.errors
    metrics = grid[0].metrics
    assert len(set(metrics["nodes"])) == 3
    assert set(metrics["nodes"]) == {n.node_id for n in cluster.nodes}
    entry = placement_group_table()[metrics["pg"]]
    assert entry["strategy"] == "STRICT_SPREAD" and entry["state"] == "REMOVED"
    assert live_groups() == {}


def timed_trial(config):
    start = time.time()
    time.sleep(1.5)
    with open(f"{config['dir']}/{config['i']}.json", "w") as f:
        json.dump([start, time.time()], f)
    tune.report({"i": config["i"]})


def test_two_cpu_trials_on_four_cpus_run_at_most_two_at_a_time(cluster, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    trainable = tune.with_resources(timed_trial, PlacementGroupFactory([{"CPU": 1}, {"CPU": 1}]))
    grid = Tuner(trainable, param_space={"dir": str(marks), "i": tune.grid_search([0, 1, 2, 3])},
                 run_config=tune.RunConfig(storage_path=str(tmp_path / "r"), verbose=0)).fit()
    assert grid.num_errors == 0, grid.errors
    spans = [json.loads((marks / f"{i}.json").read_text()) for i in range(4)]
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda x: (x[0], x[1]))
    running = peak = 0
    for _, d in edges:
        running += d
        peak = max(peak, running)
    assert peak == 2
    assert live_groups() == {}


def test_a_trainers_workers_run_in_the_trials_group(cluster, tmp_path):
    def loop(config):
        from ember.util.placement_group import get_current_placement_group

        train.report({"pg": get_current_placement_group().id.hex(), "lr": config["lr"]})

    before = set(placement_group_table())
    trainer = DataParallelTrainer(loop, train_loop_config={"lr": 0.1},
                                  scaling_config=ScalingConfig(num_workers=2, placement_strategy="SPREAD"))
    grid = Tuner(trainer, param_space={"train_loop_config": {"lr": tune.grid_search([0.1, 0.2])}},
                 run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0)).fit()
    assert grid.num_errors == 0, grid.errors
    new = set(placement_group_table()) - before
    assert len(new) == 2  # one group per trial: the workers made none of their own
    assert {r.metrics["pg"] for r in grid} == new
    for pg in new:
        entry = placement_group_table()[pg]
        assert entry["strategy"] == "SPREAD" and len(entry["bundles"]) == 2
    assert live_groups() == {}
