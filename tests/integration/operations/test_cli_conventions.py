"""The `ember` console script's conventions against a real cluster (`ember start --head` with a
dashboard): every command finds the cluster through --address, $EMBER_ADDRESS or $RAY_ADDRESS
(in that order) given as the GCS's HOST:PORT or the dashboard's http://HOST:PORT; failures are
one `ember: error:` line (the traceback only with --verbose); Ray's `ray job` flags."""
from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time

import psutil
import pytest

EMBER = os.path.join(os.path.dirname(sys.executable), "ember")


def ember_cli(env, *args, check=True, timeout=120):
    r = subprocess.run([EMBER, *args], env=env, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"ember {' '.join(args)} failed ({r.returncode}): {r.stdout}{r.stderr}")
    return r


def one_line_error(r, rc, *words):
    assert r.returncode == rc, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.startswith("ember: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert "Traceback" not in r.stderr
    for w in words:
        assert w in r.stderr, r.stderr


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(env of the cluster's own temp dir, GCS address, dashboard URL, env with no cluster)."""
    tmp = tmp_path_factory.mktemp("cli-conv")
    env = {k: v for k, v in os.environ.items() if k not in ("EMBER_ADDRESS", "RAY_ADDRESS")}
    env["EMBER_TEMP_DIR"] = str(tmp / "ember-tmp")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ember_cli(env, "start", "--head", "--port", str(port), "--num-cpus", "2", "--resources",
              '{"disk": 2}', "--dashboard-port", "0")
    info = json.loads((tmp / "ember-tmp" / "ember_current_cluster").read_text())
    bare = dict(env, EMBER_TEMP_DIR=str(tmp / "elsewhere"))  # no cluster started from here
    yield env, info["gcs_address"], info["dashboard_url"], bare
    ember_cli(env, "stop", "--force", check=False)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(
            str(tmp) in " ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])):
        time.sleep(0.1)


def test_every_command_honours_ember_address_and_ray_address(cluster):
    _, gcs, _, bare = cluster
    r = ember_cli(dict(bare, EMBER_ADDRESS=gcs), "status")
    assert f"Cluster status ({gcs})" in r.stdout
    r = ember_cli(dict(bare, RAY_ADDRESS=gcs), "list", "nodes", "--format", "json")
    assert json.loads(r.stdout)[0]["state"] == "ALIVE"
    ember_cli(dict(bare, RAY_ADDRESS=gcs), "summary", "actors")
    # flag > $EMBER_ADDRESS > $RAY_ADDRESS > the cluster started here
    r = ember_cli(dict(bare, EMBER_ADDRESS="127.0.0.1:1", RAY_ADDRESS=gcs), "status", "--address", gcs)
    assert f"({gcs})" in r.stdout
    one_line_error(ember_cli(dict(bare, EMBER_ADDRESS="127.0.0.1:1", RAY_ADDRESS=gcs), "status",
                             check=False), 1, "127.0.0.1:1")
    one_line_error(ember_cli(dict(cluster[0], RAY_ADDRESS="127.0.0.1:1"), "list", "actors",
                             check=False), 1, "127.0.0.1:1")


def test_the_dashboard_url_is_an_address_too(cluster):
    _, gcs, url, bare = cluster
    r = ember_cli(bare, "status", "--address", url)
    assert f"Cluster status ({gcs})" in r.stdout
    r = ember_cli(dict(bare, RAY_ADDRESS=url), "list", "nodes", "--format", "json")
    assert len(json.loads(r.stdout)) == 1
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    one_line_error(ember_cli(bare, "list", "nodes", "--address", dead, check=False), 1,
                   f"cannot reach the dashboard at {dead}")
    one_line_error(ember_cli(bare, "start", "--address", dead, check=False), 1,
                   f"cannot reach the dashboard at {dead}")


def test_failures_are_one_line_and_verbose_adds_the_traceback(cluster):
    bare = cluster[3]
    r = ember_cli(bare, "job", "status", "some_job", check=False)
    one_line_error(r, 1, "no running Ember cluster")
    r = ember_cli(bare, "job", "status", "some_job", "--verbose", check=False)
    assert r.returncode == 1 and "Traceback" in r.stderr and "ember: error:" in r.stderr
    r = ember_cli(dict(bare, EMBER_LOG_LEVEL="DEBUG"), "status", check=False)
    assert r.returncode == 1 and "Traceback" in r.stderr
    one_line_error(ember_cli(bare, "job", "submit", "--entrypoint-num-cpus", "x", check=False), 2,
                   "--entrypoint-num-cpus")
    one_line_error(ember_cli(bare, "status", "--address", "nohostport", check=False), 2, "HOST:PORT")


def test_version():
    r = subprocess.run([EMBER, "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("ember 0."), r


def test_job_submit_with_rays_flags_then_list_and_follow(cluster):
    env, _, url, bare = cluster
    sid = "conv_job_1"
    entry = ["python", "-c", "import os, time; time.sleep(1); print('X=' + os.environ['X']); "
             "print('done')", "--with-a-rather-long-argument-list", "and-more-words-after-it"]
    r = ember_cli(env, "job", "submit", "--no-wait", "--submission-id", sid,
                  "--runtime-env-json", '{"env_vars": {"X": "from-env-json"}}',
                  "--entrypoint-num-cpus", "1", "--entrypoint-resources", '{"disk": 1}',
                  "--metadata-json", '{"owner": "cli-test"}', "--", *entry)
    assert r.stdout.strip() == sid, r.stdout + r.stderr
    r = ember_cli(env, "job", "logs", sid, "--follow", "--address", url)
    assert "X=from-env-json\ndone\n" in r.stdout
    r = ember_cli(dict(bare, RAY_API_SERVER_ADDRESS=url), "job", "list")  # as `ray job` reads it
    row = next(ln for ln in r.stdout.splitlines() if ln.startswith(sid))
    assert "SUCCEEDED (0)" in row and row.endswith("…"), r.stdout
    whole_words = {w.rstrip(",;:") for w in shlex.join(entry).split()}
    assert row.split()[-1].rstrip("…") in whole_words, row  # cut between words, not inside one
    got = json.loads(ember_cli(env, "get", "jobs", sid, "--format", "json").stdout)
    assert got["metadata"] == {"owner": "cli-test"}
    assert got["entrypoint_num_cpus"] == 1 and got["entrypoint_resources"] == {"disk": 1}
    for flag, value, words in (("--metadata-json", "[1]", "--metadata-json must be a JSON object"),
                               ("--entrypoint-resources", "{bad", "--entrypoint-resources is not valid JSON"),
                               ("--entrypoint-num-gpus", "-1", "entrypoint_num_gpus must be a number >= 0"),
                               ("--entrypoint-memory", "-5", "entrypoint_memory must be a number >= 0"),
                               ("--runtime-env", "env.yaml", "--runtime-env (a YAML file) is not supported")):
        one_line_error(ember_cli(env, "job", "submit", flag, value, "--", "true", check=False), 2, words)
