"""Serve on a multi-node LocalCluster: replicas on another node, and applications that outlive
the driver that deployed them (the controller and replicas are detached actors)."""
from __future__ import annotations

import os

import httpx
import pytest

import ember
from ember import serve
from ember.serve import api as serve_api
from ember.testing import LocalCluster


@pytest.fixture(scope="module")
def cluster():
    c = LocalCluster()
    try:
        c.add_node({"CPU": 1}, is_head=True)
        c.add_node({"CPU": 1, "special": 1})
        yield c
    finally:
        if ember.is_initialized():
            ember.shutdown()
        c.shutdown()


@serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 0.5, "resources": {"special": 0.5}})
class Where:
    def __call__(self, request):
        return {"node": ember.get_runtime_context().get_node_id(), "pid": os.getpid()}


def test_app_outlives_its_driver_and_runs_on_the_other_node(cluster):
    ember.init(address=cluster.gcs_address)
    serve.run(Where.bind(), name="where", route_prefix="/where", host="127.0.0.1", port=0)
    host, port = serve_api.proxy_address()
    special = cluster.nodes[1].node_id
    assert httpx.get(f"http://{host}:{port}/where", timeout=30).json()["node"] == special
    ember.shutdown()  # the deploying driver goes away

    ember.init(address=cluster.gcs_address)
    try:
        h = serve.get_app_handle("where")
        resp = h.remote(None).result(timeout_s=60)
        assert resp["node"] == special
        assert httpx.get(f"http://{host}:{port}/where", timeout=30).status_code == 200
        assert serve.status().applications["where"].status == "RUNNING"
    finally:
        serve.shutdown()
        ember.shutdown()
