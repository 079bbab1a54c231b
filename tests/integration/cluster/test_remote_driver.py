"""Remote drivers (Ray Client): a client process that is given only the client proxy's address
runs tasks, actors, named actors, a 100 MB put/get, wait, cancel and kill through it, sees a
task's error re-raised as Ray does, and holds no connection but to the proxy. A wrong token is
refused. One cluster and one proxy for the module; the workload runs once in one client process
and each test checks its part of the report."""
from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys
import textwrap
import urllib.request

import psutil
import pytest

import ember
from ember.testing import wait_for
from ember_common import auth

WORKLOAD = (pathlib.Path(__file__).parent / "remote_driver_workload.py").read_text()


def _client_env(proxy_port: int, token: str, scheme: str = "ember") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBER_", "RAY_"))}
    env["EMBER_AUTH_TOKEN"] = token
    env["PROXY_ADDRESS"] = f"{scheme}://127.0.0.1:{proxy_port}"
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def proxy():
    """An embedded cluster with its client proxy (as `ember start --head --ray-client-server-port`)."""
    info = ember.init(num_cpus=2, _ray_client_server_port=0)
    try:
        yield int(info["client_server_address"].rsplit(":", 1)[1])
    finally:
        ember.shutdown()


@pytest.fixture(scope="module")
def report(proxy, tmp_path_factory):
    script = tmp_path_factory.mktemp("client") / "workload.py"
    script.write_text(WORKLOAD)
    env = _client_env(proxy, auth.load().token or "", scheme="ray")  # Ray's scheme works too
    env["SERVE_PORT"] = str(_free_port())
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=240)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("REPORT ")]
    assert lines, f"the client failed (rc={out.returncode}): {out.stderr[-3000:]}"
    return {**json.loads(lines[-1][len("REPORT "):]), "serve_port": env["SERVE_PORT"]}


def _ok(part):
    assert not (isinstance(part, dict) and "failed" in part), part
    return part


def test_init_connects_through_the_proxy(report, proxy):
    assert report["init"] == {"initialized": True, "namespace": "remote-ns"}
    assert report["after_shutdown"] is False
    # The client held no connection but to the proxy: no GCS, raylet, object manager or worker.
    assert _ok(report["connections"]) in ([], [proxy])


def test_tasks(report):
    t = _ok(report["tasks"])
    assert t == {"one": 3, "many": [2 * i for i in range(20)], "pair": [21, 42], "by_ref": 6,
                 "nested": 6, "options": 4, "is_ref": True}


def test_actors_and_handles_passed_to_tasks(report):
    a = _ok(report["actors"])
    assert a["first"] == 6 and a["from_task"] == 25 and a["after"] == 25
    assert "nope" in a["missing"]


def test_named_actors(report):
    n = _ok(report["named"])
    assert n["value"] == 101
    assert "shared" in n["names"]
    assert "no-such-actor" in n["unknown"]


def test_100mb_put_get(report):
    b = _ok(report["big"])
    assert b["equal"] and b["nbytes"] == 100 * 1024 * 1024
    assert b["put_s"] < 20 and b["get_s"] < 20, b


def test_wait_timeout_and_cancel(report):
    assert _ok(report["wait"]) == {"ready_is_fast": True, "rest_is_slow": True, "timed_out": True,
                                   "cancelled": "TaskCancelledError"}


def test_task_error_reraised_as_ray_does(report):
    e = _ok(report["error"])
    assert e["is_task_error"] is True and "boom" in e["text"]


def test_kill(report):
    assert _ok(report["kill"])["died"] in ("ActorDiedError", "RayActorError")


def test_cluster_queries_and_runtime_context(report):
    c = _ok(report["cluster"])
    assert c["cpus"] == 2 and c["nodes"] == 1 and c["available_cpu"]
    assert c["namespace"] == "remote-ns" and c["job_id"]


def test_unsupported_api_names_itself(report):
    assert "get_gpu_ids" in report["unsupported"] and "client mode" in report["unsupported"]


def test_dropped_refs_are_released_in_the_session(report):
    assert _ok(report["release"]) == {"added": 5, "one_left": 1, "none_left": 0}


def test_serve_run_from_a_client_deploys(report):
    s = _ok(report["serve"])
    assert s == {"body": "hello from a remote driver", "handle_relayed": False}
    # The application outlives the client: its controller and HTTP proxy are cluster actors.
    url = f"http://127.0.0.1:{report['serve_port']}/remote"
    assert urllib.request.urlopen(url, timeout=30).read().decode() == "hello from a remote driver"


def test_wrong_token_is_refused(proxy):
    code = ("import ember, sys\n"
            "try:\n    ember.init(sys.argv[1])\n"
            "except ember.exceptions.AuthenticationError as e:\n    print('REFUSED', e)\n")
    out = subprocess.run([sys.executable, "-c", code, f"ember://127.0.0.1:{proxy}"],
                         env=_client_env(proxy, "not-the-token"), capture_output=True, text=True, timeout=60)
    assert "REFUSED" in out.stdout, out.stderr[-2000:]


HOLDER = textwrap.dedent('''
    import os, sys, time
    import ember

    ember.init(os.environ["PROXY_ADDRESS"])

    @ember.remote
    class Box:
        def get(self):
            return "alive"

    box = Box.remote()
    print("READY", ember.get(box.get.remote()), flush=True)
    while not os.path.exists(sys.argv[1]):  # the test's go-ahead
        time.sleep(0.05)
    print("AFTER", ember.get(box.get.remote()), flush=True)
''')


def _cmdline(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except psutil.Error:  # gone, or a zombie
        return ""


def _sessions() -> list[psutil.Process]:
    """The proxy's live session processes."""
    proxies = [p for p in psutil.Process().children(recursive=True)
               if "ember.util.client.proxy" in _cmdline(p)]
    assert len(proxies) == 1, proxies
    return [p for p in proxies[0].children() if "ember.util.client.session" in _cmdline(p)]


def test_a_killed_client_ends_its_own_session_only(proxy, report, tmp_path):
    """Two clients at once: SIGKILL one; its session process goes away, the other's session and
    actor keep working."""
    script, go = tmp_path / "holder.py", tmp_path / "go"
    script.write_text(HOLDER)
    env = _client_env(proxy, auth.load().token or "")
    procs = [subprocess.Popen([sys.executable, str(script), str(go)], env=env, stdout=subprocess.PIPE,
                              text=True) for _ in range(2)]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "READY alive"
        wait_for(lambda: len(_sessions()) == 2, timeout_s=30, what="two sessions")
        procs[0].kill()
        procs[0].wait()
        wait_for(lambda: len(_sessions()) == 1, timeout_s=30, what="the killed client's session to end")
        go.touch()
        out, _ = procs[1].communicate(timeout=60)
        assert out.strip() == "AFTER alive" and procs[1].returncode == 0
    finally:
        for p in procs:
            p.kill()
            p.wait()
            if p.stdout is not None:
                p.stdout.close()
