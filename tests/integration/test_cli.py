"""`ember start/status/list/stop` as a user runs them (the installed `ember` console script),
with state isolated in a temporary dir."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

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
