"""Each node's log files through its raylet's LogService, on a 2-node LocalCluster whose second
node has a log directory of its own (as a node on another machine): the RPC (confined to that
directory, authenticated), `ember logs` (list, a file, worker --pid, actor --follow, task --id),
`ember.util.state.list_logs` / `get_log`, and the dashboard's logs endpoints over HTTP."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import grpc
import pytest

import ember
from ember._private import node as node_mod
from ember.testing.cluster import LocalCluster, wait_for
from ember.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from ember.util.state import get_log, list_logs
from ember_common import auth
from ember_common.proto import logs_pb2, logs_pb2_grpc


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster() as c:
        head = c.add_node({"CPU": 1}, is_head=True, num_prestart_workers=0)
        other = c.add_node({"CPU": 2}, own_session=True, num_prestart_workers=0)
        ember.init(address=c.gcs_address, log_to_driver=False)
        try:
            yield {"c": c, "head": head, "other": other, "gcs": c.gcs_address,
                   "logs": os.path.join(other.record.session_dir, "logs")}
        finally:
            ember.shutdown()


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def on(node):
    return NodeAffinitySchedulingStrategy(node.node_id, soft=False)


@ember.remote
def shout(text):
    print(text, flush=True)
    return os.getpid()


@ember.remote
class Speaker:
    def say(self, text):
        print(text, flush=True)
        return os.getpid()


def cli(gcs, *args, timeout=60):
    return subprocess.run([sys.executable, "-m", "ember.scripts", "logs", *args, "--address", gcs],
                          capture_output=True, text=True, timeout=timeout)


def test_a_print_on_the_other_node_is_read_through_its_raylet(cluster):
    pid = ember.get(shout.options(scheduling_strategy=on(cluster["other"])).remote("hello from node two"))
    other_id = cluster["other"].node_id
    # The file is in the other node's own log directory, not the head's.
    wait_for(lambda: any("hello from node two" in read(os.path.join(cluster["logs"], n))
                         for n in os.listdir(cluster["logs"]) if n.startswith("worker-")), what="the print")
    groups = list_logs(node_id=other_id)
    assert groups["worker_out"] and any(n.startswith("raylet-") for n in groups["raylet"])
    head_files = {n for names in list_logs(node_id=cluster["head"].node_id).values() for n in names}
    assert not head_files & set(groups["worker_out"])
    text = "".join(get_log(pid=pid, node_id=other_id))
    assert "hello from node two" in text

    # The CLI, from the driver's machine: the table, the worker by pid, the file by its name.
    listing = cli(cluster["gcs"])
    assert listing.returncode == 0, listing.stderr
    assert other_id[:12] in listing.stdout and cluster["head"].node_id[:12] in listing.stdout
    r = cli(cluster["gcs"], "worker", "--pid", str(pid), "--node-id", other_id)
    assert r.returncode == 0 and "hello from node two" in r.stdout, r.stderr
    name = next(n for n in groups["worker_out"]
                if "hello from node two" in "".join(get_log(filename=n, node_id=other_id)))
    r = cli(cluster["gcs"], name, "--tail", "5")  # found on whichever node has it
    assert r.returncode == 0 and "hello from node two" in r.stdout, r.stderr
    assert "the last 5 lines" in r.stderr
    r = cli(cluster["gcs"], "no-such-file*.out")
    assert r.returncode == 1 and "no log files match" in r.stderr


def test_follow_sees_a_new_line(cluster):
    actor = Speaker.options(scheduling_strategy=on(cluster["other"])).remote()
    ember.get(actor.say.remote("first line"))
    actor_id = actor._actor_id.hex()
    proc = subprocess.Popen([sys.executable, "-m", "ember.scripts", "logs", "actor", "--id", actor_id,
                             "--follow", "--address", cluster["gcs"]],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        wait_for(lambda: any("first line" in ln for ln in seen), 30, what="the actor's first line")
        ember.get(actor.say.remote("a new line"))
        wait_for(lambda: any("a new line" in ln for ln in seen), 30, what="the followed new line")
    finally:
        proc.terminate()
        proc.wait(10)
        reader.join(5)
        proc.stdout.close()
        proc.stderr.close()
    assert any(ln.startswith(":task_name:") for ln in seen)  # the marker, readable
    # The state API follows too (from the last line on), and stops when the caller stops.
    chunks = get_log(actor_id=actor_id, follow=True, tail=1)
    got: list[str] = []

    def read() -> None:
        for c in chunks:
            got.append(c)
            if "third" in c:
                return

    t = threading.Thread(target=read, daemon=True)
    t.start()
    ember.get(actor.say.remote("third"))
    t.join(30)
    assert any("third" in c for c in got) and not any("first line" in c for c in got), got
    chunks.close()
    ember.kill(actor)


def test_a_tasks_own_lines(cluster):
    ref = shout.options(scheduling_strategy=on(cluster["other"]), name="loud").remote("only mine")
    ember.get(ref)
    ember.get(shout.options(scheduling_strategy=on(cluster["other"]), name="quiet").remote("not mine"))
    task_id = ref.task_id().hex()
    from ember.util.state import list_tasks

    wait_for(lambda: [t for t in list_tasks(filters=[("task_id", "=", task_id)]) if t.worker_pid],
             what="the task's events")
    r = cli(cluster["gcs"], "task", "--id", task_id)
    assert r.returncode == 0, r.stderr
    assert "only mine" in r.stdout and "not mine" not in r.stdout


def _raylet_stub(cluster, token: str | None):
    target = cluster["other"].record.raylet_address
    ch = grpc.insecure_channel(target)
    md = [("authorization", f"Bearer {token}")] if token else []
    return ch, logs_pb2_grpc.LogServiceStub(ch), md


def test_the_rpc_stays_in_the_log_directory_and_needs_the_token(cluster, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("do not read\n")
    os.symlink(secret, os.path.join(cluster["logs"], "escape.log"))
    token = auth.require_token().token
    ch, stub, md = _raylet_stub(cluster, token)
    try:
        for name, code in [("../../secret.txt", grpc.StatusCode.INVALID_ARGUMENT),
                           (str(secret), grpc.StatusCode.INVALID_ARGUMENT),
                           ("escape.log", grpc.StatusCode.NOT_FOUND),
                           ("nope.log", grpc.StatusCode.NOT_FOUND)]:
            with pytest.raises(grpc.RpcError) as e:
                list(stub.StreamLog(logs_pb2.StreamLogRequest(filename=name, lines=-1), metadata=md, timeout=10))
            assert e.value.code() == code, (name, e.value)
        with pytest.raises(grpc.RpcError) as e:
            list(stub.StreamLog(logs_pb2.StreamLogRequest(pid=1, lines=-1), metadata=md, timeout=10))
        assert e.value.code() == grpc.StatusCode.NOT_FOUND and "no worker with pid 1" in e.value.details()
        names = [f.name for f in stub.ListLogs(logs_pb2.ListLogsRequest(), metadata=md, timeout=10).files]
        assert "escape.log" not in names and names
        for bad in (None, "0" * 64):  # no token, a wrong one
            with pytest.raises(grpc.RpcError) as e:
                stub.ListLogs(logs_pb2.ListLogsRequest(), metadata=_raylet_stub(cluster, bad)[2], timeout=10)
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.RpcError) as e:
                list(stub.StreamLog(logs_pb2.StreamLogRequest(filename=names[0]),
                                    metadata=_raylet_stub(cluster, bad)[2], timeout=10))
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        ch.close()
        os.unlink(os.path.join(cluster["logs"], "escape.log"))


def _get(url: str, token: str | None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_the_dashboard_shows_every_nodes_logs(cluster):
    pid = ember.get(shout.options(scheduling_strategy=on(cluster["other"])).remote("for the dashboard"))
    dash = node_mod.start_dashboard(cluster["c"].session_dir, cluster["gcs"], port=0)
    try:
        base, token = f"http://127.0.0.1:{dash.port}", auth.require_token().token
        assert _get(base + "/api/logs", None)[0] == 401
        code, body = _get(base + "/api/logs", token)
        assert code == 200, body
        nodes = {n["node_id"]: n for n in json.loads(body)["nodes"]}
        other_id = cluster["other"].node_id
        assert set(nodes) == {other_id, cluster["head"].node_id}
        assert all(n["error"] is None and n["files"] for n in nodes.values())
        wname = next(f["name"] for f in nodes[other_id]["files"]
                     if f["name"].startswith("worker-") and f["name"].endswith(".out")
                     and b"for the dashboard" in _get(f"{base}/api/logs/file?node_id={other_id}&name={f['name']}",
                                                      token)[1])
        code, text = _get(f"{base}/api/logs/file?node_id={other_id}&name={wname}&lines=3", token)
        assert code == 200 and b"for the dashboard" in text and len(text.splitlines()) <= 3
        assert _get(f"{base}/api/logs/file?node_id={other_id}&name=..%2Fx", token)[0] == 400
        assert _get(f"{base}/api/logs/file?node_id={other_id}&name=nope.log", token)[0] == 404
        # Ray's REST shapes: list_logs's reply and get_log's file.
        code, body = _get(f"{base}/api/v0/logs?node_id={other_id}", token)
        assert code == 200 and wname in json.loads(body)["data"]["result"]["worker_out"]
        code, text = _get(f"{base}/api/v0/logs/file?node_id={other_id}&pid={pid}&lines=10", token)
        assert code == 200 and b"for the dashboard" in text
        # A submitted job's driver output, found on whichever node its supervisor ran.
        from ember.job_submission import JobStatus, JobSubmissionClient

        client = JobSubmissionClient(base)
        sid = client.submit_job(entrypoint="echo job says hello", submission_id="logs-job")
        deadline = time.monotonic() + 60
        while client.get_job_status(sid) not in (JobStatus.SUCCEEDED, JobStatus.FAILED):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert "job says hello" in "".join(get_log(submission_id=sid))
        r = cli(cluster["gcs"], "job", "--id", sid)
        assert r.returncode == 0 and "job says hello" in r.stdout, r.stderr
    finally:
        node_mod.stop_process(dash.pid, popen=dash.popen)
