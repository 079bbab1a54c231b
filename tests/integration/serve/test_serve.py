"""Serve end to end: real replicas (actors), the real proxy process, real HTTP on loopback."""
from __future__ import annotations

import asyncio
import os
import signal
import textwrap
import threading

import httpx
import pytest

import ember
from ember import serve
from ember.serve import api as serve_api
from ember.testing import wait_for as _wait_for
from ember_common import auth


def wait_for(cond, timeout=30.0, what="condition"):
    return _wait_for(cond, timeout_s=timeout, interval_s=0.05, what=what)


@pytest.fixture(scope="module")
def cluster():
    ember.init(num_cpus=2, num_gpus=2, object_store_memory=128 * 2**20)
    serve.start(http_options={"host": "127.0.0.1", "port": 0})
    yield ember
    serve.shutdown()
    ember.shutdown()


@pytest.fixture
def url(cluster):
    host, port = serve_api.proxy_address()
    return f"http://{host}:{port}"


@serve.deployment(num_replicas=2, ray_actor_options={"num_gpus": 1}, max_ongoing_requests=32)
class LLMService:
    def __init__(self):
        self.gpu_ids = ember.get_gpu_ids()

    async def __call__(self, request):
        prompt = (await request.json())["prompt"]
        if prompt == "boom":
            raise ValueError("the model exploded")
        return {"text": prompt[::-1], "gpu": self.gpu_ids, "pid": os.getpid()}


def test_seed_example_two_gpu_replicas(url):
    serve.run(LLMService.bind(), name="llm", route_prefix="/")
    st = serve.status().applications["llm"]
    assert st.status == "RUNNING"
    assert st.deployments["LLMService"].replica_states == {"RUNNING": 2}
    gpus = set()
    with httpx.Client(timeout=30) as c:
        for _ in range(30):
            r = c.post(url + "/", json={"prompt": "abc"})
            assert r.status_code == 200, r.text
            assert r.json()["text"] == "cba"
            gpus.add(tuple(r.json()["gpu"]))
        assert gpus == {(0,), (1,)}  # both replicas served, each with its own GPU
        assert c.get(url + "/-/healthz").text == "success"
        assert c.get(url + "/-/routes").status_code == 401  # the admin view needs the token
        assert c.get(url + "/-/routes", headers=auth.http_headers()).json() == {"/": "llm"}
        # malformed JSON is the client's fault; a user exception is a 500; both keep serving
        r = c.post(url + "/", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 400 and "malformed JSON" in r.text
        r = c.post(url + "/", json={"prompt": "boom"})
        assert r.status_code == 500 and "the model exploded" in r.text
        assert c.post(url + "/", json={"prompt": "ok"}).status_code == 200
    serve.delete("llm")
    assert "llm" not in serve.status().applications


def test_replica_killed_is_replaced(url):
    serve.run(LLMService.options(health_check_period_s=0.2).bind(), name="heal", route_prefix="/heal")
    with httpx.Client(timeout=30) as c:
        pids = {c.post(url + "/heal", json={"prompt": "x"}).json()["pid"] for _ in range(20)}
        assert len(pids) == 2
        killed = pids.pop()
        os.kill(killed, signal.SIGKILL)

        def healed():
            # every request succeeds meanwhile (a call to the dead replica is retried elsewhere)
            now = set()
            for _ in range(10):
                r = c.post(url + "/heal", json={"prompt": "x"})
                assert r.status_code == 200, r.text
                now.add(r.json()["pid"])
            return len(now) == 2 and killed not in now and pids < now

        wait_for(healed, 30, "a replacement replica")
        assert serve.status().applications["heal"].deployments["LLMService"].replica_states == {"RUNNING": 2}
    serve.delete("heal")


@serve.deployment
class Tokenizer:
    def split(self, text: str) -> list[str]:
        return text.split()


@serve.deployment
class Counter:
    def __init__(self, tokenizer, offset: int = 0):
        self.tokenizer = tokenizer
        self.offset = offset

    async def __call__(self, request):
        words = await self.tokenizer.split.remote(request.query_params["q"])
        return {"n": len(words) + self.offset}

    async def count(self, text: str) -> int:
        return len(await self.tokenizer.split.remote(text)) + self.offset

    def size(self, words: list[str]) -> int:
        return len(words)

    def fail(self):
        raise KeyError("nope")


def test_composition_and_handles(url):
    handle = serve.run(Counter.bind(Tokenizer.bind(), offset=100), name="comp", route_prefix="/comp")
    assert handle.count.remote("a b c").result() == 103
    with httpx.Client(timeout=30) as c:
        assert c.get(url + "/comp", params={"q": "one two"}).json() == {"n": 102}
    h2 = serve.get_app_handle("comp")
    assert h2.count.remote("x").result(timeout_s=30) == 101
    tok = serve.get_deployment_handle("Tokenizer", "comp")
    assert tok.split.remote("p q").result() == ["p", "q"]
    # a response passed to another call is resolved first: a pipeline without waiting in between
    assert handle.size.remote(tok.split.remote("p q r")).result() == 3
    with pytest.raises(KeyError):
        handle.fail.remote().result()

    async def concurrently():
        return await asyncio.gather(*[handle.count.remote("a " * i) for i in range(10)])

    assert asyncio.run(concurrently()) == [100 + i for i in range(10)]
    serve.delete("comp")


@serve.deployment
def hello(request):
    return f"hello {request.query_params.get('name', 'world')}"


@serve.deployment(health_check_period_s=0.2)
class Broken:
    def __init__(self):
        raise RuntimeError("cannot load the model")


def test_bad_input_fails_clearly_and_serve_keeps_working(url):
    serve.run(hello.bind(), name="fn", route_prefix="/fn")
    with pytest.raises(ValueError, match="already used"):
        serve.run(hello.bind(), name="other", route_prefix="/fn")
    with pytest.raises(RuntimeError, match="cannot load the model"):
        serve.run(Broken.bind(), name="broken", route_prefix="/broken")
    assert serve.status().applications["broken"].status == "DEPLOY_FAILED"
    serve.delete("broken")
    with pytest.raises(ValueError, match="does not exist"):
        serve.get_app_handle("nope")
    with httpx.Client(timeout=30) as c:
        assert c.get(url + "/fn", params={"name": "ember"}).text == "hello ember"
        assert c.get(url + "/fnord").status_code == 404  # "/fn" matches whole path segments only
    serve.delete("fn")


def test_seed_example_script_runs():
    """examples/serve_llm.py is the seed article's 4.2 example, run as a user would."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    out = subprocess.run([sys.executable, os.path.join(root, "examples", "serve_llm.py"), str(port)],
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "POST / -> HTTP 200, 12 tokens from the replica on logical GPU [" in out.stdout, out.stdout
    assert "application 'default' is RUNNING" in out.stdout  # a real model answered
    assert "same text as the whole answer: True" in out.stdout  # and streamed it over SSE


def test_deployment_from_a_module_next_to_the_driver(tmp_path):
    """A deployment class imported from a module beside the driver's script (run from another
    directory) loads in the replicas, as on Ray: the driver's import paths travel with it."""
    import socket
    import subprocess
    import sys

    (tmp_path / "greeter.py").write_text(textwrap.dedent("""
        from ember import serve

        @serve.deployment
        class Greeter:
            def __call__(self, request):
                return "hi from greeter"
    """))
    (tmp_path / "main.py").write_text(textwrap.dedent("""
        import sys, urllib.request
        import ember
        from ember import serve
        from greeter import Greeter
        ember.init(num_cpus=2)
        serve.run(Greeter.bind(), host="127.0.0.1", port=int(sys.argv[1]))
        print(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/", timeout=30).read().decode())
        serve.shutdown()
        ember.shutdown()
    """))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = subprocess.run([sys.executable, str(tmp_path / "main.py"), str(port)], cwd="/",
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("hi from greeter"), out.stdout


def test_rolling_update_when_every_gpu_is_taken(url):
    """Both GPUs are held by the old replicas: the update cannot surge, so after the grace period
    one old replica makes room, and requests keep succeeding throughout."""
    serve.run(LLMService.bind(), name="gpu", route_prefix="/gpu")
    errors, texts, stop = [], [], threading.Event()

    def load():
        with httpx.Client(timeout=60) as c:
            while not stop.is_set() and len(texts) < 5000:
                r = c.post(url + "/gpu", json={"prompt": "ab"})
                (texts if r.status_code == 200 else errors).append(r.text)

    t = threading.Thread(target=load, daemon=True)
    t.start()
    try:
        serve.run(LLMService.options(user_config=None, version="v2").bind(), name="gpu", route_prefix="/gpu",
                  _timeout_s=90)
        wait_for(lambda: serve.status().applications["gpu"].deployments["LLMService"].replica_states
                 == {"RUNNING": 2}, 60, "the update to finish")
    finally:
        stop.set()
        t.join(60)
    assert not errors, errors[:3]
    assert texts
    serve.delete("gpu")


def test_redeploy_with_other_deployments_removes_the_old_ones(url):
    serve.run(Counter.bind(Tokenizer.bind()), name="swap", route_prefix="/swap")
    assert set(serve.status().applications["swap"].deployments) == {"Counter", "Tokenizer"}
    serve.run(hello.bind(), name="swap", route_prefix="/swap")
    wait_for(lambda: set(serve.status().applications["swap"].deployments) == {"hello"}, 30,
             "the old deployments to go")
    assert httpx.get(url + "/swap", timeout=30).text == "hello world"
    serve.delete("swap")
