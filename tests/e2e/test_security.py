"""Security of the compose cluster: a host driver without the cluster's token (or with a wrong
one) is refused with AuthenticationError while one with it runs a task; the serve-proxy's admin
view needs the token, and so does the dashboard container (its health check is open); every
container, node containers included, runs with no capabilities, no privilege escalation and a
read-only root filesystem, and the node containers still run tasks that write files."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx

from .conftest import Cluster

DRIVER = """
import ember
from ember.exceptions import AuthenticationError
try:
    ember.init(address="127.0.0.1:{port}")
except AuthenticationError as e:
    print("REFUSED", e)
else:
    print("RESULT", ember.get(ember.remote(lambda: 6 * 7).remote(), timeout=120))
    ember.shutdown()
"""


def _host_driver(cluster: Cluster, token: str | None, home: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBER_AUTH")}
    env.update(HOME=home, EMBER_NODE_IP=cluster.gateway)
    if token is not None:
        env["EMBER_AUTH_TOKEN"] = token
    return subprocess.run([sys.executable, "-c", DRIVER.format(port=cluster.gcs_port)], env=env,
                          capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
                          errors="replace")


def test_an_unauthenticated_host_driver_is_refused_and_the_authenticated_one_works(cluster, tmp_path):
    r = _host_driver(cluster, None, str(tmp_path))  # no token anywhere
    assert r.stdout.startswith("REFUSED"), r.stdout + r.stderr
    assert "no token" in r.stdout and "ember get-auth-token" in r.stdout
    r = _host_driver(cluster, "0" * 64, str(tmp_path))
    assert r.stdout.startswith("REFUSED") and "wrong token" in r.stdout, r.stdout + r.stderr
    r = _host_driver(cluster, cluster.token, str(tmp_path))
    assert "RESULT 42" in r.stdout, r.stdout + r.stderr


def test_serve_proxy_admin_view_needs_the_token(cluster):
    url = f"http://127.0.0.1:{cluster.http_port}"
    assert httpx.get(url + "/-/healthz", timeout=30).status_code == 200
    assert httpx.get(url + "/-/routes", timeout=30).status_code == 401
    r = httpx.get(url + "/-/routes", timeout=30, headers={"Authorization": f"Bearer {cluster.token}"})
    assert r.status_code == 200 and isinstance(r.json(), dict)


def test_containers_are_locked_down(cluster):
    ids = cluster.run("ps -q").stdout.split()
    info = json.loads(subprocess.run(["docker", "inspect", *ids], capture_output=True, text=True,
                                     check=True).stdout)
    for c in info:
        name, hc = c["Name"], c["HostConfig"]
        assert hc["CapDrop"] == ["ALL"] and not hc.get("CapAdd"), name
        assert "no-new-privileges:true" in (hc.get("SecurityOpt") or []), name
        assert hc["ReadonlyRootfs"] is True, name
        assert hc["Privileged"] is False, name
        for binding in (hc.get("PortBindings") or {}).values():
            assert all(b["HostIp"] == "127.0.0.1" for b in binding), (name, binding)
        assert "EMBER_AUTH_TOKEN=" not in " ".join(c["Config"].get("Cmd") or []), name


def test_the_dashboard_container_answers_and_needs_the_token(cluster):
    cluster.wait_healthy(["dashboard"])
    url = f"http://127.0.0.1:{cluster.dashboard_port}"
    assert httpx.get(url + "/api/healthz", timeout=30).text == "success"
    assert httpx.get(url + "/api/version", timeout=30).status_code == 401
    assert httpx.get(url + "/api/version", timeout=30, headers={"Authorization": "Bearer " + "0" * 64}).status_code == 403
    bearer = {"Authorization": f"Bearer {cluster.token}"}
    assert httpx.get(url + "/api/version", timeout=30, headers=bearer).json()["ray_version"] == "2.60.0"
    nodes = httpx.get(url + "/api/v0/nodes", timeout=60, headers=bearer).json()
    assert nodes["data"]["result"]["total"] >= 2, nodes  # it reads the cluster as a driver


def test_read_only_node_containers_run_tasks_that_write_scratch_files(cluster):
    """Tasks write scratch files and runtime envs unpack on the tmpfs; the root stays read-only."""
    out = cluster.exec_python("raylet-head", """
import ember, os, tempfile
ember.init()

@ember.remote
def scratch():
    with tempfile.NamedTemporaryFile(dir=None) as f:  # /tmp: the container's tmpfs
        f.write(b"x" * 1024)
        f.flush()
        return os.path.getsize(f.name)

print("RESULT", sum(ember.get([scratch.remote() for _ in range(4)], timeout=120)))
os.makedirs("/tmp/wd", exist_ok=True)
with open("/tmp/wd/data.txt", "w") as f:
    f.write("unpacked on a read-only node")

@ember.remote(runtime_env={"working_dir": "/tmp/wd"})
def read_working_dir():
    return open("data.txt").read()

print("WORKDIR", ember.get(read_working_dir.remote(), timeout=180))
try:
    open("/opt/ember/written-by-a-task", "w")
except OSError as e:
    print("READONLY", e.errno)
""")
    assert "RESULT 4096" in out and "READONLY 30" in out, out  # EROFS
    assert "WORKDIR unpacked on a read-only node" in out, out  # runtime envs unpack to the tmpfs
