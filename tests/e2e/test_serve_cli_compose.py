"""The `serve` CLI against the compose cluster, from the host: `serve deploy` of a config to the
dashboard's published port, `serve status`/`serve config` in Ray's shapes, HTTP through the
proxy's published port, `serve run --non-blocking` of an import path whose working_dir the host
driver uploads, and `serve shutdown`."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request

import yaml

from .conftest import Cluster

SERVE = os.path.join(os.path.dirname(sys.executable), "serve")
APP = textwrap.dedent("""
    from ember import serve

    @serve.deployment(ray_actor_options={"num_cpus": 0.1})
    class Greeter:
        def __init__(self, greeting="hello"):
            self.greeting = greeting

        async def __call__(self, request):
            return self.greeting

    app = Greeter.bind()

    def build(args):
        return Greeter.bind(greeting=args["greeting"])
""")


def _serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    r = subprocess.run([SERVE, *args], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, f"serve {' '.join(args)} failed ({r.returncode}): {r.stdout}{r.stderr}"
    return r


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, ConnectionError) as e:
        return 0, str(e)


def _until(pred, what: str, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_serve_cli_deploys_reports_runs_and_shuts_down_on_compose(cluster: Cluster, tmp_path) -> None:
    cluster.wait_healthy(["serve-proxy", "dashboard"], timeout_s=180)
    dash = f"http://127.0.0.1:{cluster.dashboard_port}"
    # The config's working_dir is a path the dashboard can read (as in Ray, a remote cluster does
    # not see the deploying machine's files): the module is written into its container's /tmp.
    subprocess.run(f"{cluster.compose} exec -T dashboard sh -c 'mkdir -p /tmp/greet && cat > /tmp/greet/greet_app.py'",
                   shell=True, input=APP, text=True, check=True, timeout=60)
    cfg = {"applications": [{"name": "greet", "route_prefix": "/greet", "import_path": "greet_app:build",
                             "runtime_env": {"working_dir": "/tmp/greet"}, "args": {"greeting": "hi"}}]}
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert "Sent deploy request successfully" in _serve("deploy", str(path), "-a", dash).stdout

    def running() -> bool:
        st = yaml.safe_load(_serve("status", "-a", dash).stdout) or {}
        return (st.get("applications", {}).get("greet", {}).get("status") == "RUNNING")

    _until(running, "the deployed application to be RUNNING")
    _until(lambda: _get(cluster.http_port, "/greet") == (200, "hi"), "the proxy to route /greet")
    assert yaml.safe_load(_serve("config", "-a", dash).stdout)["import_path"] == "greet_app:build"

    # serve run from the host: the driver joins the cluster and uploads the working_dir itself
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    (app_dir / "greet_app.py").write_text(APP)
    env = {**os.environ, "EMBER_NODE_IP": cluster.gateway}
    out = _serve("run", "greet_app:app", "--address", f"127.0.0.1:{cluster.gcs_port}", "--working-dir", str(app_dir),
                 "--app-dir", str(app_dir), "--name", "runapp", "--route-prefix", "/run", "--non-blocking",
                 env=env).stdout
    assert "Deployed app 'runapp'" in out, out
    _until(lambda: _get(cluster.http_port, "/run") == (200, "hello"), "the proxy to route /run")
    assert set(yaml.safe_load(_serve("status", "-a", dash).stdout)["applications"]) == {"greet", "runapp"}

    assert "Sent shutdown request" in _serve("shutdown", "-a", dash, "--yes").stdout
    _until(lambda: not (yaml.safe_load(_serve("status", "-a", dash).stdout) or {}).get("applications"),
           "every application to be gone")
