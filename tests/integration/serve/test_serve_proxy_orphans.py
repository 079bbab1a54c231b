"""The embedded Serve proxy never outlives its cluster or its controller: after `ember stop` no
proxy process is left holding the HTTP port, and after the controller's node restarts (its
worker, and so the proxy's parent, dies with the raylet) the restarted controller gets the
proxy back on its old port at once instead of failing on "address already in use"."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request

import psutil
import pytest

import ember
from ember.testing import LocalCluster


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port):
    """Whether something accepts connections on 127.0.0.1:port."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _proxies(marker):
    """Serve proxy processes whose command line names `marker` (this test's GCS address)."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "ember_serve_proxy" in cmd and marker in cmd:
            out.append(p)
    return out


def _get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


def _wait(pred, what, timeout_s=60.0):
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.1)


DRIVER = textwrap.dedent("""
    import sys
    import ember
    from ember import serve

    @serve.deployment(ray_actor_options={"num_cpus": 0})
    def hello(request):
        return "hello"

    ember.init(address=sys.argv[1])
    serve.start(http_options={"host": "127.0.0.1", "port": int(sys.argv[2])})
    serve.run(hello.bind(), name="hello", route_prefix="/hello")
""")


def _deploy(gcs, port):
    r = subprocess.run([sys.executable, "-c", DRIVER, gcs, str(port)], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    _wait(lambda: _get(port, "/hello") == (200, "hello"), "the proxy to serve /hello")


def _cli(env, *args):
    r = subprocess.run([sys.executable, "-m", "ember.scripts", *args], env=env, capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0, f"ember {' '.join(args)}: {r.stdout}{r.stderr}"


def test_ember_stop_leaves_no_proxy_holding_its_port(tmp_path):
    env = dict(os.environ, EMBER_TEMP_DIR=str(tmp_path / "ember-tmp"))
    _cli(env, "start", "--head", "--port", str(_free_port()), "--num-cpus", "2", "--dashboard-port", "0")
    try:
        gcs = json.loads((tmp_path / "ember-tmp" / "ember_current_cluster").read_text())["gcs_address"]
        port = _free_port()
        _deploy(gcs, port)
        assert _proxies(gcs)
    finally:
        _cli(env, "stop")
    t0 = time.monotonic()
    _wait(lambda: not _listening(port) and not _proxies(gcs), "the proxy to exit after `ember stop`", 20)
    print("proxy gone after", time.monotonic() - t0)


@pytest.fixture
def cluster():
    c = LocalCluster()
    try:
        c.add_node({"CPU": 2}, is_head=True)
        yield c
    finally:
        ember.shutdown()
        c.shutdown()


def _log_lines(session_dir, text):
    """How many lines of this session's log files contain text (a proxy's output goes to the
    controller worker's log files, as does the controller's own logging)."""
    n = 0
    for root, _, files in os.walk(os.path.join(session_dir, "logs")):
        for f in files:
            try:
                with open(os.path.join(root, f), errors="replace") as fh:
                    n += sum(1 for line in fh if text in line)
            except OSError:
                pass
    return n


def _hold(port, timeout_s=20.0):
    """A listening socket on 127.0.0.1:port, bound as soon as the port is free."""
    deadline = time.monotonic() + timeout_s
    while True:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen(1)
            return s
        except OSError:
            s.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


HELD_S = 5.0
IN_USE = "cannot listen on"  # what a proxy started on a busy port says before it exits
WAITING = "is still in use"  # what the controller says once when it waits for its port


@pytest.mark.chaos
def test_after_a_node_restart_the_proxy_comes_back_once_its_port_is_free(cluster):
    """The node's raylet restarts (its workers die with it: the controller's, so its proxy);
    the controller restarts with it and brings the proxy back on the same port. While something
    else still holds the port (here the test, for HELD_S: a previous proxy slow to exit), the
    controller waits for it instead of starting proxies that fail on "address already in use"."""
    port = _free_port()
    _deploy(cluster.gcs_address, port)
    [old] = _proxies(cluster.gcs_address)
    before = _log_lines(cluster.session_dir, IN_USE), _log_lines(cluster.session_dir, WAITING)
    cluster.restart_raylet(cluster.nodes[0])
    _wait(lambda: not old.is_running() or old.status() == psutil.STATUS_ZOMBIE, "the old proxy to exit", 30)
    held = _hold(port)
    try:  # the restarted controller finds its port taken: it says so (or its proxy does) ...
        _wait(lambda: (_log_lines(cluster.session_dir, IN_USE), _log_lines(cluster.session_dir, WAITING)) != before,
              "the restarted controller to try its port", 60)
        time.sleep(HELD_S)  # ... and keeps trying while the port stays taken
    finally:
        held.close()
    t0 = time.monotonic()
    _wait(lambda: _get(port, "/hello") == (200, "hello"), "the restarted controller's proxy to serve /hello", 60)
    assert time.monotonic() - t0 < 10
    assert len(_proxies(cluster.gcs_address)) == 1
    # no proxy started only to fail on the busy port, one warning from the controller
    assert _log_lines(cluster.session_dir, IN_USE) == before[0]
    assert _log_lines(cluster.session_dir, WAITING) == before[1] + 1
