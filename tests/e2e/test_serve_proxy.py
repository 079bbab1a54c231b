"""serve-proxy in the compose cluster: an application deployed by a driver inside the cluster
answers HTTP on the proxy's published port on the host."""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from .conftest import DRIVER_PRELUDE, Cluster


def test_http_through_published_port(cluster: Cluster) -> None:
    cluster.wait_healthy(["serve-proxy"], timeout_s=120)
    cluster.exec_python("raylet-head", DRIVER_PRELUDE + """
from ember import serve

@serve.deployment(num_replicas=2)
class Hello:
    def __call__(self, request):
        return {"hello": request.query_params.get("name", "world"),
                "node": ember.get_runtime_context().get_node_id()}

serve.run(Hello.bind(), name="hello", route_prefix="/hello")
""", timeout=180)
    url = f"http://127.0.0.1:{cluster.http_port}/hello?name=ember"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                body = json.loads(resp.read())
            break
        except (urllib.error.URLError, ConnectionError) as e:
            assert time.monotonic() < deadline, f"no answer from {url}: {e}"
            time.sleep(0.5)
    assert body["hello"] == "ember"
    with urllib.request.urlopen(f"http://127.0.0.1:{cluster.http_port}/-/healthz", timeout=10) as r:
        assert r.status == 200


def test_streamed_body_rides_the_stream_channel_between_containers(cluster: Cluster) -> None:
    """The serve-proxy container opens the replica's stream channel (a worker's port in a raylet
    container): the body arrives whole and the replica counts that connection (a proxy that
    could not reach it would fall back to polling, and the count would stay 0)."""
    cluster.wait_healthy(["serve-proxy"], timeout_s=120)
    cluster.exec_python("raylet-head", DRIVER_PRELUDE + """
from ember import serve

@serve.deployment
class Lines:
    async def __call__(self, request):
        from starlette.responses import StreamingResponse

        async def gen():
            for i in range(int(request.query_params.get("n", "10"))):
                yield f"{i:04d}\\n"
        return StreamingResponse(gen(), media_type="text/plain")

    def stats(self):
        return serve.get_replica_context().replica_id

serve.run(Lines.bind(), name="lines", route_prefix="/lines")
""", timeout=180)
    url = f"http://127.0.0.1:{cluster.http_port}/lines?n=500"
    want = "".join(f"{i:04d}\n" for i in range(500))
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                body = resp.read().decode()
            if body == want:
                break
        except (urllib.error.URLError, ConnectionError) as e:
            body = f"{type(e).__name__}: {e}"
        assert time.monotonic() < deadline, f"no whole body from {url}: {body[:200]!r}"
        time.sleep(0.5)
    out = cluster.exec_python("raylet-head", DRIVER_PRELUDE + """
from ember import serve
h = serve.get_app_handle("lines")
ctx_id = h.stats.remote().result()
replica = ember.get_actor(f"SERVE_REPLICA::lines#Lines#{ctx_id}", namespace="serve")
import json
print("STATS", json.dumps(ember.get(replica.stream_stats.remote())))
""", timeout=120)
    stats = json.loads(out.split("STATS", 1)[1].strip())
    assert stats["channels"] == 1 and stats["stream_poll"] == 0, stats
