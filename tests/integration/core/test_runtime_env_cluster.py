"""Runtime envs on two nodes: a task or actor that spills to another node finds its
working_dir there (every raylet fetches the package from the GCS KV and sets the env up
itself), and the nodes' envs never mix."""
from __future__ import annotations

import os

import pytest

import ember
from ember.testing import LocalCluster


@pytest.fixture(scope="module")
def cluster():
    c = LocalCluster()
    try:
        c.add_node({"CPU": 1}, is_head=True)
        c.add_node({"CPU": 1, "far": 2})
        ember.init(address=c.gcs_address)
        yield c
    finally:
        ember.shutdown()
        c.shutdown()


@ember.remote
def read(rel: str) -> tuple:
    return ember.get_runtime_context().get_node_id(), open(rel).read(), os.environ.get("EMBER_TEST_RENV")


@ember.remote
class Reader:
    def read(self, rel: str) -> tuple:
        return ember.get_runtime_context().get_node_id(), open(rel).read()


def test_env_is_set_up_on_the_node_that_runs_the_task(cluster, tmp_path):
    (tmp_path / "note.txt").write_text("shipped")
    env = {"working_dir": str(tmp_path), "env_vars": {"EMBER_TEST_RENV": "far"}}
    far = cluster.nodes[1].node_id
    assert ember.get(read.options(runtime_env=env, resources={"far": 1}).remote("note.txt"),
                     timeout=120) == (far, "shipped", "far")
    a = Reader.options(runtime_env=env, resources={"far": 1}).remote()
    assert ember.get(a.read.remote("note.txt"), timeout=120) == (far, "shipped")
    head = cluster.nodes[0].node_id
    assert ember.get(read.options(runtime_env=env).remote("note.txt"), timeout=120)[0] in (head, far)
