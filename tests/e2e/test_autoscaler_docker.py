"""The autoscaler with the Docker provider on the compose cluster: a burst of tasks needing more
CPUs than the cluster has makes it start node containers (objmgr + raylet) on the compose
network, the tasks finish, and the idle nodes are removed after the timeout. The autoscaler runs
on the host and reaches the GCS through its published port; the nodes it starts reach it as
gcs:6379."""
from __future__ import annotations

import ast
import json
import signal
import subprocess
import sys
import threading
import time

from ember_common.autoscaler_client import fetch_cluster_resource_state

from .conftest import DRIVER_PRELUDE

IDLE_S = 10


def _labelled(cluster_name: str) -> list[str]:
    r = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=ember.autoscaler.cluster={cluster_name}"],
                       capture_output=True, text=True, check=True)
    return r.stdout.split()


def _wait(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def test_docker_provider_scales_up_and_down(cluster, tmp_path):
    gcs = f"127.0.0.1:{cluster.gcs_port}"
    name = f"as{cluster.project}"
    config = {"cluster_name": name, "max_workers": 2, "idle_timeout_s": IDLE_S, "update_interval_s": 1,
              "launch_timeout_s": 120,
              "provider": {"type": "docker", "network": f"{cluster.project}_default",
                           "object_store_memory": 134217728, "shm_size": "256m",
                           "env": {"EMBER_NODE_DEATH_TIMEOUT_S": "10"}},
              "available_node_types": {"small": {"resources": {"CPU": 2}, "max_workers": 2}}}
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(config))
    before = len(fetch_cluster_resource_state(gcs).nodes)  # the compose head and worker
    with open(tmp_path / "autoscaler.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "ember.autoscaler._private.main", "--config", str(path),
                                 "--address", gcs], stdout=log, stderr=subprocess.STDOUT)
    driver = subprocess.Popen(
        f"{cluster.compose} exec -T raylet-head python -", shell=True, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        code = DRIVER_PRELUDE + """
@ember.remote(num_cpus=1)
def work():
    time.sleep(20)
    return ember.get_runtime_context().get_node_id()
print(sorted(set(ember.get([work.remote() for _ in range(16)], timeout=300))))
"""
        ended: dict[str, str] = {}  # the driver's stdout and stderr once it ends (read while we watch)
        reader = threading.Thread(target=lambda: ended.update(zip(("out", "err"),
                                                                  driver.communicate(code, timeout=400),
                                                                  strict=True)))
        reader.start()
        _wait(lambda: len(fetch_cluster_resource_state(gcs).nodes) == before + 2, 180, "two nodes added")
        reader.join(420)
        assert not reader.is_alive() and driver.returncode == 0, ended.get("err")
        ran_on = ast.literal_eval(ended["out"].strip().splitlines()[-1])
        assert len(ran_on) >= before + 1, ran_on  # the added nodes ran some of the burst
        _wait(lambda: len(fetch_cluster_resource_state(gcs).nodes) == before, IDLE_S + 90,
              "the idle nodes removed")
        _wait(lambda: not _labelled(name), 60, "the node containers removed")
    finally:
        if driver.poll() is None:
            driver.kill()
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        left = _labelled(name)
        if left:  # leave nothing on the project's network (compose down removes it)
            subprocess.run(["docker", "rm", "-f", *left], capture_output=True)
    log_text = (tmp_path / "autoscaler.log").read_text()
    assert "adding" in log_text and "removing node" in log_text, log_text
