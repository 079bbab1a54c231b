"""etcd is the GCS's alone (docs/security.md): on the compose cluster a container on the main network
cannot reach etcd, by name or by address; a container put on etcd's own network but holding no
credentials is refused every read and write (a pickled function in `kv:fun` included); a GCS
without etcd's password, or with a wrong one, stops with one line naming EMBER_ETCD_PASSWORD;
and the cluster, whose GCS holds the password, works and keeps its state in etcd."""
from __future__ import annotations

import json
import os
import subprocess

from .conftest import Cluster

# Run in a container: tries etcd by name, then at the address given; prints one JSON line.
REACH = r"""
import json, socket, sys
out = {}
try:
    out["resolved"] = socket.gethostbyname("etcd")
except OSError as e:
    out["resolved"] = None
s = socket.socket()
s.settimeout(3)
try:
    s.connect((sys.argv[1], 2379))
    out["connected"] = True
except OSError as e:
    out["connected"] = False
    out["error"] = type(e).__name__
finally:
    s.close()
print(json.dumps(out))
"""

# Run in a container on etcd's network: etcd's JSON gateway, anonymously or with a password.
ETCD_CLIENT = r"""
import base64, json, sys, urllib.error, urllib.request
base = "http://etcd:2379/v3/"
def call(path, body, token=None):
    headers = {"Content-Type": "application/json", **({"Authorization": token} if token else {})}
    req = urllib.request.Request(base + path, json.dumps(body).encode(), headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        return json.loads(e.read())
b64 = lambda s: base64.b64encode(s.encode()).decode()
key, password = b64("/ember/default/kv:fun/attacker"), sys.argv[1]
out = {"anonymous_put": call("kv/put", {"key": key, "value": b64("evil")}),
       "anonymous_read": call("kv/range", {"key": b64("/ember/"), "range_end": b64("/ember0")})}
if password:
    token = call("auth/authenticate", {"name": "root", "password": password}).get("token")
    read = call("kv/range", {"key": b64("/ember/"), "range_end": b64("/ember0"), "count_only": True}, token)
    out["keys_with_password"] = int(read.get("count", 0))
    out["attacker_key"] = call("kv/range", {"key": key}, token).get("count", "0")
print(json.dumps(out))
"""


def _etcd_address(cluster: Cluster) -> str:
    info = json.loads(subprocess.run(["docker", "inspect", cluster.container("etcd")], capture_output=True,
                                     text=True, check=True).stdout)[0]
    nets = info["NetworkSettings"]["Networks"]
    assert list(nets) == [f"{cluster.project}_etcd"], f"etcd is on {sorted(nets)}"
    return nets[f"{cluster.project}_etcd"]["IPAddress"]


def _exec(cluster: Cluster, service: str, code: str, *args: str) -> dict:
    r = subprocess.run(f"{cluster.compose} exec -T {service} python3 - {' '.join(args)}", shell=True,
                       input=code, capture_output=True, text=True, errors="replace", timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def _on_etcd_network(cluster: Cluster, code: str, *args: str) -> dict:
    """A throwaway container on etcd's network, with no credentials (the etcd image: python3)."""
    image = f"ember-etcd:{os.environ.get('EMBER_IMAGE_TAG') or 'latest'}"  # as the fixture's
    r = subprocess.run(["docker", "run", "--rm", "--network", f"{cluster.project}_etcd", "--entrypoint",
                        "python3", "--cap-drop", "ALL", image, "-c", code, *args], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_container_on_the_main_network_cannot_reach_etcd(cluster: Cluster) -> None:
    address = _etcd_address(cluster)
    for service in ("raylet-head", "serve-proxy"):  # a node and a driver of the cluster, token in hand
        seen = _exec(cluster, service, REACH, address)
        assert seen["resolved"] is None, f"{service} resolves etcd: {seen}"
        assert seen["connected"] is False, f"{service} reached etcd at {address}: {seen}"
    # The same probe from the GCS, the one service on both networks, does reach it.
    seen = _exec(cluster, "gcs", REACH, address)
    assert seen["resolved"] == address and seen["connected"] is True, seen


def test_a_client_without_credentials_is_refused_even_on_etcds_network(cluster: Cluster) -> None:
    password = _env(cluster, "EMBER_ETCD_PASSWORD")
    out = _on_etcd_network(cluster, ETCD_CLIENT, password)
    for what in ("anonymous_put", "anonymous_read"):
        assert "user name is empty" in out[what].get("error", ""), (what, out[what])
    assert out["keys_with_password"] > 0, "the cluster's state is not in etcd"
    assert out["attacker_key"] == "0", "the anonymous write went through"


def test_a_gcs_without_the_password_stops_with_one_line(cluster: Cluster) -> None:
    for value, expected in (("", "has no credentials: set EMBER_ETCD_PASSWORD"),
                            ("0" * 64, "refused the password of user 'root'")):
        r = cluster.run(f"run --rm --no-deps -T -e EMBER_ETCD_PASSWORD={value} gcs", check=False,
                        timeout=120)
        lines = [ln for ln in r.stderr.splitlines() if "EMBER_ETCD_PASSWORD" in ln]
        assert r.returncode == 1 and len(lines) == 1 and expected in lines[0], r.stdout + r.stderr


def test_the_cluster_works_with_etcd_locked(cluster: Cluster) -> None:
    out = cluster.exec_python("raylet-head", "import ember\nember.init()\n"
                                             "print(ember.get(ember.remote(lambda: 6 * 7).remote()))\n")
    assert out.strip().splitlines()[-1] == "42"


def _env(cluster: Cluster, name: str) -> str:
    with open(cluster.env_file) as f:
        for line in f:
            if line.startswith(name + "="):
                return line.split("=", 1)[1].strip()
    raise AssertionError(f"{name} not in {cluster.env_file}")
