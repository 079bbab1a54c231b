"""A task whose node dies under it (its raylet killed, the workers with it): once its retries are
used, `get` raises NodeDiedError (not WorkerCrashedError), as Ray does; the rest of the cluster
keeps working."""
from __future__ import annotations

import os
import time

import pytest

import ember
from ember import exceptions as ex
from ember.testing import LocalCluster, wait_for


@pytest.fixture
def two_nodes(monkeypatch):
    monkeypatch.setenv("EMBER_NODE_DEATH_TIMEOUT_S", "2")
    with LocalCluster() as c:
        c.add_node({"CPU": 1}, is_head=True)
        node = c.add_node({"CPU": 1, "b": 1})
        ember.init(address=c.gcs_address)
        try:
            yield c, node
        finally:
            ember.shutdown()


@ember.remote(resources={"b": 1}, max_retries=0)
def stay(pid_file: str) -> int:
    with open(pid_file + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(pid_file + ".tmp", pid_file)
    time.sleep(600)  # its node dies first
    return 0


@ember.remote
def one() -> int:
    return 1


def test_a_task_whose_node_dies_raises_node_died_error(two_nodes, tmp_path):
    c, node = two_nodes
    pid_file = tmp_path / "pid"
    ref = stay.remote(str(pid_file))
    wait_for(lambda: pid_file.exists(), timeout_s=60, what="the task to start on node b")
    c.kill_raylet(node)
    c.nodes.remove(node)
    with pytest.raises(ex.NodeDiedError) as info:
        ember.get(ref, timeout=60)
    assert "died" in str(info.value) and "stay()" in str(info.value), str(info.value)
    assert not isinstance(info.value, ex.WorkerCrashedError)
    assert ember.get(one.remote(), timeout=60) == 1


def test_a_worker_crash_on_a_live_node_is_still_worker_crashed_error(two_nodes, tmp_path):
    pid_file = tmp_path / "pid"
    ref = stay.remote(str(pid_file))
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text(), timeout_s=60,
                       what="the task to start on node b"))
    os.kill(pid, 9)
    with pytest.raises(ex.WorkerCrashedError):
        ember.get(ref, timeout=60)
