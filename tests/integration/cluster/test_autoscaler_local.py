"""The autoscaler end to end with the local process provider: a burst of tasks needing more CPUs
than the cluster has makes it add nodes (real raylet + objmgr processes), the tasks finish, and
the idle nodes are removed after the timeout; request_resources() holds nodes up until cleared;
`ember status` shows the autoscaler's state."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

import ember
from ember.autoscaler.sdk import request_resources
from ember.experimental import internal_kv
from ember.testing import LocalCluster, wait_for
from ember_common.autoscaler_client import KV_NAMESPACE, STATUS_KEY, fetch_cluster_resource_state

IDLE_S = 3.0


@pytest.fixture
def cluster():
    c = LocalCluster()
    try:
        c.add_node({"CPU": 1}, is_head=True)
        ember.init(address=c.gcs_address)
        yield c
    finally:
        ember.shutdown()
        c.shutdown()


def start_autoscaler(tmp_path, gcs_address: str, config: dict) -> subprocess.Popen:
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(config))
    with open(tmp_path / "autoscaler.log", "w") as log:
        return subprocess.Popen([sys.executable, "-m", "ember.autoscaler._private.main", "--config",
                                 str(path), "--address", gcs_address], stdout=log, stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(30)


def alive_nodes() -> list[dict]:
    return [n for n in ember.nodes() if n["Alive"]]


CONFIG = {
    "cluster_name": "t", "max_workers": 2, "idle_timeout_s": IDLE_S, "update_interval_s": 0.5,
    "provider": {"type": "local", "object_store_memory": 64 * 1024 * 1024},
    "head_node_type": "head",
    "available_node_types": {
        "head": {"resources": {"CPU": 1}},
        "small": {"resources": {"CPU": 2}, "min_workers": 0, "max_workers": 2},
    },
}


@ember.remote(num_cpus=1)
def hold(path: str) -> str:
    while not os.path.exists(path):
        time.sleep(0.05)
    return ember.get_runtime_context().get_node_id()


def test_burst_scales_up_then_idle_nodes_go(cluster, tmp_path):
    proc = start_autoscaler(tmp_path, cluster.gcs_address, CONFIG)
    try:
        head = cluster.nodes[0].node_id
        release = str(tmp_path / "go")
        refs = [hold.remote(release) for _ in range(5)]  # 5 CPUs wanted, the head has 1
        # two 2-CPU nodes join (max_workers: no more), and waiting tasks move onto them
        wait_for(lambda: len(alive_nodes()) == 3, timeout_s=90, what="two nodes added")
        wait_for(lambda: sum(n.leased for n in fetch_cluster_resource_state(cluster.gcs_address).nodes) >= 3,
                 timeout_s=60, what="tasks running on the added nodes")
        time.sleep(1.5)  # a few rounds at the maximum: nothing more is launched
        assert len(alive_nodes()) == 3
        out = subprocess.run([sys.executable, "-m", "ember._tools.cli", "status", "--address", cluster.gcs_address],
                             capture_output=True, text=True, timeout=60).stdout
        # both added nodes show under their type (Active, or Idle if the spilled work went to one)
        assert "Active:\n 1 head\n" in out and ("2 small" in out or out.count(" 1 small") == 2), out
        assert "Pending:\n (no pending nodes)" in out, out
        assert "Recent failures:\n (no failures)" in out and "Pending Demands:" in out, out
        open(release, "w").close()
        assert len(set(ember.get(refs, timeout=60)) - {head}) >= 1  # ran on the added nodes
        # nothing runs now: the added nodes go after the idle timeout, the head stays
        wait_for(lambda: [n["NodeID"] for n in alive_nodes()] == [head], timeout_s=IDLE_S + 30,
                 what="the idle nodes removed")
        status = json.loads(internal_kv._internal_kv_get(STATUS_KEY, namespace=KV_NAMESPACE))
        assert status["recent_failures"] == [] and status["pending_launches"] == []
        # request_resources(): a floor on the cluster's size with nothing running, until cleared
        request_resources(num_cpus=3)  # the head's 1 CPU + one 2-CPU node
        wait_for(lambda: len(alive_nodes()) == 2, timeout_s=90, what="a node for request_resources()")
        time.sleep(IDLE_S + 1.5)  # idle past the timeout, but the floor keeps it
        assert len(alive_nodes()) == 2
        request_resources(num_cpus=0)
        wait_for(lambda: [n["NodeID"] for n in alive_nodes()] == [head], timeout_s=IDLE_S + 30,
                 what="the node removed once the request is cleared")
    finally:
        assert stop(proc) == 0, (tmp_path / "autoscaler.log").read_text()
    log = (tmp_path / "autoscaler.log").read_text()
    assert "adding 2 node(s) of type small" in log and log.count("removing node") == 3, log


def test_ember_start_head_with_autoscaling_config(tmp_path):
    """`ember start --head --autoscaling-config` runs the autoscaler with the head (min_workers
    nodes stay however idle); `ember stop` stops it and the nodes it started; a bad config is
    refused before anything starts, and ends the autoscaler process itself with exit code 1."""
    env = {k: v for k, v in os.environ.items() if k not in ("EMBER_ADDRESS", "RAY_ADDRESS")}
    env["EMBER_TEMP_DIR"] = str(tmp_path / "ember-tmp")
    ember = [sys.executable, "-m", "ember._tools.cli"]
    cfg = json.loads(json.dumps(CONFIG))
    cfg["available_node_types"]["small"]["min_workers"] = 1
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    cfg["max_workers"] = -1
    (tmp_path / "bad.json").write_text(json.dumps(cfg))
    r = subprocess.run([*ember, "start", "--head", "--port", "0", "--autoscaling-config", str(tmp_path / "bad.json")],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("ember: error: --autoscaling-config") \
        and "max_workers must be an integer >= 0" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-m", "ember.autoscaler._private.main", "--config", str(tmp_path / "bad.json"),
                        "--address", "127.0.0.1:1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "max_workers must be an integer >= 0" in r.stderr, r.stderr
    r = subprocess.run([*ember, "start", "--head", "--port", "0", "--num-cpus", "1", "--autoscaling-config",
                        str(tmp_path / "c.json")], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    gcs = json.loads((tmp_path / "ember-tmp" / "ember_current_cluster").read_text())["gcs_address"]
    try:
        wait_for(lambda: len(fetch_cluster_resource_state(gcs).nodes) == 2, timeout_s=60,
                 what="the min_workers node")
        time.sleep(IDLE_S + 1.5)  # idle past the timeout, but min_workers keeps it
        assert len(fetch_cluster_resource_state(gcs).nodes) == 2
    finally:
        r = subprocess.run([*ember, "stop"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    wait_for(lambda: not any("ember.autoscaler._private.main" in " ".join(p.cmdline()) and gcs in " ".join(p.cmdline())
                             for p in psutil.process_iter()), timeout_s=20, what="the autoscaler stopped")
