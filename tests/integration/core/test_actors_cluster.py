"""Actors across drivers, GCS restarts and node failures, on a LocalCluster whose GCS keeps its
tables in a real etcd: detached actors outlive their driver and a GCS restart, non-detached ones
die with their driver, and an actor whose node dies restarts on another node."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import ember
from ember.testing import EtcdProcess, LocalCluster, wait_for
from ember_common.gcs_client import SyncGcsClient
from ember_common.proto import common_pb2

pytestmark = [pytest.mark.chaos, pytest.mark.etcd]

A = common_pb2.ActorInfo
T = 30  # timeout of every ember.get


@pytest.fixture(scope="module")
def cluster():
    mp = pytest.MonkeyPatch()
    mp.setenv("EMBER_NODE_DEATH_TIMEOUT_S", "2")
    try:
        with EtcdProcess() as etcd:
            c = LocalCluster(gcs_storage=etcd.url)
            try:
                c.add_node({"CPU": 1}, is_head=True)
                c.add_node({"CPU": 1, "special": 1})
                yield c
            finally:
                ember.shutdown()
                c.shutdown()
    finally:
        mp.undo()


def _connect(c: LocalCluster) -> None:
    if not ember.is_initialized():
        ember.init(address=c.gcs_address)


def _run_driver(c: LocalCluster, body: str) -> str:
    """Runs `body` in a separate Python driver connected to the cluster; returns its stdout."""
    script = "import os, sys\nimport ember\nember.init(address=sys.argv[1])\n" + textwrap.dedent(body)
    p = subprocess.run([sys.executable, "-c", script, c.gcs_address], capture_output=True, text=True,
                       timeout=90)
    assert p.returncode == 0, f"driver failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    return p.stdout


def _actor_info(c: LocalCluster, actor_id: bytes) -> common_pb2.ActorInfo:
    with SyncGcsClient(c.gcs_address, timeout_s=5) as gcs:
        return gcs.get_actor_info(actor_id)


def _missing(name: str, namespace: str) -> bool:
    try:
        ember.get_actor(name, namespace=namespace)
    except ValueError:
        return True
    return False


COUNTER = """
@ember.remote
class Counter:
    def __init__(self):
        self.n = 0

    def incr(self):
        self.n += 1
        return self.n

    def value(self):
        return self.n
"""


def test_detached_actor_outlives_driver_and_gcs_restart(cluster):
    out = _run_driver(cluster, COUNTER + """
c = Counter.options(name="keeper", namespace="survivors", lifetime="detached").remote()
print("incr", ember.get(c.incr.remote(), timeout=30))
""")
    assert "incr 1" in out
    cluster.kill_gcs()
    cluster.restart_gcs()
    # A new driver (this process) finds the actor with its state intact.
    _connect(cluster)
    keeper = ember.get_actor("keeper", namespace="survivors")
    assert ember.get(keeper.value.remote(), timeout=T) == 1
    assert ember.get(keeper.incr.remote(), timeout=T) == 2
    info = _actor_info(cluster, keeper._ember_actor_id)
    assert info.state == A.ALIVE and info.num_restarts == 0
    ember.kill(keeper)
    wait_for(lambda: _missing("keeper", "survivors"), timeout_s=10, what="the killed actor's name to go")


@pytest.mark.parametrize("exit_how", ["shutdown", "os._exit"])
def test_non_detached_actor_dies_with_its_driver(cluster, exit_how):
    _connect(cluster)
    name = f"ephemeral-{exit_how}"
    exit_line = "os._exit(0)" if exit_how == "os._exit" else "ember.shutdown()"
    out = _run_driver(cluster, COUNTER + f"""
c = Counter.options(name={name!r}, namespace="mortal").remote()
print("incr", ember.get(c.incr.remote(), timeout=30), flush=True)
{exit_line}
""")
    assert "incr 1" in out
    # Gone once the GCS sees the driver go (at once, or after its grace period on a crash).
    wait_for(lambda: _missing(name, "mortal"), timeout_s=15,
             what=f"the non-detached actor to die with its driver ({exit_how})")


def test_actor_on_killed_node_restarts_on_another_node(cluster):
    _connect(cluster)
    second = cluster.nodes[1]

    @ember.remote(resources={"special": 1}, max_restarts=1)
    class Where:
        def __init__(self):
            self.calls = 0

        def node(self):
            self.calls += 1
            return ember.get_runtime_context().get_node_id(), self.calls

    @ember.remote
    def ask(h):
        return ember.get(h.node.remote(), timeout=20)

    w = Where.remote()
    try:
        assert ember.get(w.node.remote(), timeout=T) == (second.node_id, 1)
        third = cluster.add_node({"CPU": 1, "special": 1})
        cluster.kill_raylet(second)
        cluster.nodes.remove(second)
        info = wait_for(lambda: (lambda a: a if a.state == A.ALIVE and a.num_restarts == 1 else None)(
            _actor_info(cluster, w._ember_actor_id)), timeout_s=30, what="the actor to restart")
        assert info.address.node_id == third.node_id
        # A process that never called it reaches the new incarnation (fresh state)...
        assert ember.get(ask.remote(w), timeout=T) == (third.node_id, 1)
        # ... and so does this driver, which called the old one.
        assert ember.get(w.node.remote(), timeout=T) == (third.node_id, 2)
    finally:
        ember.kill(w)
