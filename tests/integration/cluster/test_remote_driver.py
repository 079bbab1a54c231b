"""Remote drivers (Ray Client): a client process that is given only the client proxy's address
runs tasks, actors, named actors, a 100 MB put/get, wait, cancel and kill through it, sees a
task's error re-raised as Ray does, and holds no connection but to the proxy. A wrong token is
refused. One cluster and one proxy for the module; the workload runs once in one client process
and each test checks its part of the report."""
from __future__ import annotations

import json
import os
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

WORKLOAD = textwrap.dedent('''
    import json, os, sys, time, traceback
    import numpy as np
    import psutil
    import ember
    from ember import exceptions as ex

    report = {}

    def part(name):
        def wrap(fn):
            try:
                report[name] = fn()
            except BaseException as e:
                report[name] = {"failed": f"{type(e).__name__}: {e}", "tb": traceback.format_exc()}
            return fn
        return wrap

    info = ember.init(os.environ["PROXY_ADDRESS"], namespace="remote-ns")
    report["init"] = {"initialized": ember.is_initialized(), "namespace": info["namespace"]}

    @ember.remote
    def add(a, b):
        return a + b

    @ember.remote(num_returns=2)
    def pair(x):
        return x, x * 2

    @ember.remote
    def total(values):
        return sum(ember.get(values))

    @ember.remote
    def fail(msg):
        raise ValueError(msg)

    @ember.remote
    def sleepy(s):
        end = time.time() + s
        while time.time() < end:  # short sleeps: cancel interrupts between them
            time.sleep(0.05)
        return s

    @ember.remote
    class Counter:
        def __init__(self, start=0):
            self.n = start
        def incr(self, by=1):
            self.n += by
            return self.n
        def pid(self):
            return os.getpid()

    @ember.remote
    def bump(counter):
        return ember.get(counter.incr.remote(10))

    @part("tasks")
    def _():
        one = ember.get(add.remote(1, 2))
        many = ember.get([add.remote(i, i) for i in range(20)])
        a, b = pair.remote(21)
        x = ember.put(5)
        by_ref = ember.get(add.remote(x, 1))  # a top-level ref argument is resolved
        nested = ember.get(total.remote([ember.put(i) for i in range(4)]))  # refs inside a value
        opts = ember.get(add.options(num_cpus=0.5, name="named-add").remote(2, 2))
        return {"one": one, "many": many, "pair": ember.get([a, b]), "by_ref": by_ref,
                "nested": nested, "options": opts, "is_ref": isinstance(x, ember.ObjectRef)}

    @part("actors")
    def _():
        c = Counter.remote(5)
        first = ember.get(c.incr.remote())
        ember.get([c.incr.remote() for _ in range(9)])
        from_task = ember.get(bump.remote(c))  # a handle passed to a task
        after = ember.get(c.incr.options(name="incr-call").remote(0))
        try:
            c.nope
            missing = None
        except AttributeError as e:
            missing = str(e)
        return {"first": first, "from_task": from_task, "after": after, "missing": missing}

    @part("named")
    def _():
        Counter.options(name="shared", lifetime="detached").remote(100)
        h = ember.get_actor("shared")
        value = ember.get(h.incr.remote())
        try:
            ember.get_actor("no-such-actor")
            unknown = None
        except ValueError as e:
            unknown = str(e)
        names = ember.util.list_named_actors()
        ember.kill(h)
        return {"value": value, "unknown": unknown, "names": names}

    @part("big")
    def _():
        arr = np.arange(100 * 1024 * 1024 // 8, dtype=np.int64)
        t0 = time.perf_counter()
        ref = ember.put(arr)
        put_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        back = ember.get(ref)
        get_s = time.perf_counter() - t0
        return {"equal": bool(np.array_equal(arr, back)), "nbytes": int(back.nbytes),
                "put_s": put_s, "get_s": get_s}

    @part("wait")
    def _():
        slow, fast = sleepy.remote(30), sleepy.remote(0)
        ready, rest = ember.wait([slow, fast], num_returns=1, timeout=20)
        try:
            ember.get(slow, timeout=0.2)
            timed_out = False
        except ex.GetTimeoutError:
            timed_out = True
        ember.cancel(slow)
        try:
            ember.get(slow, timeout=20)
            cancelled = None
        except ex.TaskCancelledError as e:
            cancelled = type(e).__name__
        return {"ready_is_fast": ready == [fast] and ready[0] is fast, "rest_is_slow": rest == [slow],
                "timed_out": timed_out, "cancelled": cancelled}

    @part("error")
    def _():
        try:
            ember.get(fail.remote("boom"))
        except ValueError as e:
            return {"is_task_error": isinstance(e, ex.RayTaskError), "text": str(e)}
        return {"raised": False}

    @part("kill")
    def _():
        c = Counter.remote()
        ember.get(c.incr.remote())
        ember.kill(c)
        try:
            ember.get(c.incr.remote(), timeout=20)
            return {"died": None}
        except ex.RayActorError as e:
            return {"died": type(e).__name__}

    @part("release")
    def _():
        conn = ember.util.client.client.active()
        before = conn.call("held")["refs"]
        refs = [ember.put(i) for i in range(5)]
        copy = refs[0]
        held = conn.call("held")["refs"]
        del refs
        time.sleep(1.5)  # releases go out within a second
        one_left = conn.call("held")["refs"]
        del copy
        time.sleep(1.5)
        return {"added": held - before, "one_left": one_left - before,
                "none_left": conn.call("held")["refs"] - before}

    @part("serve")
    def _():
        import urllib.request
        from ember import serve

        @serve.deployment
        class Hello:
            def __call__(self, request):
                return "hello from a remote driver"

        handle = serve.run(Hello.bind(), port=int(os.environ["SERVE_PORT"]), route_prefix="/remote")
        url = f"http://127.0.0.1:{os.environ['SERVE_PORT']}/remote"
        body = urllib.request.urlopen(url, timeout=30).read().decode()
        try:
            handle.remote()
            relayed = True
        except NotImplementedError:
            relayed = False
        return {"body": body, "handle_relayed": relayed}

    @part("cluster")
    def _():
        ctx = ember.get_runtime_context()
        return {"cpus": ember.cluster_resources().get("CPU"), "nodes": len(ember.nodes()),
                "available_cpu": "CPU" in ember.available_resources(),
                "namespace": ctx.get_namespace(), "job_id": ctx.get_job_id()}

    @part("unsupported")
    def _():
        try:
            ember.get_gpu_ids()
        except NotImplementedError as e:
            return str(e)
        return None

    @part("connections")
    def _():
        me = psutil.Process()
        ports = {c.raddr.port for c in me.net_connections(kind="inet") if c.raddr}
        return sorted(ports)

    ember.shutdown()
    report["after_shutdown"] = ember.is_initialized()
    print("REPORT " + json.dumps(report))
''')


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
