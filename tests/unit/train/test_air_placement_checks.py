"""The pure placement checks Train and Tune share: what a cluster can never place (per
strategy), what is missing now, and where a trainer's workers go inside a trial's group."""
from __future__ import annotations

from ember.air.placement import infeasible_reason, missing_now, worker_bundle_offset


def nodes(*cpus: float, **extra: float) -> list[dict]:
    return [{"Alive": True, "Resources": {"CPU": c, **extra}} for c in cpus] + [
        {"Alive": False, "Resources": {"CPU": 64.0}}]


def test_a_bundle_no_node_holds_names_the_resource():
    why = infeasible_reason([{"CPU": 1, "TPU": 1}], "PACK", nodes(4))
    assert why is not None and "TPU=1 (largest node has 0)" in why


def test_pack_and_spread_count_what_the_nodes_hold_together():
    assert infeasible_reason([{"CPU": 1}] * 4, "PACK", nodes(2, 2)) is None
    why = infeasible_reason([{"CPU": 1}] * 3, "SPREAD", nodes(1.5, 1.5))
    assert why is not None and "at most 2 of the 3 bundles" in why  # the sum (3) would fit
    assert infeasible_reason([{"CPU": 1}] * 2, "PACK", nodes()) == "the cluster has no alive node"


def test_strict_pack_needs_one_node_and_strict_spread_distinct_nodes():
    assert infeasible_reason([{"CPU": 1}] * 2, "STRICT_PACK", nodes(1, 1)) is not None
    assert infeasible_reason([{"CPU": 1}] * 2, "STRICT_PACK", nodes(1, 2)) is None
    why = infeasible_reason([{"CPU": 1}] * 4, "STRICT_SPREAD", nodes(8, 8, 8))
    assert why is not None and "STRICT_SPREAD needs 4 distinct nodes" in why
    assert infeasible_reason([{"CPU": 1}] * 3, "STRICT_SPREAD", nodes(1, 1, 1)) is None
    # a GPU bundle must go to the one GPU node, the CPU bundles to the others (a matching)
    mixed = [{"CPU": 1}, {"CPU": 1, "GPU": 1}]
    two = [{"Alive": True, "Resources": {"CPU": 1, "GPU": 1}}, {"Alive": True, "Resources": {"CPU": 1}}]
    assert infeasible_reason(mixed, "STRICT_SPREAD", two) is None
    assert infeasible_reason([{"CPU": 1, "GPU": 1}] * 2, "STRICT_SPREAD", two) is not None


def test_missing_now_names_each_short_resource():
    assert missing_now([{"CPU": 1}] * 2, {"CPU": 0.0}) == "CPU: need 2, available 0"
    assert "not on nodes" in missing_now([{"CPU": 1}], {"CPU": 4.0})


def test_workers_take_the_last_bundles_of_a_trial_group_that_holds_them():
    w = {"CPU": 1.0}
    assert worker_bundle_offset([w, w], w, 2) == 0  # empty head bundle left out of the group
    assert worker_bundle_offset([{"CPU": 2.0}, w, w], w, 2) == 1  # trainer_resources as head
    assert worker_bundle_offset([{"CPU": 1.0}], w, 2) is None  # a small function trial
    assert worker_bundle_offset([w, {"CPU": 0.5}], w, 2) is None
