"""The autoscaling policy (ember.autoscaler._private.policy), without sockets: scale-up by bin
packing demand onto node types within min/max workers, the request_resources() floor, pending
placement groups, and scale-down of idle nodes past the timeout."""
from __future__ import annotations

from ember.autoscaler._private.binpack import fit_onto, score
from ember.autoscaler._private.policy import Demand, Node, NodeType, PendingGroup, Policy

SMALL = NodeType("small", {"CPU": 2.0}, min_workers=0, max_workers=10)
LARGE = NodeType("large", {"CPU": 8.0}, min_workers=0, max_workers=10)
GPU = NodeType("gpu", {"CPU": 4.0, "GPU": 1.0}, min_workers=0, max_workers=2)
HEAD = Node("head", "", {"CPU": 2.0}, {"CPU": 0.0}, busy=True)


def policy(*types: NodeType, max_workers: int = 20, idle_timeout_s: float = 60.0) -> Policy:
    return Policy(list(types), max_workers=max_workers, idle_timeout_s=idle_timeout_s)


def worker(node_id: str, t: NodeType, *, free: dict[str, float] | None = None, idle_s: float = 0.0,
           busy: bool = False, has_objects: bool = False, launching: bool = False) -> Node:
    return Node(node_id, t.name, dict(t.resources), dict(t.resources if free is None else free),
                idle_s=idle_s, busy=busy, has_objects=has_objects, launching=launching)


def test_no_demand_no_change():
    d = policy(SMALL).decide([HEAD], Demand())
    assert d.launch == {} and d.terminate == [] and d.infeasible == []


def test_min_workers_are_launched_and_max_workers_caps():
    t = NodeType("small", {"CPU": 2.0}, min_workers=2, max_workers=3)
    assert policy(t).decide([HEAD], Demand()).launch == {"small": 2}
    # a big backlog: up to max_workers of the type, counting the nodes it already has
    d = policy(t).decide([HEAD, worker("w1", t, free={"CPU": 0.0}, busy=True)],
                         Demand(shapes=[{"CPU": 1.0}] * 20))
    assert d.launch == {"small": 2}


def test_cluster_max_workers_caps_every_type():
    d = policy(SMALL, max_workers=3).decide([HEAD], Demand(shapes=[{"CPU": 2.0}] * 10))
    assert d.launch == {"small": 3}


def test_queued_demand_packs_onto_the_fullest_type():
    # three 1-CPU tasks: two small nodes (4 CPUs) pack them better than one 8-CPU node
    d = policy(SMALL, LARGE).decide([HEAD], Demand(shapes=[{"CPU": 1.0}] * 3))
    assert d.launch == {"small": 2}
    # sixteen: two large nodes are full
    d = policy(SMALL, LARGE).decide([HEAD], Demand(shapes=[{"CPU": 1.0}] * 16))
    assert d.launch == {"large": 2}


def test_demand_that_fits_free_resources_launches_nothing():
    nodes = [HEAD, worker("w1", SMALL, free={"CPU": 2.0})]
    assert policy(SMALL).decide(nodes, Demand(shapes=[{"CPU": 1.0}] * 2)).launch == {}
    # a launching node counts whole: the demand waits for it
    nodes = [HEAD, worker("p1", SMALL, free={"CPU": 0.0}, launching=True)]
    assert policy(SMALL).decide(nodes, Demand(shapes=[{"CPU": 1.0}] * 2)).launch == {}
    assert policy(SMALL).decide(nodes, Demand(shapes=[{"CPU": 1.0}] * 3)).launch == {"small": 1}


def test_gpu_work_gets_the_gpu_type_and_cpu_work_does_not():
    d = policy(SMALL, GPU).decide([HEAD], Demand(shapes=[{"CPU": 1.0, "GPU": 1.0}]))
    assert d.launch == {"gpu": 1}
    d = policy(SMALL, GPU).decide([HEAD], Demand(shapes=[{"CPU": 2.0}]))
    assert d.launch == {"small": 1}
    assert score(GPU.resources, [{"CPU": 1.0}])[0] is False


def test_infeasible_shapes_are_reported_not_launched_for():
    d = policy(SMALL).decide([HEAD], Demand(shapes=[{"CPU": 4.0}, {"TPU": 1.0}, {"CPU": 1.0}]))
    assert d.launch == {"small": 1}
    assert d.infeasible == [{"CPU": 4.0}, {"TPU": 1.0}]


def test_upscaling_speed_caps_launches_in_flight():
    p = Policy([NodeType("s", {"CPU": 1.0}, max_workers=100)], max_workers=100, idle_timeout_s=60,
               upscaling_speed=1.0)
    d = p.decide([HEAD], Demand(shapes=[{"CPU": 1.0}] * 50))
    assert d.launch == {"s": 5}  # max(5, 1.0 x one node)
    launching = [worker(f"p{i}", NodeType("s", {"CPU": 1.0}), free={"CPU": 0.0}, launching=True)
                 for i in range(5)]
    assert p.decide([HEAD, *launching], Demand(shapes=[{"CPU": 1.0}] * 50)).launch == {"s": 1}


def test_request_resources_is_a_floor_on_totals_and_bypasses_the_speed_cap():
    busy = worker("w1", SMALL, free={"CPU": 0.0}, busy=True)
    # 4 CPUs requested: head (2) + w1 (2) already hold them in total, busy or not
    assert policy(SMALL).decide([HEAD, busy], Demand(requested=[{"CPU": 1.0}] * 4)).launch == {}
    d = policy(SMALL).decide([HEAD, busy], Demand(requested=[{"CPU": 1.0}] * 20))
    assert d.launch == {"small": 8}


def test_pending_placement_groups():
    p = policy(SMALL, LARGE)
    # STRICT_PACK: the bundles together need one node of 6 CPUs
    d = p.decide([HEAD], Demand(groups=[PendingGroup("STRICT_PACK", [{"CPU": 3.0}, {"CPU": 3.0}])]))
    assert d.launch == {"large": 1}
    # STRICT_SPREAD: three bundles on three distinct nodes, even though one node could hold them
    d = p.decide([HEAD], Demand(groups=[PendingGroup("STRICT_SPREAD", [{"CPU": 1.0}] * 3)]))
    assert sum(d.launch.values()) == 3
    # PACK: bundles are packed like tasks
    d = p.decide([HEAD], Demand(groups=[PendingGroup("PACK", [{"CPU": 1.0}] * 2)]))
    assert d.launch == {"small": 1}


def test_idle_nodes_past_the_timeout_are_terminated():
    nodes = [HEAD, worker("old", SMALL, idle_s=120), worker("young", SMALL, idle_s=10),
             worker("busy", SMALL, idle_s=0, busy=True, free={"CPU": 1.0})]
    d = policy(SMALL).decide(nodes, Demand())
    assert [t.node_id for t in d.terminate] == ["old"]
    assert "idle for 120s" in d.terminate[0].why


def test_scale_down_keeps_min_workers_objects_and_the_requested_floor():
    t = NodeType("small", {"CPU": 2.0}, min_workers=1, max_workers=5)
    nodes = [HEAD, worker("a", t, idle_s=300), worker("b", t, idle_s=200)]
    assert [x.node_id for x in policy(t).decide(nodes, Demand()).terminate] == ["a"]
    # a node holding primary copies of objects stays
    nodes = [HEAD, worker("a", SMALL, idle_s=300, has_objects=True), worker("b", SMALL, idle_s=200)]
    assert [x.node_id for x in policy(SMALL).decide(nodes, Demand()).terminate] == ["b"]
    # request_resources(num_cpus=4): head + one worker hold it, so one of the two goes
    nodes = [HEAD, worker("a", SMALL, idle_s=300), worker("b", SMALL, idle_s=200)]
    d = policy(SMALL).decide(nodes, Demand(requested=[{"CPU": 1.0}] * 4))
    assert [x.node_id for x in d.terminate] == ["a"]


def test_no_scale_down_while_feasible_demand_waits_but_infeasible_does_not_block_it():
    nodes = [HEAD, worker("a", SMALL, idle_s=300, free={"CPU": 2.0})]
    # the demand is a 2-CPU shape and the cluster's max is reached: it must wait for "a"...
    d = policy(SMALL, max_workers=1).decide(nodes, Demand(shapes=[{"CPU": 2.0}] * 2))
    assert d.terminate == []
    # ...while a shape no type can hold does not keep idle nodes alive
    d = policy(SMALL).decide(nodes, Demand(shapes=[{"GPU": 1.0}]))
    assert [x.node_id for x in d.terminate] == ["a"] and d.infeasible == [{"GPU": 1.0}]


def test_fit_onto_first_fit_largest_first():
    nodes = [{"CPU": 3.0}, {"CPU": 2.0}]
    assert fit_onto([{"CPU": 1.0}, {"CPU": 2.0}, {"CPU": 2.0}], nodes) == []
    assert nodes == [{"CPU": 0.0}, {"CPU": 0.0}]
    assert fit_onto([{"CPU": 1.0}] * 2, [{"CPU": 4.0}], distinct=True) == [{"CPU": 1.0}]


def test_an_idle_node_the_demand_is_counted_on_stays():
    # the queued requests wait on a busy node but fit the idle one: it is about to get work
    nodes = [HEAD, worker("busy", SMALL, free={"CPU": 0.0}, busy=True), worker("idle", SMALL, idle_s=300)]
    d = policy(SMALL).decide(nodes, Demand(shapes=[{"CPU": 1.0}] * 2))
    assert d.launch == {} and d.terminate == []
