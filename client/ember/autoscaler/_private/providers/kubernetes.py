"""The Kubernetes provider: each worker node type is a Deployment of node pods (raylet + objmgr
containers, deploy/k8s); the autoscaler scales it through the API server's `scale` subresource,
as KubeRay scales a worker group.

- launch: GET .../deployments/NAME/scale, PATCH it with `spec.replicas` + 1 (a JSON merge patch
  carrying the read `resourceVersion`, so a concurrent change answers 409 and is read again);
- terminate a pod: PATCH its `controller.kubernetes.io/pod-deletion-cost` annotation to the
  lowest value (the ReplicaSet removes the cheapest pod first), then scale down by one;
- list: the pods of each type's label selector that are not finished or being deleted (their
  pod IP matches the node to the GCS's), plus one placeholder per replica asked for whose pod
  does not exist yet (it counts as launching).

Provider keys: `namespace` (default "default"), `api_server` (default from
KUBERNETES_SERVICE_HOST/PORT, in-cluster), `token_file` and `ca_file` (default the service
account's). A node type's `node_config`: `deployment` (default CLUSTER-TYPE) and `selector`
(default `ember.io/node-type=TYPE`). The service account needs get/patch on
deployments/scale and pods, and list on pods.
"""
from __future__ import annotations

import json
import os
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from .base import LaunchError, ProviderNode

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
KEYS = ("type", "namespace", "api_server", "token_file", "ca_file")
MERGE_PATCH = "application/merge-patch+json"


class KubernetesError(LaunchError):
    """The API server refused a call (status and its message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"Kubernetes API {status}: {message}")
        self.status = status


class KubernetesProvider:
    """Worker groups as Deployments; thread-safe (one lock around read-modify-write)."""

    def __init__(self, provider: dict[str, Any], cluster_name: str,
                 node_configs: dict[str, dict[str, Any]]) -> None:
        unknown = sorted(set(provider) - set(KEYS))
        if unknown:
            raise ValueError(f"provider.{unknown[0]}: unknown key for the kubernetes provider "
                             f"(known: {', '.join(KEYS)})")
        self.namespace = str(provider.get("namespace", "default"))
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        self.api = str(provider.get("api_server") or (f"https://{host}:{port}" if host else "")).rstrip("/")
        if not self.api:
            raise ValueError("provider.api_server is required outside a Kubernetes pod")
        self.token_file = str(provider.get("token_file", f"{SA_DIR}/token"))
        ca = str(provider.get("ca_file", f"{SA_DIR}/ca.crt"))
        self._ssl = ssl.create_default_context(cafile=ca) if self.api.startswith("https") else None
        self.groups = {name: (str(c.get("deployment", f"{cluster_name}-{name}")),
                              str(c.get("selector", f"ember.io/node-type={name}")))
                       for name, c in node_configs.items()}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ HTTP
    def _call(self, method: str, path: str, body: Any = None) -> Any:
        headers = {"Accept": "application/json"}
        try:
            with open(self.token_file) as f:
                headers["Authorization"] = f"Bearer {f.read().strip()}"
        except OSError:
            pass  # an API server reached through a proxy may need none
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = MERGE_PATCH
        req = urllib.request.Request(self.api + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=10, context=self._ssl) as r:
                return json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            try:
                message = json.loads(e.read()).get("message", e.reason)
            except ValueError:
                message = e.reason
            raise KubernetesError(e.code, str(message)) from None
        except (urllib.error.URLError, OSError) as e:
            raise LaunchError(f"cannot reach the Kubernetes API at {self.api}: {e}") from None

    def _scale_path(self, deployment: str) -> str:
        return f"/apis/apps/v1/namespaces/{self.namespace}/deployments/{deployment}/scale"

    def _rescale(self, node_type: str, delta: int) -> None:
        """Replicas += delta, read-modify-write with the read resourceVersion (409: again)."""
        deployment = self.groups[node_type][0]
        with self._lock:
            for _ in range(3):
                scale = self._call("GET", self._scale_path(deployment))
                replicas = max(0, int(scale.get("spec", {}).get("replicas", 0)) + delta)
                patch = {"metadata": {"resourceVersion": scale["metadata"]["resourceVersion"]},
                         "spec": {"replicas": replicas}}
                try:
                    self._call("PATCH", self._scale_path(deployment), patch)
                    return
                except KubernetesError as e:
                    if e.status != 409:
                        raise
            raise LaunchError(f"deployment {deployment}: the scale kept changing (409 three times)")

    # ------------------------------------------------------------------ the provider
    def create_node(self, node_type: str, resources: dict[str, float], node_config: dict[str, Any]) -> None:
        """One more replica of the type's Deployment."""
        if node_type not in self.groups:
            raise LaunchError(f"node type {node_type!r} has no Kubernetes worker group")
        self._rescale(node_type, +1)

    def terminate_node(self, provider_id: str) -> None:
        """Marks the pod cheapest to delete, then one replica less; a placeholder (a replica
        whose pod does not exist yet) is one replica less."""
        node_type, _, pod = provider_id.partition("/")
        if node_type not in self.groups:
            raise LaunchError(f"unknown node {provider_id!r}")
        if not pod.startswith("pending-"):
            self._call("PATCH", f"/api/v1/namespaces/{self.namespace}/pods/{pod}",
                       {"metadata": {"annotations": {DELETION_COST: "-2147483647"}}})
        self._rescale(node_type, -1)

    def non_terminated_nodes(self) -> list[ProviderNode]:
        """Running and starting pods of every worker group, and placeholders for missing ones."""
        out: list[ProviderNode] = []
        for node_type, (deployment, selector) in self.groups.items():
            q = urllib.parse.urlencode({"labelSelector": selector})
            pods = self._call("GET", f"/api/v1/namespaces/{self.namespace}/pods?{q}").get("items", [])
            live = [p for p in pods if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
                    and not p.get("metadata", {}).get("deletionTimestamp")]
            for p in live:
                out.append(ProviderNode(f"{node_type}/{p['metadata']['name']}", node_type,
                                        ip=p.get("status", {}).get("podIP", "")))
            replicas = int(self._call("GET", self._scale_path(deployment)).get("spec", {}).get("replicas", 0))
            out += [ProviderNode(f"{node_type}/pending-{i}", node_type) for i in range(replicas - len(live))]
        return out

    def close(self) -> None:
        """Nothing to release (the pods outlive the autoscaler, as a cluster's nodes should)."""
