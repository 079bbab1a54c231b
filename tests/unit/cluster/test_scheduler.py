"""decide(): local first, spillback, queueing and infeasibility over a static cluster view."""
from __future__ import annotations

import pytest

from ember_raylet.resources import NodeResources
from ember_raylet.scheduler import Decision, RemoteNode, capacity, decide

LOCAL = "local"


def remote(node_id: str, total: dict[str, float], available: dict[str, float] | None = None,
           alive: bool = True) -> RemoteNode:
    return RemoteNode(node_id, f"{node_id}:1234", dict(total),
                      dict(total if available is None else available), alive)


def cluster(*nodes: RemoteNode) -> dict[str, RemoteNode]:
    return {n.node_id: n for n in nodes}


def busy_local(total: dict[str, float]) -> NodeResources:
    node = NodeResources(total)
    assert node.allocate(dict(total)) is not None
    return node


def test_local_first_when_it_fits_now():
    local = NodeResources({"CPU": 2})
    c = cluster(remote("a", {"CPU": 64}))
    d = decide(local, c, LOCAL, {"CPU": 1}, 0)
    assert d.kind == "local"
    assert d.node is None


def test_local_first_even_after_a_spillback():
    local = NodeResources({"CPU": 2})
    assert decide(local, {}, LOCAL, {"CPU": 2}, 3).kind == "local"


def test_spills_to_a_node_with_availability_now():
    local = busy_local({"CPU": 2})
    a = remote("a", {"CPU": 4}, {"CPU": 0})
    b = remote("b", {"CPU": 4}, {"CPU": 2})
    d = decide(local, cluster(a, b), LOCAL, {"CPU": 1}, 0)
    assert d.kind == "spill"
    assert d.node is b


def test_spill_picks_the_node_with_most_headroom():
    local = busy_local({"CPU": 2})
    small = remote("small", {"CPU": 4}, {"CPU": 2})
    big = remote("big", {"CPU": 16}, {"CPU": 12})
    mid = remote("mid", {"CPU": 8}, {"CPU": 6})
    d = decide(local, cluster(small, big, mid), LOCAL, {"CPU": 1}, 0)
    assert d.kind == "spill"
    assert d.node is big


def test_headroom_is_the_scarcest_requested_resource():
    local = busy_local({"CPU": 2, "GPU": 1})
    # Lots of CPU but only just enough GPU vs. less CPU and more spare GPU.
    cpu_rich = remote("cpu_rich", {"CPU": 64, "GPU": 1}, {"CPU": 64, "GPU": 1})
    gpu_rich = remote("gpu_rich", {"CPU": 8, "GPU": 4}, {"CPU": 8, "GPU": 4})
    d = decide(local, cluster(cpu_rich, gpu_rich), LOCAL, {"CPU": 1, "GPU": 1}, 0)
    assert d.kind == "spill"
    assert d.node is gpu_rich


def test_spill_now_is_preferred_over_queueing_locally():
    local = busy_local({"CPU": 4})
    a = remote("a", {"CPU": 4}, {"CPU": 1})
    d = decide(local, cluster(a), LOCAL, {"CPU": 1}, 0)
    assert d.kind == "spill" and d.node is a


def test_queues_locally_when_nothing_has_room_now_but_local_could_later():
    local = busy_local({"CPU": 4})
    a = remote("a", {"CPU": 8}, {"CPU": 0})
    d = decide(local, cluster(a), LOCAL, {"CPU": 2}, 0)
    assert d.kind == "queue"
    assert d.node is None


def test_queues_locally_when_only_this_node_could_ever_fit():
    local = busy_local({"CPU": 2, "GPU": 1})
    a = remote("a", {"CPU": 32}, {"CPU": 32})
    d = decide(local, cluster(a), LOCAL, {"CPU": 1, "GPU": 1}, 0)
    assert d.kind == "queue"


def test_spills_to_a_node_that_could_fit_later_when_local_never_can():
    local = NodeResources({"CPU": 2})
    a = remote("a", {"CPU": 4}, {"CPU": 0})
    b = remote("b", {"CPU": 1}, {"CPU": 1})
    d = decide(local, cluster(a, b), LOCAL, {"CPU": 3}, 0)
    assert d.kind == "spill"
    assert d.node is a


def test_later_spill_picks_the_largest_total():
    local = NodeResources({"CPU": 1})
    a = remote("a", {"GPU": 2, "CPU": 4}, {"GPU": 0, "CPU": 0})
    b = remote("b", {"GPU": 8, "CPU": 4}, {"GPU": 0, "CPU": 0})
    d = decide(local, cluster(a, b), LOCAL, {"GPU": 2}, 0)
    assert d.kind == "spill"
    assert d.node is b


def test_infeasible_names_the_missing_resource_and_largest_amount():
    local = NodeResources({"CPU": 4, "GPU": 1})
    a = remote("a", {"CPU": 8, "GPU": 2})
    d = decide(local, cluster(a), LOCAL, {"CPU": 1, "GPU": 4}, 0)
    assert d.kind == "infeasible"
    assert d.node is None
    assert "GPU=4" in d.reason
    assert "largest node has 2" in d.reason
    assert "CPU=" not in d.reason  # CPU is not what is missing


def test_infeasible_for_an_unknown_custom_resource():
    local = NodeResources({"CPU": 4})
    d = decide(local, cluster(remote("a", {"CPU": 4})), LOCAL, {"tpu": 1}, 0)
    assert d.kind == "infeasible"
    assert "tpu=1" in d.reason
    assert "largest node has 0" in d.reason


def test_infeasible_when_no_single_node_has_everything():
    local = NodeResources({"CPU": 8})
    a = remote("a", {"CPU": 1, "GPU": 4})
    d = decide(local, cluster(a), LOCAL, {"CPU": 4, "GPU": 1}, 0)
    assert d.kind == "infeasible"
    assert "no single node has all of them" in d.reason


def test_infeasible_with_an_empty_cluster_view():
    local = NodeResources({"CPU": 2})
    d = decide(local, {}, LOCAL, {"CPU": 3}, 0)
    assert d.kind == "infeasible"
    assert "CPU=3 (largest node has 2)" in d.reason


def test_spillback_count_never_spills_again_queues_if_local_can_fit_later():
    local = busy_local({"CPU": 2})
    a = remote("a", {"CPU": 64})  # idle, lots of room
    d = decide(local, cluster(a), LOCAL, {"CPU": 1}, 1)
    assert d.kind == "queue"
    assert d.node is None


def test_spillback_count_never_spills_again_infeasible_if_local_never_fits():
    local = NodeResources({"CPU": 2})
    a = remote("a", {"CPU": 64})
    d = decide(local, cluster(a), LOCAL, {"CPU": 8}, 1)
    assert d.kind == "infeasible"
    assert d.node is None
    # The reason must name what this node lacks (8 CPUs asked, 2 here); node "a" does have all
    # of them, so "no single node has all of them" would be false.
    assert "no single node has all of them" not in d.reason
    assert "CPU=8" in d.reason
    assert "has 2" in d.reason


def test_dead_nodes_are_ignored_for_spill_now():
    local = busy_local({"CPU": 2})
    dead = remote("dead", {"CPU": 64}, alive=False)
    alive = remote("alive", {"CPU": 4}, {"CPU": 1})
    d = decide(local, cluster(dead, alive), LOCAL, {"CPU": 1}, 0)
    assert d.kind == "spill" and d.node is alive


def test_dead_nodes_are_ignored_for_spill_later_and_infeasibility():
    local = NodeResources({"CPU": 2})
    dead = remote("dead", {"CPU": 64}, alive=False)
    d = decide(local, cluster(dead), LOCAL, {"CPU": 8}, 0)
    assert d.kind == "infeasible"
    # The dead node's 64 CPUs do not count as the largest node.
    assert "largest node has 2" in d.reason


def test_the_local_node_in_the_cluster_view_is_not_a_spill_target():
    local = busy_local({"CPU": 2})
    # The GCS view of this node may be stale and still show room.
    me = remote(LOCAL, {"CPU": 2}, {"CPU": 2})
    d = decide(local, cluster(me), LOCAL, {"CPU": 1}, 0)
    assert d.kind == "queue"


def test_decision_defaults():
    d = Decision("local")
    assert d.node is None and d.reason == ""


@pytest.mark.parametrize("spillback_count", [0, 1])
def test_fractional_gpu_fits_locally(spillback_count):
    local = NodeResources({"CPU": 4, "GPU": 1})
    assert local.allocate({"GPU": 0.5}) is not None
    d = decide(local, cluster(remote("a", {"GPU": 4})), LOCAL, {"GPU": 0.5}, spillback_count)
    assert d.kind == "local"


def test_capacity_counts_the_shape_in_every_alive_nodes_totals():
    # what is free now does not matter: the local node is full, a remote one busy
    local = busy_local({"CPU": 2, "memory": 4e9})
    c = cluster(remote("a", {"CPU": 8}, {"CPU": 0}), remote("b", {"CPU": 3, "GPU": 2}),
                remote("dead", {"CPU": 64}, alive=False), remote(LOCAL, {"CPU": 2}))
    assert capacity(local, c, LOCAL, {"CPU": 1}) == 2 + 8 + 3  # the local node counted once
    assert capacity(local, c, LOCAL, {"CPU": 2}) == 1 + 4 + 1
    assert capacity(local, c, LOCAL, {"CPU": 0.5}) == 4 + 16 + 6
    assert capacity(local, c, LOCAL, {"CPU": 1, "GPU": 0.5}) == 3  # only b has GPUs: min(3, 4)
    assert capacity(local, c, LOCAL, {"CPU": 1, "memory": 1e9}) == 2  # only the local node has memory
    assert capacity(local, c, LOCAL, {"CPU": 0.3}) == 6 + 26 + 10  # floors, no float drift


def test_capacity_of_a_shape_that_needs_nothing_is_unbounded():
    local = NodeResources({"CPU": 2})
    assert capacity(local, {}, LOCAL, {}) == 0
    assert capacity(local, {}, LOCAL, {"CPU": 0.0}) == 0


def test_capacity_of_a_shape_no_node_holds_is_zero_leases():
    assert capacity(NodeResources({"CPU": 2}), cluster(remote("a", {"CPU": 4})), LOCAL, {"CPU": 8}) == 0
