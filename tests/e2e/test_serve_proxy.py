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
