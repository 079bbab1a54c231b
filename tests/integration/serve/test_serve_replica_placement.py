"""Where Serve replicas go, on a real 2-node LocalCluster (3 CPUs each): a replica reserves one
CPU by default; `placement_group_bundles` gives each replica its own placement group, which the
tasks it starts run in and which goes with the replica; `max_replicas_per_node` caps the
replicas of a deployment on one node."""
from __future__ import annotations

import time

import pytest

import ember
from ember import serve
from ember.testing import LocalCluster
from ember.util.placement_group import get_current_placement_group, placement_group_table


@pytest.fixture(scope="module")
def cluster():
    c = LocalCluster()
    try:
        c.add_node({"CPU": 3}, is_head=True)
        c.add_node({"CPU": 3})
        ember.init(address=c.gcs_address)
        serve.start(http_options={"host": "127.0.0.1", "port": 0})
        yield c
    finally:
        if ember.is_initialized():
            serve.shutdown()
            ember.shutdown()
        c.shutdown()


def _eventually(check, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


def _free_cpus() -> float:
    return ember.available_resources().get("CPU", 0.0)


@serve.deployment
class Plain:
    def __call__(self) -> str:
        return "ok"


def test_a_replica_reserves_one_cpu_by_default(cluster):
    assert _eventually(lambda: _free_cpus() == 6.0), ember.available_resources()
    assert Plain.ray_actor_options == {"num_cpus": 1}
    h = serve.run(Plain.bind(), name="plain", route_prefix=None)
    assert h.remote().result(timeout_s=60) == "ok"
    assert _eventually(lambda: _free_cpus() == 5.0), ember.available_resources()
    serve.delete("plain")
    assert _eventually(lambda: _free_cpus() == 6.0), ember.available_resources()


@ember.remote
def _child_group() -> str | None:
    pg = get_current_placement_group()
    return pg.id.hex() if pg is not None else None


@serve.deployment(placement_group_bundles=[{"CPU": 1}, {"CPU": 1}], placement_group_strategy="STRICT_PACK")
class Grouped:
    def groups(self) -> dict:
        own = get_current_placement_group()
        return {"replica": own.id.hex() if own is not None else None,
                "child": ember.get(_child_group.remote(), timeout=60),
                "node": ember.get_runtime_context().get_node_id()}


def test_each_replica_gets_a_placement_group_its_tasks_run_in(cluster):
    h = serve.run(Grouped.bind(), name="grouped", route_prefix=None)
    got = h.groups.remote().result(timeout_s=60)
    assert got["replica"] is not None and got["child"] == got["replica"]
    entry = placement_group_table()[got["replica"]]
    assert entry["state"] == "CREATED" and entry["strategy"] == "STRICT_PACK"
    assert entry["name"].startswith("SERVE_REPLICA::grouped#Grouped#")
    assert entry["bundles"] == {0: {"CPU": 1.0}, 1: {"CPU": 1.0}}
    assert set(entry["bundles_to_node_id"].values()) == {got["node"]}  # STRICT_PACK: one node
    assert _eventually(lambda: _free_cpus() == 4.0), ember.available_resources()
    serve.delete("grouped")

    def gone() -> bool:
        e = placement_group_table().get(got["replica"])
        return e is None or e["state"] == "REMOVED"

    assert _eventually(gone), placement_group_table().get(got["replica"])
    assert _eventually(lambda: _free_cpus() == 6.0), ember.available_resources()


def _controller_pid() -> int | None:
    try:
        return ember.get(ember.get_actor("SERVE_CONTROLLER", namespace="serve").ping.remote(), timeout=60)
    except Exception:  # the controller is restarting
        return None


def test_a_restarted_controller_finds_the_replicas_groups_and_removes_them(cluster):
    h = serve.run(Grouped.bind(), name="regroup", route_prefix=None)
    before = h.groups.remote().result(timeout_s=60)["replica"]
    old_pid = _controller_pid()
    ember.kill(ember.get_actor("SERVE_CONTROLLER", namespace="serve"), no_restart=False)
    assert _eventually(lambda: _controller_pid() not in (None, old_pid), 150), "the controller did not restart"
    assert serve.status().applications["regroup"].status == "RUNNING"
    assert serve.get_app_handle("regroup").groups.remote().result(timeout_s=60)["replica"] == before
    serve.delete("regroup")  # the restarted controller knows the group by the replica's name
    e = _eventually(lambda: (placement_group_table().get(before) or {"state": "REMOVED"})["state"] == "REMOVED")
    assert e, placement_group_table().get(before)
    assert _eventually(lambda: _free_cpus() == 6.0), ember.available_resources()


def test_bundles_that_cannot_hold_the_replica_are_refused_as_ray_does(cluster):
    with pytest.raises(ValueError, match="must be a subset of the first bundle. `num_cpus` for the actor is 1"):
        Grouped.options(placement_group_bundles=[{"GPU": 1}])
    with pytest.raises(ValueError, match="Setting max_replicas_per_node is not allowed when "
                                         "placement_group_bundles is provided."):
        Grouped.options(max_replicas_per_node=1)


@serve.deployment(num_replicas=2, max_replicas_per_node=1, ray_actor_options={"num_cpus": 0.5})
class Capped:
    def node(self) -> str:
        return ember.get_runtime_context().get_node_id()


def _replica_nodes(app: str) -> list[str]:
    from ember.util.state import list_actors

    return [a["node_id"] for a in list_actors(filters=[("state", "=", "ALIVE")], limit=1000)
            if a["name"].startswith(f"SERVE_REPLICA::{app}#")]


def test_max_replicas_per_node_spreads_and_caps_replicas(cluster):
    serve.run(Capped.bind(), name="capped", route_prefix=None)
    assert sorted(_replica_nodes("capped")) == sorted(n.node_id for n in cluster.nodes)

    # a third replica has no node left under the cap: two run, the deployment says why it waits
    with pytest.raises(TimeoutError):
        serve.run(Capped.options(num_replicas=3).bind(), name="capped", route_prefix=None, _timeout_s=5)
    st = serve.status().applications["capped"].deployments["Capped"]
    assert st.status == "UPDATING" and "max_replicas_per_node=1" in st.message
    assert sorted(_replica_nodes("capped")) == sorted(n.node_id for n in cluster.nodes)

    serve.run(Capped.options(num_replicas=3, max_replicas_per_node=2).bind(), name="capped", route_prefix=None)
    assert _eventually(lambda: len(_replica_nodes("capped")) == 3)  # the old version's replicas drained
    nodes = _replica_nodes("capped")
    assert max(nodes.count(n) for n in set(nodes)) == 2
    serve.delete("capped")
