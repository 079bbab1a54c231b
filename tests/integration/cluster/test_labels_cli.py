"""`ember start --labels / --labels-file / --temp-dir` then `ember stop`, as a user runs them
(the installed `ember` console script), with state isolated in a temporary dir."""
from __future__ import annotations

import glob
import os
import socket
import stat
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

EMBER = os.path.join(os.path.dirname(sys.executable), "ember")


@pytest.fixture
def cli_env(tmp_path):
    env = dict(os.environ)
    env["EMBER_TEMP_DIR"] = str(tmp_path / "ember-tmp")
    yield env
    subprocess.run([EMBER, "stop", "--force"], env=env, capture_output=True, timeout=60)
    deadline = time.monotonic() + 10
    while True:
        leftovers = [p for p in psutil.process_iter(["cmdline", "status"])
                     if p.info["status"] != psutil.STATUS_ZOMBIE
                     and any(str(tmp_path) in part for part in (p.info["cmdline"] or []))]
        if not leftovers or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not leftovers, f"processes left behind: {[p.pid for p in leftovers]}"


def ember_cli(env, *args, check=True):
    r = subprocess.run([EMBER, *args], env=env, capture_output=True, text=True, timeout=120)
    if check and r.returncode != 0:
        raise AssertionError(f"ember {' '.join(args)} failed ({r.returncode}): {r.stdout}{r.stderr}")
    return r


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_start_with_labels_and_temp_dir_then_stop(cli_env, tmp_path):
    port = _free_port()
    temp = tmp_path / "my-temp"
    labels_file = tmp_path / "labels.yaml"
    labels_file.write_text('"tier": "gold"\n"zone": "from-file"\n')
    out = ember_cli(cli_env, "start", "--head", "--port", str(port), "--num-cpus", "1",
                    "--labels", "zone=a,cpu-family=amd", "--labels-file", str(labels_file),
                    f"--temp-dir={temp}").stdout
    assert "Labels:" in out and "'zone': 'a'" in out
    # The session (logs, port files) lives under --temp-dir, private as the default root's.
    sessions = glob.glob(str(temp / "session_*"))
    assert len(sessions) == 1 and os.path.isdir(os.path.join(sessions[0], "logs"))
    assert stat.S_IMODE(os.stat(temp).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(sessions[0]).st_mode) == 0o700
    assert glob.glob(os.path.join(sessions[0], "logs", "raylet-*.out"))
    assert f"Logs: {sessions[0]}/logs" in out
    ember_cli(cli_env, "start", f"--address=127.0.0.1:{port}", "--num-cpus", "1",
              "--labels", '{"zone": "b"}', f"--temp-dir={temp}")
    driver = textwrap.dedent("""
        import ember as ray
        ray.init(address="auto")
        for n in sorted(ray.nodes(), key=lambda n: not n["IsHead"]):
            print("NODE", n["IsHead"], sorted((k, v) for k, v in n["Labels"].items() if k != "ray.io/node-id"),
                  n["Labels"]["ray.io/node-id"] == n["NodeID"])
        @ray.remote(label_selector={"zone": "b"})
        def f():
            return ray.get_runtime_context().get_node_labels()["zone"]
        print("RAN ON", ray.get(f.remote(), timeout=60))
        ray.shutdown()
    """)
    r = subprocess.run([sys.executable, "-c", driver], env=cli_env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert ("NODE True [('cpu-family', 'amd'), ('tier', 'gold'), ('zone', 'a')] True" in r.stdout), r.stdout
    assert "NODE False [('zone', 'b')] True" in r.stdout, r.stdout
    assert "RAN ON b" in r.stdout
    assert len(glob.glob(str(temp / "session_*"))) == 2
    assert "Stopped 2 node(s)" in ember_cli(cli_env, "stop").stdout


def test_start_refuses_bad_labels_and_unsafe_temp_dirs(cli_env, tmp_path):
    port = str(_free_port())
    r = ember_cli(cli_env, "start", "--head", "--port", port, "--labels", "zone=a b", check=False)
    assert r.returncode != 0 and "--labels: invalid value 'a b' of label 'zone'" in r.stderr
    r = ember_cli(cli_env, "start", "--head", "--port", port, "--labels", "ray.io/node-id=x", check=False)
    assert r.returncode != 0 and "'ray.io/node-id' is set by Ember" in r.stderr
    r = ember_cli(cli_env, "start", "--head", "--port", port, "--labels-file",
                  str(tmp_path / "none.yaml"), check=False)
    assert r.returncode != 0 and "--labels-file" in r.stderr and "none.yaml" in r.stderr
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    r = ember_cli(cli_env, "start", "--head", "--port", port, f"--temp-dir={shared}", check=False)
    assert r.returncode == 1 and "writable by group or others" in r.stderr and str(shared) in r.stderr
    assert not glob.glob(str(shared / "session_*"))
