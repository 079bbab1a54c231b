"""Remote drivers against the compose cluster: the `client` profile's client-proxy joins the
cluster's network and the `client` network; remote-driver, alone on `client` with it, cannot
reach the GCS and runs the remote-driver workload (tasks, actors, named actors, a 100 MB
put/get, wait, cancel, kill, errors, serve.run) through the proxy only. The application it
deploys answers on the cluster's own Serve proxy, published to the host."""
from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

WORKLOAD = (Path(__file__).parents[1] / "integration" / "cluster" / "remote_driver_workload.py").read_text()
# Run first in the container: the GCS must be out of its reach (only the proxy is on its network).
PRELUDE = '''
import socket
try:
    socket.create_connection(("gcs", 6379), timeout=3).close()
    print("GCS_REACHABLE")
except OSError:
    print("GCS_UNREACHABLE")
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Room for the package's compose cluster coming up first when this test runs alone.
@pytest.mark.timeout(480)
def test_a_container_that_reaches_only_the_proxy_runs_the_workload(cluster):
    c = cluster.with_settings(f"EMBER_CLIENT_PROXY_HOST_PORT={_free_port()}")
    try:
        t0 = time.monotonic()
        r = subprocess.run(f"{c.compose} --profile client run --rm -T remote-driver -", shell=True,
                           input=PRELUDE + WORKLOAD, capture_output=True, text=True, errors="replace",
                           timeout=600)
        took = time.monotonic() - t0
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("REPORT ")]
        proxy_log = c.run("--profile client logs --tail 40 client-proxy", check=False).stdout
        assert lines, f"the remote driver failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}\n{proxy_log}"
        assert "GCS_UNREACHABLE" in r.stdout
        report = json.loads(lines[-1][len("REPORT "):])
        failed = {k: v for k, v in report.items() if isinstance(v, dict) and "failed" in v}
        assert not failed, f"{failed}\n{proxy_log}"
        assert report["tasks"]["one"] == 3 and report["tasks"]["nested"] == 6
        assert report["actors"]["from_task"] == 25 and report["named"]["value"] == 101
        assert report["big"]["equal"] and report["big"]["nbytes"] == 100 * 1024 * 1024
        assert report["wait"]["cancelled"] == "TaskCancelledError"
        assert report["error"]["is_task_error"] is True
        assert report["release"] == {"added": 5, "one_left": 1, "none_left": 0}
        assert report["connections"] in ([], [10001])  # the proxy, nothing else
        url = f"http://127.0.0.1:{c.http_port}/remote"
        deadline = time.monotonic() + 60
        while True:  # the cluster's Serve proxy follows the controller by a long poll
            try:
                body = urllib.request.urlopen(url, timeout=10).read().decode()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        assert body == "hello from a remote driver"
        print(f"\nremote-driver workload through the client proxy: {took:.1f}s; 100 MB put "
              f"{report['big']['put_s']:.2f}s, get {report['big']['get_s']:.2f}s")
    finally:
        c.run("--profile client rm -sfv client-proxy remote-driver", check=False, timeout=120)
        # The package's `down` leaves networks only this profile's services use.
        subprocess.run(["docker", "network", "rm", f"{c.project}_client"], capture_output=True, timeout=60)
