"""Named actors and namespaces as in Ray 2.60 (compatibility issue item 12): an empty name is a
ValueError, `ember.util.list_named_actors(all_namespaces=)` lists live named actors, and
`ember.init(namespace=)` scopes names for the driver and for its tasks, which see the namespace in
their runtime context."""
from __future__ import annotations

import time

import pytest

import ember as ray
from ember.util import list_named_actors


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, namespace="names-x")
    yield
    ray.shutdown()


@ray.remote(num_cpus=0)
class Named:
    def ping(self):
        return "pong"

    def namespace(self):
        return ray.get_runtime_context().namespace


def test_empty_or_non_string_name_is_rejected(cluster):
    with pytest.raises(ValueError, match="empty"):
        Named.options(name="").remote()
    with pytest.raises(TypeError, match="name"):
        Named.options(name=3).remote()
    # Nothing was registered by the failed calls.
    assert list_named_actors() == []


def test_namespace_scopes_names_and_runtime_context_shows_it(cluster):
    assert ray.get_runtime_context().namespace == "names-x"
    assert ray.get_runtime_context().get_namespace() == "names-x"
    a = Named.options(name="a").remote()
    b = Named.options(name="a", namespace="other").remote()  # same name, other namespace
    assert ray.get([a.ping.remote(), b.ping.remote()]) == ["pong", "pong"]
    with pytest.raises(ValueError, match="already exists"):
        Named.options(name="a").remote()
    assert ray.get_actor("a") == a
    assert ray.get_actor("a", namespace="other") == b
    with pytest.raises(ValueError, match="namespace 'nowhere'"):
        ray.get_actor("a", namespace="nowhere")
    # An actor (and a task) runs in the namespace of its job.
    assert ray.get(a.namespace.remote()) == "names-x"

    @ray.remote(num_cpus=0)
    def lookup():
        return ray.get_runtime_context().namespace, ray.get(ray.get_actor("a").ping.remote())

    assert ray.get(lookup.remote()) == ("names-x", "pong")


def test_list_named_actors(cluster):
    keep = [Named.options(name="l1").remote(), Named.options(name="l2", namespace="names-y").remote()]
    Named.remote()  # unnamed actors are not listed
    ray.get([h.ping.remote() for h in keep])
    mine = list_named_actors()
    assert "l1" in mine and "l2" not in mine
    assert all(isinstance(n, str) for n in mine)
    everything = list_named_actors(all_namespaces=True)
    assert {"name": "l1", "namespace": "names-x"} in everything
    assert {"name": "l2", "namespace": "names-y"} in everything
    assert all(set(e) == {"name", "namespace"} for e in everything)
    # A dead actor is not listed any more.
    ray.kill(keep[0])
    deadline = time.monotonic() + 30
    while "l1" in list_named_actors() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "l1" not in list_named_actors()
    assert {"name": "l2", "namespace": "names-y"} in list_named_actors(all_namespaces=True)
