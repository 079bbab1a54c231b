"""The autoscaler's loop and cluster config without sockets: an in-memory provider and GCS
replies built by hand; launches, failures, nodes that never join, idle terminations, and the
config's errors."""
from __future__ import annotations

import json
import threading

import pytest

from ember.autoscaler._private import config as config_mod
from ember.autoscaler._private.monitor import Autoscaler, demand_of
from ember.autoscaler._private.providers.base import LaunchError, ProviderNode
from ember_common.proto import autoscaler_pb2

RAW = {"cluster_name": "c", "max_workers": 3, "idle_timeout_s": 10, "launch_timeout_s": 5,
       "provider": {"type": "local"}, "head_node_type": "head",
       "available_node_types": {"head": {"resources": {"CPU": 1}},
                                "small": {"resources": {"CPU": 2}, "max_workers": 3}}}


class Provider:
    """Nodes in memory; `fail` makes create_node raise."""

    def __init__(self) -> None:
        self.nodes: dict[str, ProviderNode] = {}
        self.fail = ""
        self.lock = threading.Lock()
        self.terminated: list[str] = []

    def create_node(self, node_type, resources, node_config):
        if self.fail:
            raise LaunchError(self.fail)
        with self.lock:
            pid = f"p{len(self.nodes) + len(self.terminated)}"
            self.nodes[pid] = ProviderNode(pid, node_type, node_id=f"n-{pid}")

    def terminate_node(self, provider_id):
        self.nodes.pop(provider_id, None)
        self.terminated.append(provider_id)

    def non_terminated_nodes(self):
        return list(self.nodes.values())

    def close(self):
        pass


class Clock:
    t = 0.0

    def __call__(self) -> float:
        return self.t


def node(node_id: str, cpus: float, free: float, *, head=False, idle_s=0.0, queued=0, leased=0):
    n = autoscaler_pb2.NodeLoad(node_id=node_id, is_head=head, total_resources={"CPU": cpus},
                                available_resources={"CPU": free}, idle_duration_s=idle_s, leased=leased,
                                reported=True, raylet_address="127.0.0.1:1")
    if queued:
        n.queued.add(resources={"CPU": 1.0}, count=queued)
    return n


def make(state: autoscaler_pb2.GetClusterResourceStateReply, provider: Provider, clock: Clock,
         published: list) -> Autoscaler:
    return Autoscaler(config_mod.parse(RAW), provider, fetch_state=lambda: state,
                      publish=published.append, has_objects=lambda addr: False, clock=clock, wall=clock)


def test_demand_of_expands_counts():
    s = autoscaler_pb2.GetClusterResourceStateReply(nodes=[node("h", 1, 0, queued=2)])
    s.pending_placement_groups.add(strategy="PACK").bundles.add(resources={"CPU": 2.0}, count=1)
    s.requested.add(resources={"GPU": 1.0}, count=2)
    d = demand_of(s)
    assert d.shapes == [{"CPU": 1.0}] * 2 and d.groups[0].bundles == [{"CPU": 2.0}]
    assert d.requested == [{"GPU": 1.0}] * 2


def test_launch_join_idle_terminate():
    state = autoscaler_pb2.GetClusterResourceStateReply(nodes=[node("h", 1, 0, head=True, queued=3, leased=1)])
    provider, clock, published = Provider(), Clock(), []
    a = make(state, provider, clock, published)
    assert a.update().launch == {"small": 2}
    a.settle()
    assert len(provider.nodes) == 2
    # the nodes joined and the work ran; later they are idle past the timeout
    del state.nodes[:]
    state.nodes.extend([node("h", 1, 1, head=True, idle_s=30), node("n-p0", 2, 2, idle_s=30),
                        node("n-p1", 2, 2, idle_s=3)])
    a.still_idle = lambda addr: False  # the raylet says work just landed: kept this round
    assert a.update().terminate == []
    a.still_idle = lambda addr: True
    d = a.update()
    assert [t.node_id for t in d.terminate] == ["n-p0"]
    a.settle()
    provider.nodes["p0"] = ProviderNode("p0", "small", node_id="n-p0")  # still stopping...
    a._terminating.add("p0")
    assert a.update().terminate == []  # ...so it is neither counted nor removed twice
    a.close()
    assert provider.terminated == ["p0"]
    status = json.loads(published[-1])
    assert status["pending_launches"] == [] and status["recent_failures"] == []


def test_failed_launches_and_nodes_that_never_join_are_recorded():
    state = autoscaler_pb2.GetClusterResourceStateReply(nodes=[node("h", 1, 0, head=True, queued=1, leased=1)])
    provider, clock, published = Provider(), Clock(), []
    provider.fail = "no capacity in zone a"
    a = make(state, provider, clock, published)
    a.update()
    a.settle()
    assert [f["message"] for f in a.failures] == ["no capacity in zone a"]
    # a node the provider started that never shows up in the GCS: launching, then failed
    provider.fail = ""
    provider.nodes["lost"] = ProviderNode("lost", "small", node_id="n-lost")
    assert a.update().launch == {}  # it counts as launching
    (waiting,) = json.loads(published[-1])["pending_launches"]
    assert (waiting["node_type"], waiting["provider_id"], waiting["state"]) == ("small", "lost", "waiting to join")
    clock.t += 6
    a.update()
    a.close()
    assert "lost" in provider.terminated
    assert json.loads(published[-1])["pending_launches"] == []
    assert "did not join the cluster within 5s" in a.failures[-1]["message"]
    assert len(json.loads(published[-1])["recent_failures"]) == 2


def test_config_errors_name_the_key(tmp_path):
    cfg = config_mod.parse(RAW)
    assert [t.name for t in cfg.node_types()] == ["small"] and cfg.idle_timeout_s == 10
    minutes = {k: v for k, v in RAW.items() if k != "idle_timeout_s"} | {"idle_timeout_minutes": 2}
    assert config_mod.parse(minutes).idle_timeout_s == 120
    assert config_mod.parse({**RAW, "setup_commands": []}).max_workers == 3  # empty: asks nothing
    bad = [({**RAW, "setup_commands": ["x"]}, "setup_commands is not supported"),
           ({**RAW, "nodes": 1}, "nodes: unknown key"),
           ({**RAW, "provider": {"type": "aws"}}, "provider.type must be one of"),
           ({**RAW, "head_node_type": "big"}, "head_node_type 'big'"),
           ({**RAW, "available_node_types": {"s": {"resources": {"CPU": 1}, "min_workers": 3,
                                                   "max_workers": 1}}}, r"max_workers \(1\) is below"),
           ({**RAW, "available_node_types": {"s": {"resources": {"CPU": -1}}}}, r"resources.CPU must be"),
           ({**RAW, "available_node_types": {"s": {"min_workers": 1}}}, "resources is required")]
    for raw, msg in bad:
        with pytest.raises(config_mod.ConfigError, match=msg):
            config_mod.parse(raw)
    p = tmp_path / "c.yaml"
    p.write_text("cluster_name: y\nprovider: {type: local}\navailable_node_types:\n  w: {resources: {CPU: 1}, max_workers: 2}\n")
    assert config_mod.load(str(p)).max_workers == 2
    with pytest.raises(config_mod.ConfigError, match="no cluster config"):
        config_mod.load(str(tmp_path / "missing.yaml"))
