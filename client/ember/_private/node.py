"""Starting and stopping Ember's service processes: the embedded cluster of `ember.init()` and
the nodes of `ember start`.

Every service binds its port itself (port 0 = any free one) and writes it to a port file, so
there is no race over free ports. Logs go to <session_dir>/logs/<name>.{out,err}.

Auth (ember_common.auth): `start_gcs` (a head node, the embedded cluster) creates
~/.ember/auth_token (0600) when auth is on and no token is configured; `start_node` requires
one. Every service gets the token in its environment, never on its command line.

Multi-user hosts (private_fs): the temp root defaults to <tmp>/ember-<uid>; it and every
directory under it are 0700 and must belong to the current user, the files written there are
0600, and node files and the current-cluster pointer are trusted only when the current user
owns them. Services start with umask 077, so what they create there is private too.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ember_common import envvars

from .private_fs import default_temp_root, ensure_private_dir, open_private, read_private, write_private_json

EMBER_TMP = envvars.get("EMBER_TEMP_DIR", default_temp_root())
CURRENT_CLUSTER_FILE = os.path.join(EMBER_TMP, "ember_current_cluster")
NODES_DIR = os.path.join(EMBER_TMP, "nodes")


def new_session_dir(root: str | None = None) -> str:
    """A new session directory (0700, with its logs/) under the temp root, or under `root`
    (`ember start --temp-dir`), which must pass the same private-directory checks."""
    name = time.strftime("session_%Y-%m-%d_%H-%M-%S_") + f"{os.getpid()}_{os.urandom(2).hex()}"
    path = os.path.join(ensure_private_dir(os.path.abspath(root) if root else EMBER_TMP), name)
    os.mkdir(path, 0o700)
    os.mkdir(os.path.join(path, "logs"), 0o700)
    return path


def default_store_root() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else EMBER_TMP


def store_parent() -> str:
    """This user's object-store root, `<store root>/ember-store-<uid>`: its arenas hold every
    put() payload, so it is private like the temp root (0700, refused when another user owns it)."""
    return os.path.join(default_store_root(), f"ember-store-{os.geteuid()}")


@dataclass
class ServiceProcess:
    name: str
    pid: int
    port: int
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)
    # How it was started (start_service's module and args): a restart repeats them.
    module: str = field(default="", repr=False, compare=False)
    args: list[str] = field(default_factory=list, repr=False, compare=False)

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        try:
            os.kill(self.pid, 0)
            return True
        except OSError:
            return False


def start_service(module: str, args: list[str], session_dir: str, name: str,
                  timeout_s: float = 30.0, die_with_parent: bool = False,
                  env: dict[str, str] | None = None) -> ServiceProcess:
    """Starts `python -m module args...` and waits for it to report its bound port."""
    logs = os.path.join(session_dir, "logs")
    ensure_private_dir(session_dir)
    ensure_private_dir(logs)
    port_file = os.path.join(session_dir, f"{name}.port")
    if os.path.exists(port_file):
        os.unlink(port_file)
    cmd = [sys.executable, "-m", module, *args, "--port-file", port_file]
    if die_with_parent:
        cmd.append("--die-with-parent")
    out = open_private(os.path.join(logs, f"{name}.out"))
    err = open_private(os.path.join(logs, f"{name}.err"))
    from ember_common import auth

    full_env = dict(os.environ)
    full_env.update(auth.service_env())
    full_env.update(env or {})
    popen = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=full_env,
                             start_new_session=not die_with_parent, close_fds=True, umask=0o077)
    out.close()
    err.close()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if os.path.exists(port_file):
            return ServiceProcess(name, popen.pid, int(read_private(port_file)), popen, module, list(args))
        if popen.poll() is not None:
            raise RuntimeError(f"{name} exited with code {popen.returncode} during start-up: "
                               f"{_tail(os.path.join(logs, name + '.err'))}")
        time.sleep(0.02)
    popen.kill()
    raise RuntimeError(f"{name} did not start within {timeout_s}s; see {logs}/{name}.err")


def _tail(path: str, n: int = 5) -> str:
    try:
        with open(path, errors="replace") as f:
            lines = [ln for ln in f.read().splitlines() if ln.strip()]
        return " | ".join(lines[-n:]) or "(no output)"
    except OSError:
        return "(no log)"


def stop_process(pid: int, timeout_s: float = 5.0, popen: subprocess.Popen[bytes] | None = None) -> None:
    """SIGTERM, wait, then SIGKILL."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if popen is not None:
            if popen.poll() is not None:
                return
        else:
            try:
                os.kill(pid, 0)
                # reap if it is our child
                try:
                    if os.waitpid(pid, os.WNOHANG)[0] == pid:
                        return
                except ChildProcessError:
                    pass
            except ProcessLookupError:
                return
        time.sleep(0.02)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    if popen is not None:
        popen.wait(5)


@dataclass
class NodeRecord:
    """What a started node looks like from outside (written under NODES_DIR for `ember stop`)."""

    node_id: str
    gcs_address: str
    raylet_address: str
    objmgr_address: str
    store_dir: str
    session_dir: str
    pids: list[int]
    is_head: bool

    def save(self) -> None:
        ensure_private_dir(EMBER_TMP)
        ensure_private_dir(NODES_DIR)
        write_private_json(os.path.join(NODES_DIR, f"{self.node_id}.json"), asdict(self))


def metrics_ports(base: int) -> dict[str, int]:
    """The metrics ports of one node from `--metrics-export-port N`: raylet N, object manager
    N+1, and the GCS N+2 on the head node (0 = metrics off)."""
    if not base:
        return {"raylet": 0, "objmgr": 0, "gcs": 0}
    if not 0 < base <= 65533:
        raise ValueError(f"metrics export port must be in 1..65533 (it uses N, N+1, N+2), got {base}")
    return {"raylet": base, "objmgr": base + 1, "gcs": base + 2}


def start_gcs(session_dir: str, *, port: int = 0, storage: str = "memory", host: str = "127.0.0.1",
              die_with_parent: bool = False, cluster_name: str = "default",
              metrics_export_port: int = 0) -> ServiceProcess:
    """Starts a GCS (its command line from ember_common.settings.GcsSettings), creating the
    auth token file first when auth is on and no token is configured."""
    from ember_common import auth, rpc
    from ember_common.settings import GcsSettings

    auth.ensure_token()
    args = GcsSettings(port=port, host=rpc.bind_host(host), storage=storage, cluster_name=cluster_name,
                       session_dir=session_dir, metrics_export_port=metrics_export_port).to_argv()
    return start_service("ember_gcs", args, session_dir, "gcs", die_with_parent=die_with_parent)


def start_node(session_dir: str, gcs_address: str, *, resources: dict[str, float],
               object_store_memory: int, is_head: bool, node_ip: str = "127.0.0.1",
               raylet_port: int = 0, die_with_parent: bool = False,
               num_prestart_workers: int | None = None, spill_dir: str | None = None,
               metrics_export_port: int = 0,
               labels: dict[str, str] | None = None) -> tuple[NodeRecord, list[ServiceProcess]]:
    """Starts an object manager and a raylet for one node (metrics on ports
    `metrics_ports(metrics_export_port)` when it is not 0; `labels`: the node's own labels,
    beside Ray's defaults). Bad resources or labels raise ValueError naming them before
    anything starts."""
    from ember_common import auth, rpc
    from ember_common import resources as kit_resources
    from ember_common.ids import new_node_id

    auth.require_token()  # a node never starts open by accident
    from ember_common import labels as kit_labels
    from ember_common.settings import ObjmgrSettings, RayletSettings

    resources = kit_resources.validate(resources, source="node resources")
    labels = kit_labels.validate_node_labels(labels, "node labels")
    node_id = new_node_id()
    store_dir = os.path.join(ensure_private_dir(store_parent()), os.path.basename(session_dir), node_id)
    spill = spill_dir or os.path.join(session_dir, "spill", node_id)
    ports = metrics_ports(metrics_export_port)
    objmgr = start_service("ember_objmgr", ObjmgrSettings(
        store_dir=store_dir, capacity_bytes=object_store_memory, node_id=node_id, host=rpc.bind_host(node_ip),
        gcs_address=gcs_address, spill_dir=spill, metrics_export_port=ports["objmgr"]).to_argv(),
        session_dir, f"objmgr-{node_id[:8]}", die_with_parent=die_with_parent)
    objmgr_address = f"{node_ip}:{objmgr.port}"
    args = RayletSettings(
        gcs_address=gcs_address, objmgr_address=objmgr_address, node_id=node_id, store_dir=store_dir,
        session_dir=session_dir, resources=resources, object_store_memory_bytes=object_store_memory,
        node_ip=node_ip, host=rpc.bind_host(node_ip), port=raylet_port, head=is_head,
        num_prestart_workers=num_prestart_workers, labels=json.dumps(labels, sort_keys=True) if labels else "",
        metrics_export_port=ports["raylet"]).to_argv()
    try:
        raylet = start_service("ember_raylet", args, session_dir, f"raylet-{node_id[:8]}",
                               die_with_parent=die_with_parent)
    except Exception:
        stop_process(objmgr.pid, popen=objmgr.popen)
        raise
    record = NodeRecord(node_id, gcs_address, f"{node_ip}:{raylet.port}", objmgr_address, store_dir,
                        session_dir, [raylet.pid, objmgr.pid], is_head)
    return record, [raylet, objmgr]


def remove_session_store(session_dir: str) -> None:
    """Deletes a session's shared-memory objects (needed when an object manager was killed)."""
    import shutil

    shutil.rmtree(os.path.join(store_parent(), os.path.basename(session_dir)), ignore_errors=True)
    shutil.rmtree(os.path.join(session_dir, "spill"), ignore_errors=True)


def write_current_cluster(info: dict[str, Any]) -> None:
    """Records the head node `ember start` started (0600, in the user's private temp root)."""
    ensure_private_dir(EMBER_TMP)
    write_private_json(CURRENT_CLUSTER_FILE, info)


def read_current_cluster() -> dict[str, Any] | None:
    """The cluster `ember start --head` recorded, None when there is none; UnsafePathError when
    the temp root or the pointer belongs to another user or is a symlink (a planted pointer
    could send the auth token to someone else's GCS)."""
    from .private_fs import check_private_dir

    if not check_private_dir(EMBER_TMP):
        return None
    try:
        info = json.loads(read_private(CURRENT_CLUSTER_FILE))
    except (FileNotFoundError, ValueError):
        return None
    return info if isinstance(info, dict) else None


DEFAULT_DASHBOARD_PORT = 8265


def start_dashboard(session_dir: str, gcs_address: str, *, host: str = "127.0.0.1",
                    port: int = DEFAULT_DASHBOARD_PORT, die_with_parent: bool = False,
                    timeout_s: float = 60.0) -> ServiceProcess:
    """Starts the dashboard service (web UI + Ray's REST APIs) for a cluster; it reports its
    port once it listens and is connected. RuntimeError naming the port when it cannot start."""
    if not 0 <= port <= 65535:
        raise ValueError(f"dashboard port must be in 0..65535, got {port}")
    args = ["--gcs-address", gcs_address, "--host", host, "--port", str(port),
            "--log-dir", os.path.join(session_dir, "logs"), "--connect-timeout-s", str(timeout_s)]
    if trace_dir := envvars.get("EMBER_TRACE_DIR"):
        args += ["--trace-dir", trace_dir]
    return start_service("ember_dashboard", args, session_dir, "dashboard", timeout_s=timeout_s,
                         die_with_parent=die_with_parent)


def start_embedded_dashboard(cluster: Any, init_kwargs: dict[str, Any]) -> None:
    """`ember.init(include_dashboard=True, dashboard_host=, dashboard_port=)` on an embedded
    cluster: the dashboard as one more child process (stopped first, with the cluster); its URL
    goes to `cluster.dashboard_url` (and init()'s returned context). Port 8265 by default; 0 =
    any free one. A failed start stops the cluster and raises."""
    host = str(init_kwargs.get("dashboard_host") or "127.0.0.1")
    port = init_kwargs.get("dashboard_port")
    try:
        proc = start_dashboard(cluster.session_dir, cluster.gcs_address, host=host,
                               port=DEFAULT_DASHBOARD_PORT if port is None else int(port), die_with_parent=True)
    except Exception:
        cluster.stop()
        raise
    cluster.procs.insert(1, proc)  # EmbeddedCluster.stop: procs[1:] first, the GCS last
    cluster.dashboard_url = f"http://{host}:{proc.port}"
