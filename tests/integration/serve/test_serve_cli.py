"""The `serve` CLI and Ray Serve's REST API against a cluster started with `ember start --head
--dashboard-port 0`: `serve deploy` of a config (import path from the runtime_env's working_dir,
builder args, per-deployment overrides), `serve status`/`serve config` in Ray's shapes, a
redeploy that changes num_replicas/user_config/max_ongoing_requests in place under an HTTP load
loop with zero failed requests, bad configs refused naming the field, `serve shutdown`, and
`serve run module:app` as a subprocess that SIGINT tears down."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request

import psutil
import pytest
import yaml

from ember_common import auth

SERVE = os.path.join(os.path.dirname(sys.executable), "serve")
# Ray 2.60 is not a dependency: its interpreter (a venv with `ray[serve]==2.60.0`) is optional.
RAY_PYTHON = os.environ.get("EMBER_TEST_RAY_PYTHON", ".rayvenv/bin/python")


def _ray_serve_cli_missing():
    if not os.path.exists(RAY_PYTHON):
        return f"Ray 2.60's venv is not at {RAY_PYTHON}"
    r = subprocess.run([RAY_PYTHON, "-c", "import ray.serve.scripts"], capture_output=True, text=True, timeout=120)
    return None if r.returncode == 0 else f"Ray's venv at {RAY_PYTHON} lacks ray[serve]: {r.stderr[-300:]}"
APP = textwrap.dedent("""
    from ember import serve

    @serve.deployment(ray_actor_options={"num_cpus": 0})
    class Greeter:
        def __init__(self, greeting="hello"):
            self.greeting, self.suffix = greeting, ""

        def reconfigure(self, config):
            self.suffix = config.get("suffix", "")

        async def __call__(self, request):
            return self.greeting + self.suffix

    app = Greeter.bind()

    def build(args):
        return Greeter.bind(greeting=args["greeting"])
""")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cli(env, *args, check=True):
    r = subprocess.run([sys.executable, "-m", "ember.scripts", *args] if args[0] in ("start", "stop")
                       else [SERVE, *args], env=env, capture_output=True, text=True, timeout=120)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({r.returncode}): {r.stdout}{r.stderr}")
    return r


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve-cli")
    env = dict(os.environ)
    env["EMBER_TEMP_DIR"] = str(tmp / "ember-tmp")
    _cli(env, "start", "--head", "--port", str(_free_port()), "--num-cpus", "2", "--dashboard-port", "0")
    info = json.loads((tmp / "ember-tmp" / "ember_current_cluster").read_text())
    app_dir = tmp / "app"
    app_dir.mkdir()
    (app_dir / "greet_app.py").write_text(APP)
    yield {"url": info["dashboard_url"], "gcs": info["gcs_address"], "env": env, "app_dir": app_dir, "tmp": tmp}
    _cli(env, "stop", check=False)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(
            str(tmp) in " ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])):
        time.sleep(0.1)


def _rest(url, method="GET", body=None, headers=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + "/api/serve/applications/", data=data, method=method,
                                 headers=auth.http_headers() if headers is None else headers)
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            text = r.read().decode()
            return r.status, json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _get(port, path, timeout=5):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _wait(pred, what, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _config(c, port, **dep):
    return {"proxy_location": "HeadOnly", "http_options": {"host": "127.0.0.1", "port": port},
            "applications": [{"name": "greet", "route_prefix": "/greet", "import_path": "greet_app:build",
                              "runtime_env": {"working_dir": str(c["app_dir"])}, "args": {"greeting": "hi"},
                              "deployments": [{"name": "Greeter", **dep}]}]}


def _app(c, name):
    return _rest(c["url"])[1]["applications"].get(name, {})


def _replica_states(c, name):
    reps = _app(c, name).get("deployments", {}).get("Greeter", {}).get("replicas", [])
    out: dict[str, int] = {}
    for r in reps:
        out[r["state"]] = out.get(r["state"], 0) + 1
    return out


def _status(c):
    return yaml.safe_load(_cli(c["env"], "status", "-a", c["url"]).stdout)


def test_deploy_status_config_redeploy_in_place_and_shutdown(cluster, tmp_path):
    c, port = cluster, _free_port()
    cfg = _config(c, port, num_replicas=1, user_config={"suffix": "!"})
    (tmp_path / "serve.yaml").write_text(yaml.safe_dump(cfg))
    out = _cli(c["env"], "deploy", str(tmp_path / "serve.yaml"), "-a", c["url"]).stdout
    assert "Sent deploy request" in out
    _wait(lambda: _app(c, "greet").get("status") == "RUNNING", "greet RUNNING")
    st = _status(c)
    app = st["applications"]["greet"]
    assert set(st) == {"proxies", "applications", "target_capacity"} and list(st["proxies"].values()) == ["HEALTHY"]
    assert app["message"] == "" and app["last_deployed_time_s"] > time.time() - 120
    assert app["deployments"]["Greeter"] == {"status": "HEALTHY", "status_trigger": "CONFIG_UPDATE_COMPLETED",
                                             "replica_states": {"RUNNING": 1}, "message": ""}
    assert _get(port, "/greet") == (200, "hi!")
    assert yaml.safe_load(_cli(c["env"], "config", "-a", c["url"]).stdout) == cfg["applications"][0]
    first = [r["replica_id"] for r in _rest(c["url"])[1]["applications"]["greet"]["deployments"]["Greeter"]["replicas"]]

    # Redeploy with more replicas, a new user_config and max_ongoing_requests under load: in place.
    answers: dict[str, int] = {}
    failures: list[str] = []
    stop = threading.Event()

    def load():
        deadline = time.monotonic() + 60  # bounded
        while not stop.is_set() and time.monotonic() < deadline:
            code, body = _get(port, "/greet")
            if code != 200:
                failures.append(f"{code} {body[:200]}")
            else:
                answers[body] = answers.get(body, 0) + 1

    threads = [threading.Thread(target=load) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        cfg2 = _config(c, port, num_replicas=2, user_config={"suffix": "?"}, max_ongoing_requests=10)
        assert _rest(c["url"], "PUT", cfg2)[0] == 200  # what `serve deploy` sends
        _wait(lambda: _replica_states(c, "greet") == {"RUNNING": 2} and answers.get("hi?", 0) > 20,
              "2 replicas answering with the new user_config")
    finally:
        stop.set()
        for t in threads:
            t.join(70)
    assert not failures, failures[:5]
    assert answers.get("hi!", 0) > 0 and answers.get("hi?", 0) > 20, answers
    details = _rest(c["url"])[1]["applications"]["greet"]
    now = [r["replica_id"] for r in details["deployments"]["Greeter"]["replicas"]]
    assert set(first) < set(now), (first, now)  # the first replica kept serving: reconfigured, not replaced
    assert details["deployments"]["Greeter"]["deployment_config"]["max_ongoing_requests"] == 10
    assert details["deployed_app_config"]["deployments"][0]["num_replicas"] == 2

    out = _cli(c["env"], "shutdown", "-y", "-a", c["url"]).stdout
    assert "shutdown request" in out
    assert _rest(c["url"])[1]["applications"] == {}
    _wait(lambda: _proxy_closed(port), "the proxy to stop")


def _proxy_closed(port):
    try:
        _get(port, "/", timeout=1)
        return False
    except OSError:
        return True


def test_bad_configs_are_refused_naming_the_field_and_serve_keeps_working(cluster, tmp_path):
    c = cluster
    bad = {"applications": [{"import_path": "greet_app:app", "deployments": [{"name": "Greeter",
                                                                             "num_replicaz": 2}]}]}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    r = _cli(c["env"], "deploy", str(tmp_path / "bad.yaml"), "-a", c["url"], check=False)
    assert r.returncode == 1 and "num_replicaz" in r.stderr
    # The REST API refuses the same, and what Ember does not implement, naming it.
    assert _rest(c["url"], "PUT", bad)[0] == 400 and "num_replicaz" in _rest(c["url"], "PUT", bad)[1]
    code, body = _rest(c["url"], "PUT", {"target_capacity": 40, "applications": []})
    assert code == 400 and "target_capacity" in body and "not implemented" in body
    code, body = _rest(c["url"], "PUT", {"applications": [{"import_path": "no_such_module_q:app"}]})
    assert code == 400 and "no_such_module_q" in body
    cfg = _config(c, _free_port())
    cfg["applications"][0]["deployments"] = [{"name": "NotThere", "num_replicas": 1}]
    code, body = _rest(c["url"], "PUT", cfg)
    assert code == 400 and "NotThere" in body
    # Authenticated like the dashboard's other endpoints.
    assert _rest(c["url"], "GET", headers={})[0] == 401
    assert _rest(c["url"], "PUT", {"applications": []}, headers={})[0] == 401
    # Nothing was deployed, and the API still answers (without --address: this cluster's dashboard).
    code, details = _rest(c["url"])
    assert code == 200 and details["applications"] == {}
    env = {k: v for k, v in c["env"].items() if k not in ("RAY_DASHBOARD_ADDRESS", "EMBER_DASHBOARD_ADDRESS",
                                                           "RAY_API_SERVER_ADDRESS")}
    assert "No configuration was found." in _cli(env, "config").stdout


def _serve_run(c, cwd, *args, address=True):
    """`serve run ...` started; returns it with its output up to the line that says it serves.
    address=False: no --address (it finds the cluster `ember start` runs here)."""
    env = {k: v for k, v in c["env"].items() if k not in ("EMBER_ADDRESS", "RAY_ADDRESS")}
    proc = subprocess.Popen([SERVE, "run", *args, *(["--address", c["gcs"]] if address else [])], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=str(cwd))
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("Serving HTTP") or len(lines) > 200:
            break
    return proc, "".join(lines)


def test_serve_run_blocks_serves_and_sigint_tears_it_down(cluster, tmp_path):
    c, port = cluster, _free_port()
    # A proxy on a free port for `serve run` to use (it uses the cluster's running proxy).
    cfg = _config(c, port, num_replicas=1)
    assert _rest(c["url"], "PUT", cfg)[0] == 200
    proc, out = _serve_run(c, tmp_path, "greet_app:build", "greeting=yo", "--route-prefix", "/run",
                           "--name", "runapp", "--app-dir", str(c["app_dir"]))
    try:
        assert "Deployed app 'runapp'" in out, out
        assert _get(port, "/run") == (200, "yo")
        time.sleep(0.5)
        assert proc.poll() is None  # blocking
        assert _app(c, "runapp")["status"] == "RUNNING"
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "shutting down" in rest, rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert _rest(c["url"])[1]["applications"] == {}  # Ctrl-C shut Serve down, as Ray's serve run
    assert "No configuration was found." in _cli(c["env"], "config", "-a", c["url"]).stdout
    _wait(lambda: _proxy_closed(port), "the proxy to stop")


def test_serve_run_of_a_config_file(cluster, tmp_path):
    c, port = cluster, _free_port()
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(_config(c, port, num_replicas=1, user_config={"suffix": "."})))
    proc, out = _serve_run(c, tmp_path, str(tmp_path / "run.yaml"), address=False)
    try:
        assert "Deployed application(s) ['greet']" in out and f":{port}" in out, out
        assert _get(port, "/greet") == (200, "hi.")
        assert _app(c, "greet")["status"] == "RUNNING"  # on the cluster `ember start` runs, not a new one
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "shutting down" in rest, rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert _rest(c["url"])[1]["applications"] == {}
    _wait(lambda: _proxy_closed(port), "the proxy to stop")


def test_build_writes_a_config_that_deploys(cluster, tmp_path):
    c = cluster
    out = tmp_path / "built.yaml"
    _cli(c["env"], "build", "greet_app:app", "-d", str(c["app_dir"]), "-o", str(out))
    cfg = yaml.safe_load(out.read_text())
    assert out.read_text().startswith("# This file was generated")
    app = cfg["applications"][0]
    assert app["import_path"] == "greet_app:app" and app["name"] == "app1" and app["route_prefix"] == "/"
    assert app["deployments"] == [{"name": "Greeter", "num_replicas": 1, "max_ongoing_requests": 5,
                                   "ray_actor_options": {"num_cpus": 0}}]
    port = _free_port()
    cfg["http_options"]["port"] = port
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    (code_dir / "greet_app.py").write_text(APP)
    app["runtime_env"] = {"working_dir": str(code_dir)}
    app["deployments"][0]["num_replicas"] = 2
    assert _rest(c["url"], "PUT", cfg)[0] == 200
    _wait(lambda: _replica_states(c, "app1") == {"RUNNING": 2}, "app1 with 2 replicas")
    _wait(lambda: _get(port, "/") == (200, "hello"), "app1 answering")
    old = {r["replica_id"] for r in _app(c, "app1")["deployments"]["Greeter"]["replicas"]}
    # New code in the working_dir: `serve deploy` of the same config rolls the replicas over to it
    # (the CLI uploads the working_dir as it is now).
    (code_dir / "greet_app.py").write_text(APP.replace('greeting="hello"', 'greeting="howdy"'))
    out.write_text(yaml.safe_dump(cfg))
    _cli(c["env"], "deploy", str(out), "-a", c["url"])
    _wait(lambda: _get(port, "/") == (200, "howdy") and _replica_states(c, "app1") == {"RUNNING": 2},
          "the new code answering")
    assert not old & {r["replica_id"] for r in _app(c, "app1")["deployments"]["Greeter"]["replicas"]}
    assert _rest(c["url"], "DELETE")[0] == 200
    assert _rest(c["url"])[1]["applications"] == {}


def test_rays_own_serve_cli_against_the_dashboard(cluster, tmp_path):
    """Ray 2.60's `serve deploy/status/config/shutdown`, unchanged, against Ember's dashboard (the
    token sent as Ray's client sends it under token auth). Ray's config takes no plain local path
    for a working_dir; `local://` names a directory that exists where the cluster runs."""
    missing = _ray_serve_cli_missing()
    if missing:
        pytest.skip(missing)
    c, port = cluster, _free_port()
    cfg = _config(c, port, num_replicas=1, user_config={"suffix": "!"})
    cfg["applications"][0]["runtime_env"] = {"working_dir": "local://" + str(c["app_dir"])}
    (tmp_path / "serve.yaml").write_text(yaml.safe_dump(cfg))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "EMBER_"))}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=auth.load().token or "")

    def ray_serve(*args):
        r = subprocess.run([RAY_PYTHON, "-c", "from ray.serve.scripts import cli; cli()", *args, "-a", c["url"]],
                           env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr[-3000:]
        return r.stdout

    ray_serve("deploy", str(tmp_path / "serve.yaml"))
    _wait(lambda: _app(c, "greet").get("status") == "RUNNING", "greet RUNNING")
    assert _get(port, "/greet") == (200, "hi!")
    st = yaml.safe_load(ray_serve("status"))
    assert st["applications"]["greet"]["deployments"]["Greeter"]["replica_states"] == {"RUNNING": 1}
    assert yaml.safe_load(ray_serve("config")) == cfg["applications"][0]
    ray_serve("shutdown", "-y")
    assert _rest(c["url"])[1]["applications"] == {}


def test_serve_start_brings_up_the_proxy_and_returns(cluster):
    c, port = cluster, _free_port()

    def serve_start(*args):  # `_cli` sends "start" to `ember start`
        return subprocess.run([SERVE, "start", "--address", c["gcs"], *args], env=c["env"], capture_output=True,
                              text=True, timeout=120)

    r = serve_start("--http-host", "127.0.0.1", "--http-port", str(port))
    assert r.returncode == 0 and f"http://127.0.0.1:{port}" in r.stdout, r.stdout + r.stderr
    # Serve outlives the command: its proxy answers (no application yet: 404)
    assert _wait(lambda: _get(port, "/")[0] == 404, "the proxy to answer")
    refused = serve_start("--grpc-port", "9000")
    assert refused.returncode == 2 and "--grpc-port is not implemented" in refused.stderr
    _cli(c["env"], "shutdown", "-a", c["url"], "--yes")
    _wait(lambda: _proxy_closed(port), "the proxy to stop")
