"""The Kubernetes node provider against a fake API server on loopback that answers with the
API's request/response shapes (autoscaling/v1 Scale, v1 PodList, v1 Status) and records every
request: scale up by patching the Deployment's scale subresource, scale down by marking the pod
cheapest to delete first, listing pods by label, a conflict retried, errors surfaced."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from ember.autoscaler._private.providers.base import LaunchError
from ember.autoscaler._private.providers.kubernetes import DELETION_COST, KubernetesProvider

NS = "ember"
SCALE = f"/apis/apps/v1/namespaces/{NS}/deployments/demo-small/scale"


class FakeApi:
    """One Deployment's scale and its pods; a PATCH of the scale adds or removes pods as the
    ReplicaSet controller would (the lowest pod-deletion-cost first)."""

    def __init__(self) -> None:
        self.replicas, self.version = 1, 7
        self.pods = [self._pod("demo-small-aaaaa", "10.0.0.5", "Running")]
        self.requests: list[tuple[str, str, dict, object]] = []
        self.conflicts = 0  # answer this many scale PATCHes with 409
        self.lock = threading.Lock()

    @staticmethod
    def _pod(name: str, ip: str, phase: str) -> dict:
        return {"metadata": {"name": name, "namespace": NS, "labels": {"ember.io/node-type": "small"},
                             "annotations": {}},
                "status": {"phase": phase, **({"podIP": ip} if ip else {})}}

    def scale(self) -> dict:
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {"name": "demo-small", "namespace": NS, "resourceVersion": str(self.version)},
                "spec": {"replicas": self.replicas},
                "status": {"replicas": len(self.pods), "selector": "ember.io/node-type=small"}}

    def handle(self, method: str, path: str, headers: dict, body: object) -> tuple[int, dict]:
        self.requests.append((method, path, headers, body))
        url = urlparse(path)
        if headers.get("Authorization") != "Bearer tok-123":
            return 401, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "Unauthorized",
                         "reason": "Unauthorized", "code": 401}
        if url.path == SCALE and method == "GET":
            return 200, self.scale()
        if url.path == SCALE and method == "PATCH":
            assert isinstance(body, dict)
            if self.conflicts or body["metadata"]["resourceVersion"] != str(self.version):
                self.conflicts = max(0, self.conflicts - 1)
                self.version += 1
                return 409, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict",
                             "code": 409, "message": 'Operation cannot be fulfilled on deployments.apps '
                                                     '"demo-small": the object has been modified'}
            self.replicas, self.version = body["spec"]["replicas"], self.version + 1
            while len(self.pods) < self.replicas:
                self.pods.append(self._pod(f"demo-small-{len(self.pods):05d}", "", "Pending"))
            while len(self.pods) > self.replicas:
                self.pods.sort(key=lambda p: int(p["metadata"]["annotations"].get(DELETION_COST, "0")))
                self.pods.pop(0)
            return 200, self.scale()
        if url.path == f"/api/v1/namespaces/{NS}/pods" and method == "GET":
            assert parse_qs(url.query)["labelSelector"] == ["ember.io/node-type=small"]
            return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "99"},
                         "items": self.pods}
        if url.path.startswith(f"/api/v1/namespaces/{NS}/pods/") and method == "PATCH":
            name = url.path.rsplit("/", 1)[1]
            for p in self.pods:
                if p["metadata"]["name"] == name:
                    p["metadata"]["annotations"].update(body["metadata"]["annotations"])  # type: ignore[index]
                    return 200, p
        return 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                     "code": 404, "message": f"{url.path} not found"}


@pytest.fixture
def api():
    fake = FakeApi()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            n = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(n)) if n else None
            with fake.lock:
                code, reply = fake.handle(self.command, self.path, dict(self.headers), body)
            data = json.dumps(reply).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PATCH = _serve

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    yield fake
    server.shutdown()
    server.server_close()
    t.join(5)


def provider(api, tmp_path) -> KubernetesProvider:
    tok = tmp_path / "token"
    tok.write_text("tok-123\n")
    return KubernetesProvider({"type": "kubernetes", "namespace": NS, "api_server": api.url,
                               "token_file": str(tok)}, "demo", {"small": {}})


def test_scale_up_lists_pods_and_placeholders(api, tmp_path):
    p = provider(api, tmp_path)
    assert [(n.provider_id, n.ip) for n in p.non_terminated_nodes()] == [("small/demo-small-aaaaa", "10.0.0.5")]
    p.create_node("small", {"CPU": 2.0}, {})
    method, path, headers, body = api.requests[-1]
    assert (method, path) == ("PATCH", SCALE)
    assert headers["Content-Type"] == "application/merge-patch+json"
    assert body == {"metadata": {"resourceVersion": "7"}, "spec": {"replicas": 2}}
    nodes = p.non_terminated_nodes()
    assert [n.provider_id for n in nodes] == ["small/demo-small-aaaaa", "small/demo-small-00001"]
    assert nodes[1].ip == ""  # Pending, no IP yet: it is launching until it joins
    # the controller has not made the pod yet: a placeholder counts it as launching
    api.replicas += 1
    assert [n.provider_id for n in p.non_terminated_nodes()][-1] == "small/pending-0"


def test_scale_down_marks_the_pod_cheapest_first(api, tmp_path):
    p = provider(api, tmp_path)
    p.create_node("small", {"CPU": 2.0}, {})
    p.terminate_node("small/demo-small-aaaaa")
    patches = [(path, body) for m, path, _, body in api.requests if m == "PATCH"]
    assert patches[-2] == (f"/api/v1/namespaces/{NS}/pods/demo-small-aaaaa",
                           {"metadata": {"annotations": {DELETION_COST: "-2147483647"}}})
    assert patches[-1][0] == SCALE and patches[-1][1]["spec"] == {"replicas": 1}
    assert [n.provider_id for n in p.non_terminated_nodes()] == ["small/demo-small-00001"]


def test_a_conflict_is_read_again_and_errors_are_launch_errors(api, tmp_path):
    p = provider(api, tmp_path)
    api.conflicts = 1
    p.create_node("small", {"CPU": 2.0}, {})
    assert api.replicas == 2
    assert [m for m, path, _, _ in api.requests if path == SCALE] == ["GET", "PATCH", "GET", "PATCH"]
    api.conflicts = 5
    with pytest.raises(LaunchError, match="409 three times"):
        p.create_node("small", {"CPU": 2.0}, {})
    (tmp_path / "token").write_text("wrong")
    with pytest.raises(LaunchError, match="Kubernetes API 401: Unauthorized"):
        p.create_node("small", {"CPU": 2.0}, {})
    with pytest.raises(LaunchError, match="no Kubernetes worker group"):
        p.create_node("gpu", {"GPU": 1.0}, {})
    with pytest.raises(ValueError, match="provider.zone: unknown key"):
        KubernetesProvider({"type": "kubernetes", "zone": "a", "api_server": api.url}, "demo", {})
