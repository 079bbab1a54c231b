"""The compose cluster as the chaos suite drives it, through the `docker` SDK (the Engine API):
containers found by their compose labels, killed, started, disconnected from and connected to
the cluster network; processes inside them listed and SIGKILLed; health read from the engine and
from the GCS's metrics. Compose itself (up/down) stays with the compose binary (conftest).

`FaultRunner` carries out a `faults.FaultSchedule` against it, one fault at a time, logging each
step to a `faults.FaultLog` and timing the recovery of the cluster after each. With GCS replicas
(`gcs_replicas`: the HA cluster) the GCS's figures come from whichever replica leads, and the
leader kinds are carried out by `leader_faults`.
"""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import docker
from docker.models.containers import Container

from .faults import LEADER_KINDS, FaultEvent, FaultLog, FaultSchedule

NODE_SERVICES = ["objmgr-head", "raylet-head", "objmgr-worker", "raylet-worker"]
ALL_SERVICES = ["etcd", "gcs", *NODE_SERVICES, "serve-proxy"]
# Which services share the network namespace of an objmgr container (compose network_mode).
NETNS_DEPENDENTS = {"objmgr-head": "raylet-head", "objmgr-worker": "raylet-worker"}

_WORKER_PIDS = r"""
import os
out = []
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            cmd = open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if any(b"worker_main" in c for c in cmd):
            out.append(int(p))
print(" ".join(map(str, sorted(out))))
"""

_SCRAPE = r"""
import urllib.request
body = urllib.request.urlopen("http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
print("\n".join(l for l in body.splitlines() if l.startswith({prefixes!r})))
"""


class DockerCluster:
    """One compose project's containers, by service name, through the Engine API."""

    def __init__(self, project: str, http_port: int, gcs_replicas: tuple[str, ...] = ("gcs",)) -> None:
        self.project = project
        self.http_port = http_port
        self.gcs_replicas = gcs_replicas
        self.services = [*ALL_SERVICES, *(r for r in gcs_replicas if r not in ALL_SERVICES)]
        self.client = docker.from_env(timeout=60)
        self.network_name = f"{project}_default"
        self.etcd_network_name = f"{project}_etcd"  # etcd and the GCS replicas only

    def close(self) -> None:
        self.client.close()

    def container(self, service: str) -> Container:
        found = self.client.containers.list(all=True, filters={
            "label": [f"com.docker.compose.project={self.project}",
                      f"com.docker.compose.service={service}"]})
        if not found:
            raise AssertionError(f"no container for service {service!r} in project {self.project}")
        return found[0]

    def health(self) -> dict[str, str]:
        """service -> healthy | unhealthy | starting | exited(N) | ... (engine's view)."""
        out = {}
        for c in self.client.containers.list(all=True, filters={
                "label": f"com.docker.compose.project={self.project}"}):
            c.reload()
            svc = c.labels.get("com.docker.compose.service", c.name)
            st = c.attrs["State"]
            if st["Status"] == "running":
                out[svc] = st.get("Health", {}).get("Status", "running")
            else:
                out[svc] = f"{st['Status']}({st['ExitCode']})"
        return out

    def exec_python(self, service: str, code: str) -> str:
        """Runs `python -c code` in a service's container; its stdout (raises on failure)."""
        r = self.container(service).exec_run(["python", "-c", code], demux=True)
        out = (r.output[0] or b"").decode(errors="replace")
        if r.exit_code != 0:
            err = (r.output[1] or b"").decode(errors="replace")
            raise RuntimeError(f"exec in {service} failed ({r.exit_code}): {err[-800:]}")
        return out

    def metrics(self, service: str, port: int, prefixes: tuple[str, ...]) -> dict[str, float]:
        """Prometheus samples whose names start with one of `prefixes`, from inside a container."""
        out = {}
        for line in self.exec_python(service, _SCRAPE.format(port=port, prefixes=prefixes)).splitlines():
            name, _, value = line.rpartition(" ")
            if name:
                out[name] = float(value)
        return out

    def gcs_serving(self) -> str:
        """The GCS service whose tables are live: the one GCS, or the replica leading now."""
        if len(self.gcs_replicas) == 1:
            return self.gcs_replicas[0]
        from .leader_faults import find_leader

        return find_leader(self)

    def alive_nodes(self) -> int:
        m = self.metrics(self.gcs_serving(), 9092, ('ember_nodes_total{state="ALIVE"}',))
        return int(sum(m.values()))

    def worker_pids(self, service: str) -> list[int]:
        return [int(p) for p in self.exec_python(service, _WORKER_PIDS).split()]

    def sigkill(self, service: str, pid: int) -> bool:
        """SIGKILLs a process in a container; False when it had already exited."""
        out = self.exec_python(service, (
            "import os, signal\n"
            f"try:\n    os.kill({pid}, signal.SIGKILL)\n    print('killed')\n"
            "except ProcessLookupError:\n    print('gone')"))
        return out.strip() == "killed"

    def http_ok(self, path: str, timeout_s: float = 5) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}",
                                        timeout=timeout_s) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            return False

    def store_usage(self) -> dict[str, dict[str, float]]:
        """Per node objmgr: arena bytes used, spilled bytes, object count, spill dir bytes."""
        usage = {}
        for svc in ("objmgr-head", "objmgr-worker"):
            m = self.metrics(svc, 9091, ("ember_object_store_used_bytes",
                                         "ember_object_store_spilled_bytes",
                                         "ember_object_store_num_objects"))
            spill = self.exec_python(svc, (
                "import os\nt = 0\n"
                "for d, _, fs in os.walk('/var/lib/ember/spill'):\n"
                "    t += sum(os.path.getsize(os.path.join(d, f)) for f in fs)\nprint(t)"))
            usage[svc] = {
                "used_bytes": sum(v for k, v in m.items() if k.startswith("ember_object_store_used")),
                "spilled_bytes": sum(v for k, v in m.items() if k.startswith("ember_object_store_spilled")),
                "objects": sum(v for k, v in m.items() if k.startswith("ember_object_store_num")),
                "spill_dir_bytes": float(spill.strip() or 0)}
        return usage

    def store_objects(self, service: str) -> str:
        """The objects an objmgr holds (size, state, owner, pins, writer), one line each: what
        a leak failure prints, to tell a missed free from a dead pin holder or writer."""
        return self.exec_python(service, _LIST_OBJECTS).strip()

    # --- faults ---------------------------------------------------------------------------------
    def kill(self, service: str) -> None:
        self.container(service).kill()  # SIGKILL

    def start(self, service: str) -> None:
        c = self.container(service)
        c.reload()
        if c.status != "running":
            c.start()

    def disconnect(self, service: str, network: str = "") -> list[str]:
        """Cuts a container off a network (the cluster's by default); returns the aliases to
        reconnect with."""
        network = network or self.network_name
        c = self.container(service)
        net = self.client.networks.get(network)
        aliases = c.attrs["NetworkSettings"]["Networks"][network].get("Aliases") or []
        aliases = [a for a in aliases if not c.id.startswith(a)] or [service]
        net.disconnect(c, force=True)
        return aliases

    def connect(self, service: str, aliases: list[str], network: str = "") -> None:
        net = self.client.networks.get(network or self.network_name)
        net.connect(self.container(service), aliases=aliases)


class FaultRunner:
    """Carries out a schedule's events until `duration_s` is spent; logs and times each one."""

    def __init__(self, cluster: DockerCluster, schedule: FaultSchedule, log: FaultLog,
                 health_probe: Callable[[], str | None], recovery_bound_s: float,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.cluster = cluster
        self.schedule = schedule
        self.log = log
        self.health_probe = health_probe  # None when healthy, else what is not
        self.recovery_bound_s = recovery_bound_s
        self.sleep = sleep
        self._also_check: Callable[[], str | None] | None = None  # the fault's own recovery check

    def run(self, duration_s: float, stop: Callable[[], bool] = lambda: False) -> None:
        t_end = time.monotonic() + duration_s
        for ev in self.schedule.events():
            if time.monotonic() >= t_end or stop():
                break
            self.inject(ev)
            if not self.wait_recovered(ev):
                break  # the cluster did not come back: later faults would only blur the cause
            self.sleep(min(ev.gap_s, max(0.0, t_end - time.monotonic())))
        self.log.write({"event": "faults_stopped"})

    def inject(self, ev: FaultEvent) -> None:
        c = self.cluster
        detail: dict[str, Any] = {}
        self._also_check = None
        self.log.fault(ev, "inject")
        if ev.kind in LEADER_KINDS:
            from . import leader_faults

            detail, self._also_check = leader_faults.inject(c, ev, self.sleep, self.recovery_bound_s)
        elif ev.kind == "kill":
            c.kill(ev.target)
            self.sleep(ev.down_s)
            c.start(ev.target)
            dep = NETNS_DEPENDENTS.get(ev.target)
            if dep:  # its raylet lives in the objmgr's network namespace, gone with it
                c.kill(dep)
                c.start(dep)
                detail["also_restarted"] = dep
        elif ev.kind == "sigkill":
            pids = c.worker_pids(ev.target)
            if pids:
                pid = pids[ev.pick % len(pids)]
                detail.update(pid=pid, of=len(pids))
                if not c.sigkill(ev.target, pid):
                    detail["skipped"] = "the worker exited before the kill"
            else:
                detail["skipped"] = "no worker process"
        elif ev.kind == "netcut":
            aliases = c.disconnect(ev.target)
            self.sleep(ev.down_s)
            c.connect(ev.target, aliases)
            detail["aliases"] = aliases
        else:
            raise ValueError(f"unknown fault kind {ev.kind!r}")
        self.log.fault(ev, "injected", **detail)

    def wait_recovered(self, ev: FaultEvent) -> bool:
        t0 = time.monotonic()
        problem: str | None = "not probed"
        seen: list[tuple[float, str]] = []  # each new problem and when it was first seen
        while time.monotonic() - t0 < self.recovery_bound_s:
            try:
                problem = self.health_probe()
                if problem is None and self._also_check is not None:
                    problem = self._also_check()
            except Exception as e:  # a probe that fails is a cluster not yet healthy
                problem = f"probe failed: {type(e).__name__}: {e}"
            if problem is None:
                self.log.fault(ev, "recovered", recovery_s=round(time.monotonic() - t0, 2),
                               waited_on=seen)
                return True
            if not seen or seen[-1][1] != problem[:200]:
                seen.append((round(time.monotonic() - t0, 1), problem[:200]))
            self.sleep(0.5)
        self.log.fault(ev, "not_recovered", error=problem, waited_s=self.recovery_bound_s,
                       waited_on=seen)
        return False


def cluster_problem(cluster: DockerCluster, http_path: str | None) -> str | None:
    """None when every container is healthy, the GCS counts 2 nodes alive and (when given) the
    Serve route answers 200 through the proxy; else what is not."""
    h = cluster.health()
    bad = {s: v for s, v in h.items() if s in cluster.services and v != "healthy"}
    missing = [s for s in cluster.services if s not in h]
    if bad or missing:
        return f"containers {json.dumps(bad)} missing {missing}"
    n = cluster.alive_nodes()
    if n != 2:
        return f"{n} nodes alive, want 2"
    if http_path and not cluster.http_ok(http_path):
        return f"no 200 from {http_path} through the proxy"
    return None


_LIST_OBJECTS = """
from ember_common import rpc
from ember_common.proto import objmgr_pb2, objmgr_pb2_grpc
ch = rpc.sync_channel("127.0.0.1:8076")
for o in objmgr_pb2_grpc.ObjectManagerStub(ch).ListObjects(objmgr_pb2.ListObjectsRequest(), timeout=10).objects:
    print(o.object_id.hex()[:16], o.size, o.state, "owner", o.owner_worker_id, "pinned_by",
          ",".join(o.pinned_by) or "-", "writer", o.creator or "-")
"""
