"""Serve's controller at work: rolling updates under load, autoscaling (up, down, to zero and
back), user_config reconfiguration, a controller restart, and the proxy run standalone."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time

import httpx
import pytest

import ember
from ember import serve
from ember.testing import wait_for as _wait_for


def wait_for(cond, timeout=30.0, what="condition"):
    return _wait_for(cond, timeout_s=timeout, interval_s=0.05, what=what)


@pytest.fixture(scope="module")
def url(serve_url):
    return serve_url


class _Load:
    """A few client threads sending requests until stopped (bounded by count and time)."""

    def __init__(self, url: str, clients: int = 4, max_requests: int = 5000, max_s: float = 60.0) -> None:
        self.url, self.results, self.errors = url, [], []
        self.stop = threading.Event()
        self.deadline = time.monotonic() + max_s
        self.max_requests = max_requests
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(clients)]

    def _run(self) -> None:
        with httpx.Client(timeout=30) as c:
            while not self.stop.is_set() and time.monotonic() < self.deadline \
                    and len(self.results) + len(self.errors) < self.max_requests:
                try:
                    r = c.get(self.url)
                    if r.status_code == 200:
                        self.results.append(r.text)
                    else:
                        self.errors.append(f"{r.status_code} {r.text}")
                except httpx.HTTPError as e:
                    self.errors.append(repr(e))

    def __enter__(self) -> _Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *a) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)


@serve.deployment(name="Versioned", num_replicas=2, graceful_shutdown_timeout_s=5, health_check_period_s=0.5)
class V1:
    async def __call__(self, request):
        await asyncio.sleep(0.01)
        return "v1"


@serve.deployment(name="Versioned", num_replicas=2, graceful_shutdown_timeout_s=5, health_check_period_s=0.5)
class V2:
    async def __call__(self, request):
        await asyncio.sleep(0.01)
        return "v2"


def test_rolling_update_with_zero_failed_requests(url):
    serve.run(V1.bind(), name="roll", route_prefix="/roll")
    with _Load(url + "/roll") as load:
        wait_for(lambda: len(load.results) > 20, 30, "load to start")
        serve.run(V2.bind(), name="roll", route_prefix="/roll")  # returns once v2 is RUNNING
        n = len(load.results)
        wait_for(lambda: len(load.results) > n + 40, 30, "requests after the update")
    assert not load.errors, load.errors[:5]
    assert load.results[0] == "v1" and load.results[-1] == "v2"
    wait_for(lambda: serve.status().applications["roll"].deployments["Versioned"].replica_states
             == {"RUNNING": 2}, 30, "the old replicas to drain and stop")
    serve.delete("roll")


@serve.deployment(user_config={"greeting": "hello"})
class Configurable:
    def __init__(self):
        self.pid = os.getpid()

    def reconfigure(self, config):
        self.greeting = config["greeting"]

    def __call__(self, request):
        return {"greeting": self.greeting, "pid": self.pid}


def test_user_config_is_applied_in_place(url):
    serve.run(Configurable.bind(), name="cfg", route_prefix="/cfg")
    first = httpx.get(url + "/cfg", timeout=30).json()
    assert first["greeting"] == "hello"
    serve.run(Configurable.options(user_config={"greeting": "bonjour"}).bind(), name="cfg", route_prefix="/cfg")
    wait_for(lambda: httpx.get(url + "/cfg", timeout=30).json()["greeting"] == "bonjour", 10, "reconfigure")
    assert httpx.get(url + "/cfg", timeout=30).json()["pid"] == first["pid"]  # same replica, no restart
    serve.delete("cfg")


@serve.deployment(max_ongoing_requests=10, ray_actor_options={"num_cpus": 0.5}, autoscaling_config={
    "min_replicas": 0, "max_replicas": 3, "initial_replicas": 0, "target_ongoing_requests": 2,
    "upscale_delay_s": 0.0, "downscale_delay_s": 0.5, "downscale_to_zero_delay_s": 1.0,
    "metrics_interval_s": 0.1})
class Elastic:
    async def __call__(self, request):
        await asyncio.sleep(float(request.query_params.get("s", "0")))
        return os.getpid()


def _running(app: str, dep: str) -> int:
    return serve.status().applications[app].deployments[dep].replica_states.get("RUNNING", 0)


def test_autoscaling_up_and_down_to_zero(url):
    serve.run(Elastic.bind(), name="auto", route_prefix="/auto")
    assert _running("auto", "Elastic") == 0
    r = httpx.get(url + "/auto", timeout=60)  # cold start: the request waits for a first replica
    assert r.status_code == 200
    stop = threading.Event()

    async def load():
        async with httpx.AsyncClient(timeout=60) as c:
            async def one():
                while not stop.is_set():
                    assert (await c.get(url + "/auto", params={"s": "0.3"})).status_code == 200
            await asyncio.gather(*[one() for _ in range(6)])

    t = threading.Thread(target=lambda: asyncio.run(load()), daemon=True)
    t.start()
    try:
        wait_for(lambda: _running("auto", "Elastic") == 3, 30, "scale up to 3 replicas")
    finally:
        stop.set()
        t.join(30)
    wait_for(lambda: _running("auto", "Elastic") == 0 and not serve.status().applications["auto"]
             .deployments["Elastic"].replica_states, 30, "scale down to 0")
    assert httpx.get(url + "/auto", timeout=60).status_code == 200  # and back up from zero
    serve.delete("auto")


@serve.deployment(num_replicas=1)
class Echo:
    def __call__(self, request):
        return {"path": request.url.path, "pid": os.getpid()}


def test_controller_restart_resumes(url):
    serve.run(Echo.bind(), name="echo", route_prefix="/echo")
    pid = httpx.get(url + "/echo", timeout=30).json()["pid"]
    ctrl = ember.get_actor("SERVE_CONTROLLER", namespace="serve")
    ember.kill(ctrl, no_restart=False)  # the controller restarts and reloads its state from the GCS KV
    # The old proxy (a child of the old controller's worker) may answer for a moment while it
    # stops, so first wait for the restarted controller, then for the proxy on the same port.
    wait_for(lambda: _status_or_none("echo") == "RUNNING", 60, "the restarted controller")
    # the restarted controller brings the embedded proxy back on its old port, and re-attaches
    # the running replica instead of replacing it, so the pid is unchanged
    wait_for(lambda: _echo_pid(url) == pid, 60, "the proxy to serve the same replica again")
    serve.delete("echo")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _status_or_none(app: str) -> str | None:
    try:
        return serve.status().applications[app].status
    except Exception:  # the controller is restarting
        return None


def _echo_pid(url: str) -> int | None:
    try:
        return httpx.get(url + "/echo", timeout=5).json()["pid"]
    except httpx.HTTPError:
        return None


def _read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def _ok(u: str) -> bool:
    try:
        return httpx.get(u, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def test_standalone_proxy_continues_the_incoming_trace(url):
    """The proxy as compose runs it (python -m ember_serve_proxy with the same flags), tracing to
    files: an incoming traceparent becomes the parent of the proxy's span and of the replica call."""
    from ember_common import auth, tracing

    serve.run(Echo.bind(), name="echo2", route_prefix="/e2")
    gcs = ember.get_runtime_context().gcs_address
    trace_id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    with tempfile.TemporaryDirectory() as d:
        pf = os.path.join(d, "port")
        env = dict(os.environ, OTEL_TRACES_EXPORTER="ember_file", EMBER_TRACE_DIR=d)
        mport = _free_port()
        p = subprocess.Popen([sys.executable, "-m", "ember_serve_proxy", "--gcs-address", gcs, "--host", "127.0.0.1",
                              "--port", "0", "--port-file", pf, "--metrics-export-port", str(mport)], env=env)
        try:
            wait_for(lambda: os.path.exists(pf) and _read(pf), 30, "the proxy's port file")
            u = f"http://127.0.0.1:{_read(pf)}"
            wait_for(lambda: _ok(u + "/e2/x"), 30, "the standalone proxy to route")
            r = httpx.get(u + "/e2/x", timeout=30, headers={"traceparent": f"00-{trace_id}-{parent}-01"})
            assert r.json()["path"] == "/e2/x"
            assert httpx.get(u + "/-/routes", timeout=30).status_code == 401  # an admin view
            assert httpx.get(u + "/-/routes", timeout=30,
                             headers=auth.http_headers()).json().get("/e2") == "echo2"
            m = httpx.get(f"http://127.0.0.1:{mport}/metrics", timeout=30).text
            assert 'ember_serve_proxy_request_seconds_count{application="echo2",status="200"}' in m
            assert 'ember_serve_proxy_inflight_requests{deployment="echo2#Echo"} 0.0' in m
        finally:
            p.terminate()
            assert p.wait(30) == 0  # SIGTERM: graceful stop, spans flushed
        spans = tracing.read_trace(d, trace_id)
        proxy = [s for s in spans if s["name"] == "proxy GET /e2/x"]
        assert proxy and proxy[0]["parent_id"] == parent, spans
        assert any(s["parent_id"] == proxy[0]["span_id"] and "handle_http" in s["name"] for s in spans), spans
    serve.delete("echo2")


@serve.deployment(health_check_period_s=0.2, health_check_timeout_s=5)
class Flaky:
    def __init__(self):
        self.broken = False

    def break_it(self):
        self.broken = True

    def check_health(self):
        if self.broken:
            raise RuntimeError("lost the GPU")

    def __call__(self, request):
        return os.getpid()


def test_failing_user_health_check_replaces_the_replica(url):
    h = serve.run(Flaky.bind(), name="flaky", route_prefix="/flaky")
    pid = h.remote(None).result()
    h.break_it.remote().result()
    wait_for(lambda: _ok(url + "/flaky") and httpx.get(url + "/flaky", timeout=30).json() != pid, 30,
             "a new replica")
    serve.delete("flaky")
