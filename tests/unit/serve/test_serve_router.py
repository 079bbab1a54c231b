"""RouterCore: power of two choices within max_ongoing_requests, and the queue bound."""
from __future__ import annotations

import random

from ember.serve._private.router_core import RouterCore


def test_prefers_the_less_loaded_of_two():
    r = RouterCore(max_ongoing=100, rng=random.Random(0))
    r.set_replicas(["a", "b"])
    r.inflight["a"] = 5
    assert all(r.choose() == "b" for _ in range(5))  # b climbs to 5; then they alternate
    assert abs(r.inflight["a"] - r.inflight["b"]) <= 1


def test_balances_many_replicas():
    r = RouterCore(max_ongoing=1000, rng=random.Random(1))
    r.set_replicas([f"r{i}" for i in range(8)])
    for _ in range(800):
        r.choose()
    assert max(r.inflight.values()) - min(r.inflight.values()) <= 3


def test_full_replicas_are_not_chosen_and_release_frees_a_slot():
    r = RouterCore(max_ongoing=2)
    r.set_replicas(["a"])
    assert r.choose() == "a" and r.choose() == "a"
    assert r.choose() is None
    r.release("a")
    assert r.choose() == "a"


def test_queue_bound():
    r = RouterCore(max_ongoing=1, max_queued=2)
    assert r.can_queue()
    r.queued = 2
    assert not r.can_queue()
    assert RouterCore(max_queued=-1).can_queue()


def test_replica_set_changes_keep_counts_of_kept_replicas():
    r = RouterCore(max_ongoing=10)
    r.set_replicas(["a", "b"])
    r.inflight.update(a=3, b=4)
    r.set_replicas(["b", "c"])
    assert r.inflight == {"b": 4, "c": 0}
    r.release("a")  # a replica that left: ignored
    assert r.total_inflight() == 4


def test_route_table_longest_prefix_on_whole_segments():
    from ember.serve._private.router import RouteTable

    t = RouteTable()
    t.apply({"version": 3, "apps": {"root": {"route_prefix": "/", "ingress": "root#A"},
                                    "api": {"route_prefix": "/api", "ingress": "api#B"},
                                    "v2": {"route_prefix": "/api/v2", "ingress": "v2#C"},
                                    "internal": {"route_prefix": None, "ingress": "internal#D"}},
             "deployments": {"root#A": {"max_ongoing": 5, "max_queued": -1, "replicas": {"r1": object()}}}})
    assert t.match("/api/v2/x") == ("/api/v2", "v2")
    assert t.match("/api/v2") == ("/api/v2", "v2")
    assert t.match("/api/v20") == ("/api", "api")
    assert t.match("/apix") == ("/", "root")
    assert t.match("/") == ("/", "root")
    assert t.router("root#A").core.max_ongoing == 5 and list(t.router("root#A").handles) == ["r1"]
    assert t.version == 3 and t.ready.is_set()
    t.apply({"version": 4, "apps": {}, "deployments": {}})
    assert t.match("/api") is None and t.router("root#A").handles == {}
