"""`ember start/status/list/stop` as a user runs them (the installed `ember` console script),
with state isolated in a temporary dir."""
from __future__ import annotations

import contextlib
import os
import queue
import subprocess
import sys
import textwrap
import threading

import psutil
import pytest

# The console script pip installed next to this interpreter (pyproject's [project.scripts]).
EMBER = os.path.join(os.path.dirname(sys.executable), "ember")


@pytest.fixture
def cli_env(tmp_path):
    env = dict(os.environ)
    env["EMBER_TEMP_DIR"] = str(tmp_path / "ember-tmp")
    yield env
    # Whatever the test did, nothing it started may survive it.
    subprocess.run([EMBER, "stop", "--force"], env=env,
                   capture_output=True, timeout=60)
    import time

    deadline = time.monotonic() + 10
    while True:  # killed processes take a moment to disappear
        leftovers = [p for p in psutil.process_iter(["cmdline", "status"])
                     if p.info["status"] != psutil.STATUS_ZOMBIE
                     and any(str(tmp_path) in part for part in (p.info["cmdline"] or []))]
        if not leftovers or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not leftovers, f"processes left behind: {[p.pid for p in leftovers]}"


def ember_cli(env, *args, check=True):
    assert os.access(EMBER, os.X_OK), f"no `ember` console script at {EMBER}: pip install -e ."
    r = subprocess.run([EMBER, *args], env=env, capture_output=True,
                       text=True, timeout=120)
    if check and r.returncode != 0:
        raise AssertionError(f"ember {' '.join(args)} failed ({r.returncode}): {r.stdout}{r.stderr}")
    return r


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_start_head_add_node_status_run_stop(cli_env, tmp_path):
    port = _free_port()
    out = ember_cli(cli_env, "start", "--head", "--port", str(port), "--num-cpus", "1",
                    "--num-gpus", "1").stdout
    assert f"127.0.0.1:{port}" in out
    ember_cli(cli_env, "start", f"--address=127.0.0.1:{port}", "--num-cpus", "2",
              "--resources", '{"accel": 3}')
    status = ember_cli(cli_env, "status").stdout
    assert "Nodes: 2 alive, 0 dead" in status and "0/3 CPU" in status and "0/3 accel" in status
    driver = textwrap.dedent("""
        import ember as ray
        ray.init(address="auto")
        @ray.remote(resources={"accel": 1})
        def f(x):
            return x + 1
        print("RESULT", ray.get([f.remote(i) for i in range(10)]))
        @ray.remote
        class Counter:
            def ping(self):
                return "pong"
        c = Counter.options(name=NAME, namespace=NAMESPACE, lifetime="detached").remote()
        print("ACTOR", ray.get(c.ping.remote()))
        ray.shutdown()
    """)
    name, namespace = "a_rather_long_actor_name_0123456789", "a_namespace_longer_than_twenty"
    driver = f"NAME, NAMESPACE = {name!r}, {namespace!r}\n" + driver
    r = subprocess.run([sys.executable, "-c", driver], env=cli_env, capture_output=True, text=True,
                       timeout=120)
    assert "RESULT [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]" in r.stdout, r.stderr
    assert "ACTOR pong" in r.stdout, r.stderr
    listed = ember_cli(cli_env, "list", "actors").stdout.splitlines()
    header = listed[0].split()
    assert header == ["ACTOR_ID", "CLASS", "STATE", "NAME", "NAMESPACE", "NODE", "PID", "RESTARTS"]
    rows = [line.split() for line in listed[1:] if "Counter" in line]
    assert len(rows) == 1, listed
    row = dict(zip(header, rows[0], strict=True))
    assert row["NAME"] == name and row["NAMESPACE"] == namespace and row["STATE"] == "ALIVE", listed
    stop = ember_cli(cli_env, "stop").stdout
    assert "Stopped 2 node(s)" in stop
    r = ember_cli(cli_env, "status", check=False)
    assert r.returncode == 1 and "no running Ember cluster" in r.stderr


def test_start_errors_are_one_line_and_clear(cli_env):
    r = ember_cli(cli_env, "start", "--head", "--port", str(_free_port()), "--resources", "{bad",
                  check=False)
    assert r.returncode != 0 and "--resources is not valid JSON" in r.stderr
    import socket

    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        busy = s.getsockname()[1]
        r = ember_cli(cli_env, "start", "--head", "--port", str(busy), check=False)
    assert r.returncode == 1 and str(busy) in r.stderr
    r = ember_cli(cli_env, "start", "--address", "127.0.0.1:1", check=False)
    assert r.returncode == 1 and "127.0.0.1:1" in r.stderr


# ------------------------------------------------------------------ ember start --block
@contextlib.contextmanager
def _blocking_head(env, port):
    """`ember start --head --block` in the background, yielded once it says it is watching; its
    stdout is read by a thread into p.lines. Killed (if still running) and its pipes closed at
    the end."""
    p = subprocess.Popen([EMBER, "start", "--head", "--port", str(port), "--num-cpus", "1", "--block"],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.lines = queue.Queue()
    reader = threading.Thread(target=lambda: [p.lines.put(line) for line in p.stdout], daemon=True)
    reader.start()
    try:
        out = []
        while not out or not out[-1].startswith("--block: watching"):
            try:
                out.append(p.lines.get(timeout=60))
            except queue.Empty:
                raise AssertionError(f"ember start --block never said it was watching: {''.join(out)}") from None
        assert all(name in out[-1] for name in ("gcs", "raylet-", "objmgr")), out[-1]
        yield p
    finally:
        if p.poll() is None:
            p.kill()
        p.wait(30)
        reader.join(10)
        p.stdout.close()
        p.stderr.close()


def _rest(p):
    """What p printed after the watching line (p has exited)."""
    out = []
    while True:
        try:
            out.append(p.lines.get(timeout=5))
        except queue.Empty:
            return "".join(out)


def _node_pids(p):
    return {c.pid: " ".join(c.cmdline()) for c in psutil.Process(p.pid).children()}


def _gone(pids, timeout=15):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if psutil.pid_exists(pid)
                 and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return True
        time.sleep(0.1)
    return False


def test_start_block_serves_until_sigterm_then_stops_the_node(cli_env):
    port = _free_port()
    with _blocking_head(cli_env, port) as p:
        pids = _node_pids(p)
        driver = f"import ember\nember.init(address='127.0.0.1:{port}')\nprint(ember.get(ember.remote(lambda: 41).remote()) + 1)"
        r = subprocess.run([sys.executable, "-c", driver], env=cli_env, capture_output=True, text=True, timeout=120)
        assert r.stdout.strip() == "42", r.stderr
        assert p.poll() is None  # still in the foreground
        p.terminate()
        assert p.wait(60) == 0, p.stderr.read()
        assert "SIGTERM: stopping the node." in _rest(p)
        assert _gone(pids), pids
        r = ember_cli(cli_env, "status", check=False)
        assert r.returncode == 1 and "no running Ember cluster" in r.stderr


def test_start_block_names_a_process_that_died_and_stops_the_rest(cli_env):
    with _blocking_head(cli_env, _free_port()) as p:
        pids = _node_pids(p)
        raylet = next(pid for pid, cmd in pids.items() if "ember_raylet" in cmd)
        os.kill(raylet, 9)
        assert p.wait(60) == 1
        err = p.stderr.read()
        assert f"(pid {raylet}, exit code -9) exited unexpectedly; stopping the rest of the node" in err, err
        assert "raylet-" in err and "logs:" in err
        assert _gone(pids), pids
        assert not os.listdir(os.path.join(cli_env["EMBER_TEMP_DIR"], "nodes"))  # no record left for `ember stop`


def test_start_block_returns_0_when_ember_stop_stops_the_node(cli_env):
    with _blocking_head(cli_env, _free_port()) as p:
        pids = _node_pids(p)
        assert "Stopped 1 node(s)" in ember_cli(cli_env, "stop").stdout
        assert p.wait(60) == 0, p.stderr.read()
        assert "The node was stopped (ember stop)." in _rest(p)
        assert _gone(pids), pids
