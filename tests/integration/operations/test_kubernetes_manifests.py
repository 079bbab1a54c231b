"""deploy/kubernetes: rendered with the real `kubectl kustomize`, every object validated against the
Kubernetes 1.31 schemas (`kubernetes-validate`, strict: unknown fields fail), and held to the
compose file: the same images, roles and settings, so the compose e2e tests cover what the pods run.

No Kubernetes cluster is available here; what a cluster would add (scheduling, DNS, volumes) is
not tested.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
K8S = ROOT / "deploy" / "kubernetes"
SCHEMA_VERSION = "1.31.0"

# healthcheck.py's gRPC service names, by role: the probes must ask the same ones.
GRPC_HEALTH = {"gcs": "ember.Gcs", "raylet": "ember.Raylet", "objmgr": "ember.ObjectManager"}
# Settings that differ by design. k8s: the node's address is the pod's IP and the raylet's CPU
# count its CPU request (compose derives both inside the container).
K8S_ONLY = {"EMBER_NODE_IP", "EMBER_NUM_CPUS"}
# Compose runs a trace sink (profile "tracing") whose volume the dashboard reads; the Kubernetes
# manifests have no sink (spans go to the cluster's own collector there).
COMPOSE_ONLY = {("dashboard", "EMBER_TRACE_DIR")}


def _kubectl() -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        if os.environ.get("EMBER_TEST_REQUIRE_KUBECTL"):
            pytest.fail("kubectl is not on PATH (apt-get install -y kubernetes-client)")
        pytest.skip("kubectl is not on PATH: apt-get install -y kubernetes-client (.ci/run does)")
    return kubectl


def render(path: Path) -> list[dict[str, Any]]:
    out = subprocess.run([_kubectl(), "kustomize", str(path)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.fixture(scope="module")
def base() -> list[dict[str, Any]]:
    return render(K8S)


def _by(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def _containers(objs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(o, c) for o in objs if o["kind"] in ("Deployment", "StatefulSet")
            for c in o["spec"]["template"]["spec"]["containers"]]


@pytest.mark.parametrize("where", [".", "overlays/gpu"])
def test_every_object_validates_against_the_kubernetes_schemas(where: str) -> None:
    import kubernetes_validate

    objs = render(K8S / where)
    kinds = sorted({o["kind"] for o in objs})
    assert kinds == ["ConfigMap", "Deployment", "Namespace", "NetworkPolicy", "Service", "StatefulSet"]
    for obj in objs:
        try:
            kubernetes_validate.validate(obj, SCHEMA_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']}: {e.message} at {list(e.path)}")
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == "ember"


def test_deliberately_broken_object_is_caught() -> None:
    """The validation above can fail: a field the schema does not know is refused."""
    import kubernetes_validate

    bad = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"},
           "spec": {"ports": [{"port": 1}], "selectr": {"a": "b"}}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, SCHEMA_VERSION, strict=True)


def _compose_value(raw: Any) -> str:
    """`${VAR:-default}` as compose resolves it with VAR unset; a required `${VAR:?why}` (a
    secret such as EMBER_AUTH_TOKEN, from .env) as `<secret VAR>`."""
    raw = re.sub(r"\$\{([A-Z0-9_]+):\?[^}]*\}", r"<secret \1>", str(raw))
    return re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", raw)


def _compose_services() -> dict[str, dict[str, Any]]:
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    out = {}
    for name, svc in doc["services"].items():
        if svc.get("profiles"):
            continue  # driver and otlp run only on demand
        image = _compose_value(svc["image"]).split(":")[0]
        cmd = [_compose_value(a) for a in svc.get("command") or []]
        settings = {k: _compose_value(v) for k, v in (svc.get("environment") or {}).items()}
        settings.update(a.split("=", 1) for a in cmd[1:] if "=" in a)
        role = cmd[0] if cmd else image.removeprefix("ember-")  # no command: the image's CMD
        out[name] = {"image": image, "role": role, "settings": settings}
    return out


def _k8s_settings(objs: list[dict[str, Any]], container: dict[str, Any]) -> dict[str, str]:
    settings: dict[str, str] = {}
    for src in container.get("envFrom", []):
        cm = _by(objs, "ConfigMap", src["configMapRef"]["name"])
        settings.update(cm["data"])
    for e in container.get("env", []):
        secret = e.get("valueFrom", {}).get("secretKeyRef")
        settings[e["name"]] = (f"<secret {e['name']}>" if secret  # stands for compose's ${VAR:?...}
                               else e.get("value", "<from the pod>"))
    settings.update(a.split("=", 1) for a in container.get("args", [])[1:] if "=" in a)
    return settings


def test_pods_run_the_compose_services_with_the_same_images_roles_and_settings(base) -> None:
    compose = _compose_services()
    k8s = _containers(base)
    assert k8s
    for name, svc in compose.items():
        if name == "etcd":
            (obj, c), = [(o, c) for o, c in k8s if c["image"].split(":")[0] == "ember-etcd"]
            assert c["volumeMounts"][0]["mountPath"] == "/var/lib/ember-etcd"
            continue
        node = "head" if name.endswith("-head") else "worker" if name.endswith("-worker") else None
        matches = [(o, c) for o, c in k8s if c["image"].split(":")[0] == svc["image"]
                   and (node is None or o["metadata"]["name"] == f"ember-{node}")]
        assert len(matches) == 1, f"compose service {name}: {len(matches)} k8s containers"
        obj, c = matches[0]
        assert c["args"][0] == svc["role"], name
        ours = _k8s_settings(base, c)
        for key, value in svc["settings"].items():
            if key in K8S_ONLY or (name, key) in COMPOSE_ONLY:
                continue
            assert ours.get(key, "") == value, f"{name}: {key}={ours.get(key)!r} here, {value!r} in compose"
        # The shared config map may give a service a cluster-wide setting compose gives only
        # others (e.g. the cluster name), but with the value compose uses.
        extra = {k for k in set(ours) - set(svc["settings"]) - K8S_ONLY
                 if not any(o["settings"].get(k) == ours[k] for o in compose.values())}
        assert not extra, f"{name}: settings only in Kubernetes: {sorted(extra)}"


def test_probes_ask_the_services_own_health_endpoints(base) -> None:
    for obj, c in _containers(base):
        role = c["args"][0] if c.get("args") else "etcd"
        for probe in ("readinessProbe", "livenessProbe"):
            p = c[probe]
            if role in GRPC_HEALTH:
                assert p["grpc"]["service"] == GRPC_HEALTH[role], (obj["metadata"]["name"], role)
                assert {"containerPort": p["grpc"]["port"]}.items() <= c["ports"][0].items()
            elif role == "serve-proxy":
                assert p["httpGet"] == {"path": "/-/healthz", "port": 8000}
            elif role == "dashboard":  # the one open endpoint of the dashboard (its auth.py)
                assert p["httpGet"] == {"path": "/api/healthz", "port": 8265}
            elif probe == "readinessProbe":  # etcd: ready once authentication is on
                assert p["exec"]["command"] == ["ember-etcd", "health"]
            else:
                assert p["httpGet"]["path"] == "/health"


def test_node_pods_share_an_in_memory_store_and_map_cpu_requests(base) -> None:
    for node in ("ember-head", "ember-worker"):
        sts = _by(base, "StatefulSet", node)
        spec = sts["spec"]["template"]["spec"]
        shm = [v for v in spec["volumes"] if v["name"] == "shm"]
        assert shm and shm[0]["emptyDir"]["medium"] == "Memory"
        names = [c["name"] for c in spec["containers"]]
        assert names == ["objmgr", "raylet"]
        for c in spec["containers"]:
            assert {"name": "shm", "mountPath": "/dev/shm"} in c["volumeMounts"]
            ip = [e for e in c["env"] if e["name"] == "EMBER_NODE_IP"]
            assert ip[0]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
        raylet = spec["containers"][1]
        cpus = [e for e in raylet["env"] if e["name"] == "EMBER_NUM_CPUS"][0]["valueFrom"]
        assert cpus["resourceFieldRef"] == {"containerName": "raylet", "resource": "requests.cpu",
                                            "divisor": "1"}
        assert "EMBER_NUM_CPUS=$(EMBER_NUM_CPUS)" in raylet["args"]
        head = [a for a in raylet["args"] if a.startswith("EMBER_HEAD=")]
        assert head == (["EMBER_HEAD=1"] if node == "ember-head" else [])


def test_gpu_overlay_asks_for_and_declares_the_same_gpus() -> None:
    objs = render(K8S / "overlays" / "gpu")
    raylet = _by(objs, "StatefulSet", "ember-worker")["spec"]["template"]["spec"]["containers"][1]
    assert raylet["name"] == "raylet"
    gpus = raylet["resources"]["limits"]["nvidia.com/gpu"]
    declared = [e["value"] for e in raylet["env"] if e["name"] == "EMBER_NUM_GPUS"]
    assert declared == [str(gpus)]
    assert raylet["resources"]["limits"]["memory"] == "8Gi"  # the base's limits stay
    head = _by(objs, "StatefulSet", "ember-head")["spec"]["template"]["spec"]["containers"][1]
    assert "nvidia.com/gpu" not in head["resources"]["limits"]


def test_every_container_has_memory_and_cpu_limits(base) -> None:
    """A runaway service (or user code in a raylet) cannot take the node's memory or CPUs; the
    compose containers have memory and process limits too."""
    pods = [o for o in base if o["kind"] in ("Deployment", "StatefulSet")]
    containers = [(o["metadata"]["name"], c) for o in pods for c in o["spec"]["template"]["spec"]["containers"]]
    assert len(containers) >= 6
    for name, c in containers:
        limits = c.get("resources", {}).get("limits", {})
        assert {"cpu", "memory"} <= set(limits), (name, c["name"], limits)
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    for name, svc in compose["services"].items():
        assert "mem_limit" in svc and "pids_limit" in svc, name
    assert compose["services"]["raylet-head"]["mem_limit"] == "${EMBER_NODE_MEM_LIMIT:-8g}"


def test_containers_run_unprivileged(base) -> None:
    for obj, c in _containers(base):
        pod = obj["spec"]["template"]["spec"]["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] == 10001  # the images' `ember` user
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert not sc.get("privileged") and "add" not in sc["capabilities"]


def test_compose_containers_are_locked_down_as_the_pods() -> None:
    """Every compose service (profiles included): no capabilities, no privilege escalation, a
    read-only root with tmpfs scratch owned by the images' user (uid/gid options: this Docker
    ignores tmpfs modes), no host namespaces beyond a node's own pair, loopback ports."""
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    for name, svc in doc["services"].items():
        assert svc.get("cap_drop") == ["ALL"] and not svc.get("cap_add"), name
        assert "no-new-privileges:true" in svc.get("security_opt", []), name
        assert svc.get("read_only") is True, name
        assert not svc.get("privileged") and svc.get("pid") is None, name
        owned = [t for t in svc.get("tmpfs", []) if t.split(":")[0] in ("/var/lib/ember", "/home/ember")]
        assert len(owned) == 2 and all("uid=10001" in t and "gid=10001" in t for t in owned), name
        for port in svc.get("ports", []):
            assert _compose_value(port).startswith("127.0.0.1:"), (name, port)
        for ns in ("network_mode", "ipc"):
            assert str(svc.get(ns, "service:")).startswith(("service:", "shareable")), (name, ns)


def test_the_dashboard_runs_as_in_compose(base) -> None:
    svc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["dashboard"]
    assert _compose_value(svc["ports"][0]) == "127.0.0.1:8265:8265"
    (obj, c), = [(o, c) for o, c in _containers(base) if c["image"].split(":")[0] == "ember-dashboard"]
    assert obj["kind"] == "Deployment" and c["args"] == ["dashboard"]
    assert c["ports"] == [{"name": "http", "containerPort": 8265}]
    service = _by(base, "Service", "dashboard")
    assert service["spec"].get("type", "ClusterIP") == "ClusterIP"  # reached by port-forward only
    assert service["spec"]["ports"][0]["targetPort"] == 8265


def test_the_auth_token_comes_from_a_secret_in_every_ember_pod(base) -> None:
    for obj, c in _containers(base):
        if c["image"].split(":")[0] == "ember-etcd":
            continue
        token = [e for e in c.get("env", []) if e["name"] == "EMBER_AUTH_TOKEN"]
        assert token and token[0]["valueFrom"]["secretKeyRef"] == {"name": "ember-auth", "key": "token"}, \
            (obj["metadata"]["name"], c["name"])


def _pod_labels(obj: dict[str, Any]) -> dict[str, str]:
    return obj["spec"]["template"]["metadata"]["labels"]


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return selector["matchLabels"].items() <= labels.items()


def test_only_gcs_pods_may_reach_etcd(base) -> None:
    """The NetworkPolicy on etcd's pods admits GCS pods of the namespace alone, on the client port."""
    policies = [o for o in base if o["kind"] == "NetworkPolicy"]
    etcd = _by(base, "StatefulSet", "etcd")
    on_etcd = [p for p in policies if _selects(p["spec"]["podSelector"], _pod_labels(etcd))]
    assert len(on_etcd) == 1, "etcd's pods need exactly one NetworkPolicy"
    spec = on_etcd[0]["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    (rule,) = spec["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 2379}]
    (peer,) = rule["from"]
    assert set(peer) == {"podSelector"}, "no namespaceSelector or ipBlock: this namespace's GCS only"
    workloads = [o for o in base if o["kind"] in ("Deployment", "StatefulSet")]
    admitted = [o["metadata"]["name"] for o in workloads if _selects(peer["podSelector"], _pod_labels(o))]
    assert admitted == ["gcs"]


def test_the_etcd_password_is_given_to_etcd_and_the_gcs_only(base) -> None:
    holders = []
    for obj, c in _containers(base):
        for e in c.get("env", []):
            ref = e.get("valueFrom", {}).get("secretKeyRef", {})
            if e["name"] == "EMBER_ETCD_PASSWORD" or ref.get("name") == "ember-etcd-auth":
                assert ref == {"name": "ember-etcd-auth", "key": "password"}, obj["metadata"]["name"]
                holders.append(obj["metadata"]["name"])
        assert not any(f.get("secretRef") for f in c.get("envFrom", [])), obj["metadata"]["name"]
    assert sorted(holders) == ["etcd", "gcs"]


def test_compose_puts_etcd_on_an_internal_network_with_the_gcs_alone() -> None:
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert doc["networks"]["etcd"]["internal"] is True
    services = doc["services"]
    assert services["etcd"]["networks"] == ["etcd"] and not services["etcd"].get("ports")
    on_etcd = sorted(n for n, svc in services.items() if "etcd" in (svc.get("networks") or []))
    assert on_etcd == ["etcd", "gcs"]
    assert "default" in services["gcs"]["networks"]
    holders = sorted(n for n, svc in services.items() if "EMBER_ETCD_PASSWORD" in (svc.get("environment") or {}))
    assert holders == ["etcd", "gcs"]
    assert _compose_value(services["gcs"]["environment"]["EMBER_ETCD_PASSWORD"]) == "<secret EMBER_ETCD_PASSWORD>"
