"""Bad configuration in the compose cluster: the container exits non-zero with one line naming
the problem, compose keeps restarting it and never reports it healthy; fixing the setting
brings the node back."""
from __future__ import annotations

import json
import os
import subprocess
import time

from .conftest import CORE_SERVICES, Cluster


def error_lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip().startswith("error:")]


def test_gcs_with_unreachable_etcd_exits_with_one_line(cluster: Cluster) -> None:
    r = cluster.run("run --rm --no-deps -T gcs gcs EMBER_GCS_STORAGE=etcd://etcd-nowhere:2379",
                    check=False)
    assert r.returncode != 0
    lines = error_lines(r.stdout + r.stderr)
    assert len(lines) == 1 and "etcd unreachable at etcd-nowhere:2379" in lines[0], r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr


def test_malformed_resources_container_never_healthy(cluster: Cluster) -> None:
    bad = cluster.with_settings('EMBER_WORKER_RESOURCES={"CPU": 2,')
    try:
        bad.run("up -d --no-deps --no-build raylet-worker")
        cid = bad.container("raylet-worker")
        deadline = time.monotonic() + 60
        while True:
            state = json.loads(subprocess.run(["docker", "inspect", cid], capture_output=True,
                                              text=True, check=True).stdout)[0]["State"]
            if state["ExitCode"] != 0 and (state["Restarting"] or state["Status"] == "exited"):
                break
            assert time.monotonic() < deadline, state
            time.sleep(0.2)
        assert state["ExitCode"] == 2
        assert state.get("Health", {}).get("Status") != "healthy"
        assert cluster.health()["raylet-worker"] != "healthy"
        logs = subprocess.run(["docker", "logs", cid], capture_output=True, text=True,
                              errors="replace").stderr
        lines = set(error_lines(logs))   # the same line once per restart
        assert len(lines) == 1 and "EMBER_RESOURCES is not valid JSON" in lines.pop(), logs
    finally:
        cluster.run("up -d --no-deps --no-build raylet-worker")
        cluster.wait_healthy(CORE_SERVICES)


def test_raylet_port_in_use_exits_with_one_line(cluster: Cluster) -> None:
    """The raylet shares its node's network namespace with the objmgr, which holds port 8076."""
    objmgr = cluster.container("objmgr-worker")   # (compose v1's `run` cannot join a network)
    r = subprocess.run(["docker", "run", "--rm", "--network", f"container:{objmgr}",
                        "--ipc", f"container:{objmgr}", "-e", "EMBER_AUTH_TOKEN",  # value from our env
                        f"ember-raylet:{os.environ.get('EMBER_IMAGE_TAG') or 'latest'}", "raylet",
                        "EMBER_RAYLET_PORT=8076"], capture_output=True, text=True, errors="replace",
                       timeout=120)
    assert r.returncode != 0
    lines = error_lines(r.stdout + r.stderr)
    assert len(lines) == 1 and "cannot listen on 0.0.0.0:8076" in lines[0], r.stdout + r.stderr
