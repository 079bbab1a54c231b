"""`ember job submit` against a cluster started with `ember start` (state in a temporary dir):
the entrypoint runs on a cluster node with the working directory shipped, its output streams
back, and the CLI exits with its exit code; --no-wait + status/logs/stop."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time

import psutil
import pytest


def ember_cli(env, *args, check=True):
    r = subprocess.run([sys.executable, "-m", "ember.scripts", *args], env=env, capture_output=True,
                       text=True, timeout=120)
    if check and r.returncode != 0:
        raise AssertionError(f"ember {' '.join(args)} failed ({r.returncode}): {r.stdout}{r.stderr}")
    return r


@pytest.fixture(scope="module")
def cluster_env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("jobs")
    env = dict(os.environ)
    env["EMBER_TEMP_DIR"] = str(tmp / "ember-tmp")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ember_cli(env, "start", "--head", "--port", str(port), "--num-cpus", "2")
    yield env, f"127.0.0.1:{port}", tmp
    ember_cli(env, "stop", "--force", check=False)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(
            str(tmp) in " ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])):
        time.sleep(0.1)


@pytest.fixture(scope="module")
def workdir(cluster_env):
    d = cluster_env[2] / "work"
    d.mkdir()
    (d / "data.txt").write_text("shipped\n")
    (d / "prog.py").write_text(textwrap.dedent("""
        import os, sys, time
        import ember
        ember.init()
        f = ember.remote(lambda x: x * 2)
        print("RESULT", ember.get([f.remote(i) for i in range(4)]), open("data.txt").read().strip())
        print("NODE", ember.get_runtime_context().get_node_id())
        time.sleep(float(os.environ.get("JOB_SLEEP", "0")))
        sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    """))
    return str(d)


def test_submit_waits_streams_and_returns_exit_code(cluster_env, workdir) -> None:
    env, address, _ = cluster_env
    r = ember_cli(env, "job", "submit", "--address", address, "--working-dir", workdir, "--",
                  "python", "prog.py", "3", check=False)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "RESULT [0, 2, 4, 6] shipped" in r.stdout
    assert "failed (exit code 3)" in r.stderr


def test_no_wait_then_status_logs_stop(cluster_env, workdir) -> None:
    env, address, _ = cluster_env
    r = ember_cli(env, "job", "submit", "--address", address, "--working-dir", workdir,
                  "--no-wait", "--submission-id", "job-nowait", "--", "python", "prog.py")
    assert "Job 'job-nowait' submitted" in r.stderr
    deadline = time.monotonic() + 60
    while "SUCCEEDED" not in ember_cli(env, "job", "status", "job-nowait", "--address", address).stdout:
        assert time.monotonic() < deadline
        time.sleep(0.3)
    assert "RESULT [0, 2, 4, 6] shipped" in ember_cli(env, "job", "logs", "job-nowait",
                                                      "--address", address).stdout
    # as Ray's: stopping an ended job keeps its record; delete removes it
    assert "already ended (SUCCEEDED)" in ember_cli(env, "job", "stop", "job-nowait", "--address", address).stdout
    assert "SUCCEEDED" in ember_cli(env, "job", "status", "job-nowait", "--address", address).stdout
    assert "deleted successfully" in ember_cli(env, "job", "delete", "job-nowait", "--address", address).stdout
    r = ember_cli(env, "job", "status", "job-nowait", "--address", address, check=False)
    assert r.returncode != 0   # the record is gone


def test_stop_then_delete_a_running_job(cluster_env, workdir) -> None:
    env, address, _ = cluster_env
    ember_cli(env, "job", "submit", "--address", address, "--no-wait", "--submission-id", "job-sleep",
              "--", "python", "-c", "import time; time.sleep(300)")
    r = ember_cli(env, "job", "delete", "job-sleep", "--address", address, check=False)
    assert r.returncode == 1 and "stop it before deleting it" in r.stderr
    ember_cli(env, "job", "stop", "job-sleep", "--address", address)  # waits until it has stopped
    assert "STOPPED" in ember_cli(env, "job", "status", "job-sleep", "--address", address).stdout
    ember_cli(env, "job", "delete", "job-sleep", "--address", address)


def test_submit_without_entrypoint_is_an_error(cluster_env) -> None:
    env, address, _ = cluster_env
    r = ember_cli(env, "job", "submit", "--address", address, check=False)
    assert r.returncode == 2 and "no entrypoint" in r.stderr
