"""The Docker provider: a node is two containers on the cluster's compose network, as the
compose file's worker node — an object manager (`ember-objmgr` image, owning the node's IPC
namespace and /dev/shm) and a raylet (`ember-raylet`) sharing its network and IPC namespaces —
started with the same hardening (read-only root, no capabilities, tmpfs for what they write).
The provider names the node (EMBER_NODE_ID), so the GCS's node matches it by id; the cluster
token reaches the containers by variable name (`-e EMBER_AUTH_TOKEN`, the value from the
autoscaler's environment, never on a command line).

Provider keys: `network` (default "PROJECT_default", PROJECT = `project`, default the cluster
name), `image_tag` ("latest"), `gcs_address` ("gcs:6379"), `shm_size` ("1g"),
`object_store_memory` (bytes, 268435456), `env` (more NAME=value settings for both containers).
A node type's `node_config` may override `shm_size` and `object_store_memory`.
Containers carry the labels `ember.autoscaler.cluster`, `.node-type` and `.node-id`; listing
reads them back with `docker ps`, so a restarted autoscaler finds its nodes.
"""
from __future__ import annotations

import json
import os
import subprocess
from typing import Any, Callable

from .base import LaunchError, ProviderNode

KEYS = ("type", "project", "network", "image_tag", "gcs_address", "shm_size", "object_store_memory", "env")
LABEL = "ember.autoscaler"
PASS_THROUGH = ("EMBER_AUTH_TOKEN",)  # by name: docker reads the value from this environment
HARDENING = ["--init", "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges:true",
             "--tmpfs", "/tmp", "--tmpfs", "/var/lib/ember:uid=10001,gid=10001,mode=0700",
             "--tmpfs", "/home/ember:uid=10001,gid=10001,mode=0700"]
Runner = Callable[[list[str]], str]


def docker(argv: list[str]) -> str:
    """Runs `docker ARGV...`; its stdout, or LaunchError with its stderr."""
    try:
        r = subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LaunchError(f"docker {argv[0]}: {e}") from None
    if r.returncode != 0:
        raise LaunchError(f"docker {argv[0]} failed ({r.returncode}): {r.stderr.strip()[-500:]}")
    return r.stdout


class DockerProvider:
    """Nodes as container pairs; `run` executes docker commands (injected for tests)."""

    def __init__(self, provider: dict[str, Any], cluster_name: str, gcs_address: str,
                 run: Runner = docker) -> None:
        unknown = sorted(set(provider) - set(KEYS))
        if unknown:
            raise ValueError(f"provider.{unknown[0]}: unknown key for the docker provider (known: "
                             f"{', '.join(KEYS)})")
        self.cluster = cluster_name
        project = str(provider.get("project", cluster_name))
        self.network = str(provider.get("network", f"{project}_default"))
        self.tag = str(provider.get("image_tag", "latest"))
        self.gcs_address = str(provider.get("gcs_address", "gcs:6379"))
        self.shm_size = str(provider.get("shm_size", "1g"))
        self.store_bytes = int(provider.get("object_store_memory", 268435456))
        self.env = {str(k): str(v) for k, v in dict(provider.get("env") or {}).items()}
        self.run = run

    def _settings(self, extra: dict[str, str]) -> list[str]:
        base = {"EMBER_GCS_ADDRESS": self.gcs_address, "EMBER_CLUSTER_NAME": self.cluster, **self.env, **extra}
        return [f"{k}={v}" for k, v in base.items()]

    def create_node(self, node_type: str, resources: dict[str, float], node_config: dict[str, Any]) -> None:
        """`docker run` of the objmgr, then of the raylet in its namespaces (the objmgr goes
        again when the raylet cannot start)."""
        from ember_common.ids import new_node_id

        node_id = new_node_id()
        name = f"{self.cluster}-{node_type}-{node_id[:10]}"
        labels = ["--label", f"{LABEL}.cluster={self.cluster}", "--label", f"{LABEL}.node-type={node_type}",
                  "--label", f"{LABEL}.node-id={node_id}"]
        secrets = [a for k in PASS_THROUGH if k in os.environ for a in ("-e", k)]
        store = str(int(node_config.get("object_store_memory", self.store_bytes)))
        node = {"EMBER_NODE_ID": node_id, "EMBER_OBJECT_STORE_BYTES": store}
        self.run(["run", "-d", "--name", f"{name}-objmgr", "--network", self.network, "--ipc", "shareable",
                  "--shm-size", str(node_config.get("shm_size", self.shm_size)), *HARDENING, *labels,
                  *secrets, f"ember-objmgr:{self.tag}", "objmgr", *self._settings(node)])
        custom = {k: v for k, v in resources.items() if k not in ("CPU", "GPU")}
        raylet = {**node, "EMBER_NUM_CPUS": f"{resources.get('CPU', 0):g}",
                  "EMBER_NUM_GPUS": f"{resources.get('GPU', 0):g}", "EMBER_RESOURCES": json.dumps(custom)}
        try:
            self.run(["run", "-d", "--name", f"{name}-raylet", "--network", f"container:{name}-objmgr",
                      "--ipc", f"container:{name}-objmgr", *HARDENING, *labels, *secrets,
                      f"ember-raylet:{self.tag}", "raylet", *self._settings(raylet)])
        except LaunchError:
            self._remove([f"{name}-objmgr"])
            raise

    def _remove(self, names: list[str]) -> None:
        try:
            self.run(["rm", "-f", *names])
        except LaunchError:
            pass  # already gone

    def terminate_node(self, provider_id: str) -> None:
        """Stops the raylet gracefully (it leaves the cluster), then removes both containers."""
        names = [f"{provider_id}-raylet", f"{provider_id}-objmgr"]
        try:
            self.run(["stop", "-t", "15", names[0]])
        except LaunchError:
            pass  # not running: removal below is all there is to do
        self._remove(names)

    def non_terminated_nodes(self) -> list[ProviderNode]:
        """Nodes of this cluster whose raylet container runs or is not created yet (launching);
        a pair whose raylet exited is removed."""
        out = self.run(["ps", "-a", "--filter", f"label={LABEL}.cluster={self.cluster}",
                        "--format", "{{json .}}"])
        nodes: dict[str, dict[str, Any]] = {}
        for line in out.splitlines():
            if not line.strip():
                continue
            c = json.loads(line)
            labels = dict(kv.split("=", 1) for kv in c.get("Labels", "").split(",") if "=" in kv)
            base, _, role = c.get("Names", "").rpartition("-")
            n = nodes.setdefault(base, {"type": labels.get(f"{LABEL}.node-type", ""),
                                        "id": labels.get(f"{LABEL}.node-id", ""), "raylet": "absent"})
            if role == "raylet":
                n["raylet"] = c.get("State", "")
        result = []
        for base, n in nodes.items():
            if n["raylet"] in ("absent", "created", "running", "restarting"):
                result.append(ProviderNode(base, n["type"], node_id=n["id"]))
            else:
                self._remove([f"{base}-raylet", f"{base}-objmgr"])
        return result

    def close(self) -> None:
        """Nothing to release: the containers outlive the autoscaler, as a cluster's nodes should."""
