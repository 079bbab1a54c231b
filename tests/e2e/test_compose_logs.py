"""Logs from every node under compose: what a task prints in the worker node's container is
listed and read by the dashboard (through that node's raylet) and by `ember logs` in the head's
container."""
from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from typing import Any

from .conftest import DRIVER_PRELUDE, Cluster


def _get(cluster: Cluster, path: str) -> Any:
    req = urllib.request.Request(f"http://127.0.0.1:{cluster.dashboard_port}{path}",
                                 headers={"Authorization": f"Bearer {cluster.token}"})
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=30) as r:
        body = r.read()
    return json.loads(body) if path.startswith("/api/logs?") or path == "/api/logs" else body.decode()


def test_the_worker_nodes_print_is_on_the_dashboard_and_in_ember_logs(cluster: Cluster) -> None:
    out = cluster.exec_python("raylet-head", DRIVER_PRELUDE + """
import os
from ember.util.scheduling_strategies import NodeAffinitySchedulingStrategy
head = ember.get_runtime_context().get_node_id()  # the driver runs on the head's container
other = next(n["NodeID"] for n in ember.nodes() if n["Alive"] and n["NodeID"] != head)
@ember.remote
def shout():
    print("compose logs e2e line", flush=True)
    return os.getpid()
pid = ember.get(shout.options(scheduling_strategy=NodeAffinitySchedulingStrategy(other, soft=False)).remote())
print("RESULT", other, pid)
""")
    _, other, pid_text = next(ln for ln in out.splitlines() if ln.startswith("RESULT ")).split()
    pid = int(pid_text)
    deadline = time.monotonic() + 30
    while True:
        nodes = {n["node_id"]: n for n in _get(cluster, "/api/logs")["nodes"]}
        if other in nodes and any(f["name"].startswith("worker-") for f in nodes[other]["files"]):
            break
        assert time.monotonic() < deadline, nodes
        time.sleep(0.5)
    assert len(nodes) == 2 and all(n["error"] is None for n in nodes.values())
    texts = [_get(cluster, f"/api/logs/file?node_id={other}&name={urllib.parse.quote(f['name'])}")
             for f in nodes[other]["files"] if f["name"].startswith("worker-") and f["name"].endswith(".out")]
    assert any("compose logs e2e line" in t for t in texts)
    # `ember logs` in the head's container reads the worker node's file through that node's raylet.
    r = cluster.run(f"exec -T raylet-head python -m ember.scripts logs worker --pid {pid} --node-id {other}")
    assert "compose logs e2e line" in r.stdout, r.stdout + r.stderr
