"""The dashboard's job REST API against a cluster started with `ember start --head
--dashboard-port 0`: Ember's JobSubmissionClient (working_dir upload, env_vars, metadata,
status, logs, websocket tail, stop, delete, list, errors), Ray 2.60's own JobSubmissionClient
in a subprocess of the Ray venv (the compatibility proof), and the state REST API."""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request

import psutil
import pytest

from ember.job_submission import JobStatus, JobSubmissionClient, JobType
from ember_common import auth

# Ray 2.60 is not a dependency: its interpreter (a venv with `ray[default]==2.60.0`) is optional.
RAY_PYTHON = os.environ.get("EMBER_TEST_RAY_PYTHON", ".rayvenv/bin/python")


def ember_cli(env, *args, check=True):
    r = subprocess.run([sys.executable, "-m", "ember.scripts", *args], env=env, capture_output=True,
                       text=True, timeout=120)
    if check and r.returncode != 0:
        raise AssertionError(f"ember {' '.join(args)} failed ({r.returncode}): {r.stdout}{r.stderr}")
    return r


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dash-jobs")
    env = dict(os.environ)
    env["EMBER_TEMP_DIR"] = str(tmp / "ember-tmp")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = ember_cli(env, "start", "--head", "--port", str(port), "--num-cpus", "2", "--dashboard-port", "0").stdout
    info = json.loads((tmp / "ember-tmp" / "ember_current_cluster").read_text())
    url = info["dashboard_url"]
    assert f"Dashboard: {url}" in out
    yield url, env, info["gcs_address"]
    ember_cli(env, "stop", check=False)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(
            str(tmp) in " ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])):
        time.sleep(0.1)
    left = [p.info["cmdline"] for p in psutil.process_iter(["cmdline"]) if str(tmp) in " ".join(p.info["cmdline"] or [])]
    assert not left, f"ember stop left processes: {left}"


def _wait_status(client, sid, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while True:
        status = client.get_job_status(sid)
        if status.is_terminal() or time.monotonic() > deadline:
            return status
        time.sleep(0.2)


def test_submit_with_working_dir_env_and_metadata(dashboard, tmp_path):
    url, _, _ = dashboard
    (tmp_path / "data.txt").write_text("shipped")
    (tmp_path / "prog.py").write_text(textwrap.dedent("""
        import os
        import ember
        ember.init()
        print("RESULT", ember.get([ember.remote(lambda x: x * 2).remote(i) for i in range(3)]),
              open("data.txt").read(), os.environ["GREETING"])
    """))
    client = JobSubmissionClient(url)
    sid = client.submit_job(entrypoint="python prog.py", runtime_env={"working_dir": str(tmp_path),
                            "env_vars": {"GREETING": "hi"}}, metadata={"owner": "test"}, submission_id="wd-job",
                            entrypoint_num_cpus=1)
    assert sid == "wd-job"
    assert _wait_status(client, sid) == JobStatus.SUCCEEDED, client.get_job_logs(sid)
    assert "RESULT [0, 2, 4] shipped hi" in client.get_job_logs(sid)
    info = client.get_job_info(sid)
    assert info.type == JobType.SUBMISSION and info.metadata == {"owner": "test"} and info.driver_exit_code == 0
    assert info.runtime_env["working_dir"].startswith("gcs://_ray_pkg_") and info.end_time >= info.start_time
    assert sid in [j.submission_id for j in client.list_jobs()]
    from ember.util.state import list_actors, list_nodes

    supervisor = list_actors(address=dashboard[2], filters=[("name", "=", sid)], detail=True)[0]
    assert supervisor.class_name == "JobSupervisor" and supervisor.required_resources == {"CPU": 1.0}
    deadline = time.monotonic() + 30  # the supervisor ends with its job, releasing its CPU
    while list_actors(address=dashboard[2], filters=[("name", "=", sid)])[0].state != "DEAD" or \
            list_nodes(address=dashboard[2], detail=True)[0].resources_available["CPU"] != 2.0:
        assert time.monotonic() < deadline, list_nodes(address=dashboard[2], detail=True)
        time.sleep(0.2)
    assert "RESULT [0, 2, 4] shipped hi" in client.get_job_logs(sid)  # kept after the supervisor ended
    assert client.delete_job(sid) is True
    with pytest.raises(RuntimeError, match="404"):
        client.get_job_info(sid)


def test_tail_stop_and_failures(dashboard):
    url, _, _ = dashboard
    client = JobSubmissionClient(url)
    sid = client.submit_job(entrypoint="python -c \"import time\nfor i in range(200):\n print('tick', i, flush=True); time.sleep(0.1)\"")

    async def first_ticks():
        seen = ""
        async with contextlib.aclosing(client.tail_job_logs(sid)) as chunks:  # closes the websocket
            async for chunk in chunks:
                seen += chunk
                if "tick 3" in seen:
                    return seen
        return seen

    assert "tick 0" in asyncio.run(asyncio.wait_for(first_ticks(), 60))
    with pytest.raises(RuntimeError, match="non-terminal state RUNNING"):
        client.delete_job(sid)
    assert client.stop_job(sid) is True
    assert _wait_status(client, sid) == JobStatus.STOPPED
    assert client.stop_job(sid) is False

    async def rest():
        return "".join([c async for c in client.tail_job_logs(sid)])

    assert "tick 0" in asyncio.run(asyncio.wait_for(rest(), 30))  # a finished job: all, then closed
    failing = client.submit_job(entrypoint="echo boom; exit 7")
    assert _wait_status(client, failing) == JobStatus.FAILED
    info = client.get_job_info(failing)
    assert info.driver_exit_code == 7 and "exit code 7" in info.message and "boom" in client.get_job_logs(failing)


def test_the_job_list_holds_jobs_not_the_clusters_own_drivers(dashboard, tmp_path):
    """The dashboard and the job CLI connect as drivers of their own (in `_ember_` namespaces);
    the job listings leave them out, as Ray's leave out its internal ones."""
    url, env, gcs = dashboard
    ember_cli(env, "job", "list", "--address", url)
    user = tmp_path / "user_driver_marker.py"
    user.write_text("import ember\nember.init(address=%r)\nember.shutdown()\n" % gcs)
    subprocess.run([sys.executable, str(user)], env=env, check=True, timeout=120)
    with urllib.request.urlopen(urllib.request.Request(url + "/api/jobs/", headers=auth.http_headers()),
                                timeout=10) as r:
        drivers = [j["entrypoint"] for j in json.loads(r.read()) if j["type"] == "DRIVER"]
    assert any("user_driver_marker.py" in e for e in drivers), drivers
    assert not [e for e in drivers if "ember_dashboard" in e or " job list" in e], drivers
    from ember.util.state import list_jobs

    listed = [j.entrypoint for j in list_jobs(address=gcs) if j.type == "DRIVER"]
    assert any("user_driver_marker.py" in e for e in listed) and not any("ember_dashboard" in e for e in listed)


def test_bad_requests_name_the_problem(dashboard):
    url, _, _ = dashboard
    client = JobSubmissionClient(url)
    client.submit_job(entrypoint="true", submission_id="dup-job")
    with pytest.raises(RuntimeError, match="dup-job already exists"):
        client.submit_job(entrypoint="true", submission_id="dup-job")
    with pytest.raises(RuntimeError, match=r"runtime_env fields \['pip'\] are not supported"):
        client.submit_job(entrypoint="true", runtime_env={"pip": ["requests"]})
    with pytest.raises(RuntimeError, match="entrypoint must be a non-empty"):
        client.submit_job(entrypoint="  ")
    with pytest.raises(RuntimeError, match="404.*nope does not exist"):
        client.get_job_logs("nope")
    for body, match in ((b"{", b"not JSON"), (b"[]", b"JSON object"), (b'{"entrypoint": "x", "colour": 1}', b"colour")):
        req = urllib.request.Request(url + "/api/jobs/", data=body, method="POST", headers=auth.http_headers())
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=10)
        assert e.value.code == 400 and match in e.value.read()
    req = urllib.request.Request(url + "/api/packages/gcs/_ray_pkg_x.zip", data=b"not a zip", method="PUT",
                                 headers=auth.http_headers())
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 400 and b"not a zip" in e.value.read()
    assert _wait_status(client, "dup-job") == JobStatus.SUCCEEDED  # the cluster still runs jobs


def test_state_rest_api(dashboard):
    url, _, _ = dashboard
    with urllib.request.urlopen(urllib.request.Request(
            url + "/api/v0/nodes?filter_keys=state&filter_predicates=%3D&filter_values=ALIVE",
            headers=auth.http_headers()), timeout=10) as r:
        d = json.loads(r.read())
    assert d["result"] is True and d["data"]["result"]["total"] == 1
    node = d["data"]["result"]["result"][0]
    assert node["state"] == "ALIVE" and node["resources_total"]["CPU"] == 2.0
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(
            url + "/api/v0/nodes?filter_keys=x&filter_predicates=%3D&filter_values=1", headers=auth.http_headers()),
            timeout=10)
    assert e.value.code == 400 and b"'x' is not supported" in e.value.read()


@pytest.mark.skipif(not os.path.exists(RAY_PYTHON), reason=f"Ray 2.60's venv is not at {RAY_PYTHON}")
def test_rays_own_job_submission_client(dashboard, tmp_path):
    """Ray 2.60's JobSubmissionClient, unchanged, against Ember's dashboard; it sends the token
    as Ray's does under token auth (RAY_AUTH_MODE=token, RAY_AUTH_TOKEN)."""
    url, _, _ = dashboard
    (tmp_path / "prog.py").write_text("import time\nprint('from working dir', open('data.txt').read())\n"
                                      "for i in range(3):\n    print('tick', i, flush=True); time.sleep(0.2)\n")
    (tmp_path / "data.txt").write_text("DATA")
    script = textwrap.dedent(f"""
        import asyncio, json, time
        from ray.job_submission import JobSubmissionClient, JobStatus
        c = JobSubmissionClient({url!r})
        sid = c.submit_job(entrypoint="python prog.py", runtime_env={{"working_dir": {str(tmp_path)!r}}},
                           submission_id="ray-client-job", metadata={{"who": "ray"}})
        async def tail():
            return "".join([lines async for lines in c.tail_job_logs(sid)])
        tailed = asyncio.run(tail())
        info = c.get_job_info(sid)
        out = {{"sid": sid, "tailed": tailed, "status": str(c.get_job_status(sid)), "logs": c.get_job_logs(sid),
               "metadata": info.metadata, "listed": [j.submission_id for j in c.list_jobs()]}}
        sid2 = c.submit_job(entrypoint="sleep 60")
        while c.get_job_status(sid2) != JobStatus.RUNNING:
            time.sleep(0.2)
        out["stopped"] = c.stop_job(sid2)
        while not c.get_job_status(sid2).is_terminal():
            time.sleep(0.2)
        out["status2"] = str(c.get_job_status(sid2))
        out["deleted"] = c.delete_job(sid2)
        print("OUT" + json.dumps(out))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "EMBER_"))}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=auth.load().token or "")
    r = subprocess.run([RAY_PYTHON, "-c", script], capture_output=True, text=True, timeout=150, env=env)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("OUT")]
    assert lines, r.stdout + r.stderr[-3000:]
    out = json.loads(lines[0][3:])
    assert out["sid"] == "ray-client-job" and out["status"] == "SUCCEEDED"
    assert "from working dir DATA" in out["tailed"] and "tick 2" in out["tailed"]
    assert out["logs"].endswith("tick 2\n") and out["metadata"]["who"] == "ray"
    assert "ray-client-job" in out["listed"]
    assert out["stopped"] is True and out["status2"] == "STOPPED" and out["deleted"] is True


def test_endpoints_need_the_token_and_health_is_open(dashboard):
    url, _, _ = dashboard

    def get(path, headers=None):
        try:
            with urllib.request.urlopen(urllib.request.Request(url + path, headers=headers or {}), timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    assert get("/api/healthz") == (200, b"success")
    for path in ("/api/version", "/api/jobs/", "/api/v0/nodes", "/api/cluster"):
        status, body = get(path)
        assert status == 401 and b"ember get-auth-token" in body, (path, status, body)
        assert get(path, {"Authorization": "Bearer " + "0" * 64})[0] == 403, path
        assert get(path, auth.http_headers())[0] == 200, path
    token = auth.load().token
    assert get("/api/version", {"Cookie": f"ember-authentication-token={token}"})[0] == 200
    assert get("/api/version", {"X-Ray-Authorization": f"Bearer {token}"})[0] == 200
    status, page = get("/", {"Accept": "text/html"})  # a browser without the cookie: the login form
    assert status == 401 and b'name="token"' in page
    with pytest.raises(RuntimeError, match="403"):  # a caller's own header wins over the token file
        JobSubmissionClient(url, headers={"Authorization": "Bearer wrong"})
