"""`ember start` (a head node, or a node joining a cluster) and `ember stop`."""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from typing import Any

from .common import UsageError, check_gcs, resolve_address


def add_parser(sub: Any) -> None:
    """`start` and `stop`."""
    s = sub.add_parser("start", help="start a head node or add a node to a cluster")
    s.add_argument("--head", action="store_true")
    s.add_argument("--address", default=None,
                   help="the cluster to join: its GCS's HOST:PORT or its dashboard's http://HOST:PORT")
    s.add_argument("--port", type=int, default=6379, help="GCS port (head only)")
    s.add_argument("--num-cpus", type=float, default=None)
    s.add_argument("--num-gpus", type=float, default=None)
    s.add_argument("--memory", type=int, default=None)
    s.add_argument("--resources", default=None, help='custom resources as JSON, e.g. {"accel": 2}')
    s.add_argument("--labels", default="",
                   help='node labels as key=value pairs, e.g. "cpu-family=amd,zone=a" (or a JSON '
                        'object); tasks and actors select nodes with label_selector')
    s.add_argument("--labels-file", default="",
                   help="a YAML file mapping label keys to values (--labels wins on a shared key)")
    s.add_argument("--temp-dir", default=None,
                   help="root of this node's session directory (logs, port files); created 0700 "
                        "and refused when another user owns it")
    s.add_argument("--object-store-memory", type=int, default=None)
    s.add_argument("--gcs-storage", default="memory", help="memory (default) or etcd://host:port")
    s.add_argument("--cluster-name", default="default", help="etcd key prefix of this cluster")
    s.add_argument("--node-ip-address", default="127.0.0.1")
    s.add_argument("--metrics-export-port", type=int, default=0,
                   help="serve Prometheus metrics: raylet on N, object manager on N+1, GCS on "
                        "N+2 (head); 0 = off")
    s.add_argument("--include-dashboard", action="store_true",
                   help="start the dashboard (web UI + job REST API) on the head, port 8265")
    s.add_argument("--dashboard-port", type=int, default=None,
                   help="start the dashboard on the head on this port (0 = any free one)")
    s.add_argument("--dashboard-host", default="127.0.0.1",
                   help="interface the dashboard listens on (default loopback; 0.0.0.0 = all)")
    s.add_argument("--ray-client-server-port", type=int, default=None,
                   help="start the client proxy on the head on this port (Ray's is 10001; 0 = any "
                        "free one): drivers elsewhere connect with ember.init('ember://HOST:PORT') "
                        "or ray://; it listens on --node-ip-address")
    s.add_argument("--autoscaling-config", default=None,
                   help="run the autoscaler on the head with this cluster config (YAML or JSON)")
    s.add_argument("--block", action="store_true",
                   help="stay in the foreground watching the node's processes (a container's "
                        "entrypoint): SIGTERM or Ctrl-C stops them; if one exits unexpectedly, "
                        "the others are stopped and the command exits 1")
    s.set_defaults(func=cmd_start)
    st = sub.add_parser("stop", help="stop every Ember node started on this machine")
    st.add_argument("--force", action="store_true")
    st.set_defaults(func=cmd_stop)


def _resources(ns: argparse.Namespace) -> dict[str, float]:
    """The node's resources from --num-cpus/--num-gpus/--memory/--resources (SystemExit naming
    the bad flag)."""
    import psutil

    from ember_common import resources

    res: dict[str, float] = {"CPU": ns.num_cpus if ns.num_cpus is not None else os.cpu_count() or 1}
    if ns.num_gpus:
        res["GPU"] = ns.num_gpus
    res["memory"] = ns.memory if ns.memory is not None else int(psutil.virtual_memory().total * 0.7)
    try:
        res = resources.validate(res, source="--num-cpus/--num-gpus/--memory")
        if ns.resources:
            res.update(resources.parse_json(ns.resources, source="--resources",
                                            reserved=("CPU", "GPU"), reserved_hint="--num-cpus/--num-gpus"))
    except ValueError as e:
        raise UsageError(str(e)) from None
    return res


def _labels(ns: argparse.Namespace) -> dict[str, str]:
    """The node's labels from --labels-file then --labels (UsageError naming the bad one)."""
    from ember_common import labels

    try:
        out = labels.parse_file(ns.labels_file) if ns.labels_file else {}
        out.update(labels.parse_cli(ns.labels) if ns.labels else {})
    except ValueError as e:
        raise UsageError(str(e)) from None
    return out


def cmd_start(ns: argparse.Namespace) -> int:
    """Starts the GCS (head) and the node's raylet and object manager, detached."""
    import psutil

    from ember._private import node as node_mod
    from ember_common.config import get_config

    if ns.head == bool(ns.address):
        raise UsageError("give exactly one of --head or --address HOST:PORT")
    if ns.ray_client_server_port is not None and not ns.head:
        raise UsageError("--ray-client-server-port starts the client proxy on the head: give --head")
    if ns.autoscaling_config and not ns.head:
        raise UsageError("--autoscaling-config runs the autoscaler on the head: give --head")
    if ns.autoscaling_config:  # a bad config fails before anything starts
        from ember.autoscaler._private import config as autoscaling

        try:
            autoscaling.load(ns.autoscaling_config)
        except (autoscaling.ConfigError, OSError) as e:
            raise UsageError(f"--autoscaling-config {ns.autoscaling_config}: {e}") from None
    res = _resources(ns)
    node_labels = _labels(ns)
    store = ns.object_store_memory or int(psutil.virtual_memory().total *
                                          get_config().object_store_memory_fraction)
    try:
        mports = node_mod.metrics_ports(ns.metrics_export_port)
    except ValueError as e:
        raise UsageError(str(e)) from None
    # (a temp root another user controls raises UnsafePathError: one line, exit 1, from main)
    session_dir = node_mod.new_session_dir(ns.temp_dir)
    procs = []
    try:
        if ns.head:
            gcs = node_mod.start_gcs(session_dir, port=ns.port, storage=ns.gcs_storage, host=ns.node_ip_address,
                                     cluster_name=ns.cluster_name, metrics_export_port=mports["gcs"])
            procs.append(gcs)
            gcs_address = f"{ns.node_ip_address}:{gcs.port}"
        else:
            gcs_address = resolve_address(ns.address)  # HOST:PORT, or the dashboard's URL
            check_gcs(gcs_address)
        record, node_procs = node_mod.start_node(
            session_dir, gcs_address, resources=res, object_store_memory=store, is_head=ns.head,
            node_ip=ns.node_ip_address, metrics_export_port=ns.metrics_export_port, labels=node_labels)
        procs.extend(node_procs)
        dashboard = None
        if ns.head and (ns.include_dashboard or ns.dashboard_port is not None):
            port = node_mod.DEFAULT_DASHBOARD_PORT if ns.dashboard_port is None else ns.dashboard_port
            dashboard = node_mod.start_dashboard(session_dir, gcs_address, host=ns.dashboard_host, port=port)
            procs.append(dashboard)
        client_proxy = None
        if ns.head and ns.ray_client_server_port is not None:
            from ember._private import client_mode

            client_proxy = client_mode.start_proxy(session_dir, gcs_address, host=ns.node_ip_address,
                                                   port=ns.ray_client_server_port)
            procs.append(client_proxy)
    except (RuntimeError, ValueError) as e:  # ValueError: the auth token configuration
        for p in procs:
            node_mod.stop_process(p.pid, popen=p.popen)
        print(f"ember: error: {e}", file=sys.stderr)
        return 1
    scaler = _start_autoscaler(ns.autoscaling_config, gcs_address, session_dir) if ns.autoscaling_config else None
    # Stop order: the autoscaler (it stops the nodes it started), the dashboard and the client
    # proxy (drivers), raylet, objmgr, then the GCS.
    drivers = [p for p in (dashboard, client_proxy) if p is not None]
    record.pids = ([scaler.pid] if scaler else []) + [p.pid for p in drivers] + [
        p.pid for p in node_procs] + [p.pid for p in procs if p not in node_procs and p not in drivers]
    record.save()
    if ns.head:
        info = {"gcs_address": gcs_address, "session_dir": session_dir}
        if dashboard is not None:
            info["dashboard_url"] = f"http://{ns.dashboard_host}:{dashboard.port}"
        if client_proxy is not None:
            info["client_server_address"] = f"ember://{ns.node_ip_address}:{client_proxy.port}"
        node_mod.write_current_cluster(info)
        print(f"Ember head node started: GCS at {gcs_address} (storage: {ns.gcs_storage}).")
        print(f"  Add nodes:        ember start --address={gcs_address}")
        print("  Connect drivers:  ember.init(address='auto')   or   "
              f"ember.init(address='{gcs_address}')")
    else:
        print(f"Ember node {record.node_id[:8]} joined the cluster at {gcs_address}.")
    if dashboard is not None:
        host = ns.node_ip_address if ns.dashboard_host in ("0.0.0.0", "::") else ns.dashboard_host
        print(f"  Dashboard: http://{host}:{dashboard.port}   (jobs: ember job submit / Ray's "
              f"JobSubmissionClient('http://{host}:{dashboard.port}'))")
    if client_proxy is not None:
        print(f"  Remote drivers: ember.init('ember://{ns.node_ip_address}:{client_proxy.port}')   "
              f"(or Ray's ray://)")
    print(f"  Resources: {res}")
    if node_labels:
        print(f"  Labels:    {node_labels}")
    if ns.metrics_export_port:
        print("  Metrics:   " + ", ".join(f"{k} http://{ns.node_ip_address}:{v}/metrics"
                                          for k, v in mports.items() if v and (ns.head or k != "gcs")))
    if scaler:
        print(f"  Autoscaler: {ns.autoscaling_config} (log: {session_dir}/logs/autoscaler.log)")
    print(f"  Logs: {session_dir}/logs    Stop: ember stop")
    if not ns.block:
        return 0
    watched = {p.pid: (p.name, p.popen) for p in procs if p.popen is not None}
    if scaler is not None:
        watched[scaler.pid] = ("autoscaler", scaler)
    return _block(record, watched)


# How a process that `ember stop` (or --block's own stop) ended exits: 0 once it handled SIGTERM,
# -SIGTERM if the signal ended it, 128 + SIGTERM from a shell-style handler.
_STOPPED_EXITS = (0, -signal.SIGTERM, 128 + signal.SIGTERM)


def _block(record: Any, watched: dict[int, tuple[str, subprocess.Popen[bytes]]]) -> int:
    """`ember start --block`: waits in the foreground until a signal or a process's end.
    SIGTERM/SIGINT stop the node (exit 0). A process that exits otherwise than stopped is named
    with its exit code and the rest of the node is stopped (exit 1). When `ember stop` has
    stopped them all, it returns 0."""
    from ember._private import node as node_mod

    signalled: list[int] = []

    def on_signal(signum: int, _frame: Any) -> None:
        signalled.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print(f"--block: watching {', '.join(name for name, _ in watched.values())}; "
          "SIGTERM or Ctrl-C stops the node.", flush=True)
    path = os.path.join(node_mod.NODES_DIR, f"{record.node_id}.json")
    while not signalled:
        ended = {pid: (name, popen.returncode) for pid, (name, popen) in watched.items()
                 if popen.poll() is not None}
        failed = [f"{name} (pid {pid}, exit code {code})" for pid, (name, code) in ended.items()
                  if code not in _STOPPED_EXITS]
        if failed:
            print(f"ember: error: {', '.join(failed)} exited unexpectedly; stopping the rest of the "
                  f"node (logs: {record.session_dir}/logs)", file=sys.stderr, flush=True)
            _stop_recorded(path, _running(record, watched), force=False)
            return 1
        if len(ended) == len(watched):
            print("The node was stopped (ember stop).", flush=True)
            return 0
        time.sleep(0.2)
    print(f"{signal.Signals(signalled[0]).name}: stopping the node.", flush=True)
    _stop_recorded(path, _running(record, watched), force=False)
    return 0


def _running(record: Any, watched: dict[int, tuple[str, subprocess.Popen[bytes]]]) -> dict[str, Any]:
    """The node's record with only its processes still running (in the record's stop order)."""
    return dict(asdict(record), pids=[pid for pid in record.pids if watched[pid][1].poll() is None])


def _start_autoscaler(config: str, gcs_address: str, session_dir: str) -> subprocess.Popen[bytes]:
    """Starts the autoscaler process for the head, detached."""
    logs = os.path.join(session_dir, "logs")
    os.makedirs(logs, exist_ok=True)
    with open(os.path.join(logs, "autoscaler.log"), "ab") as log:
        p = subprocess.Popen([sys.executable, "-m", "ember.autoscaler._private.main", "--config",
                              os.path.abspath(config), "--address", gcs_address],
                             stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
    return p


def cmd_stop(ns: argparse.Namespace) -> int:
    """Stops every node `ember start` recorded on this machine (worker nodes first). It trusts
    only node files the current user owns (not symlinks) in its private temp root, and signals
    only processes the current user owns."""
    from ember._private import node as node_mod
    from ember._private.private_fs import UnsafePathError, check_private_dir, read_private

    try:
        has_nodes = check_private_dir(node_mod.EMBER_TMP) and check_private_dir(node_mod.NODES_DIR)
    except UnsafePathError as e:
        print(f"ember: error: {e}", file=sys.stderr)
        return 1
    records = []
    refused = 0
    for path in sorted(glob.glob(os.path.join(node_mod.NODES_DIR, "*.json"))) if has_nodes else []:
        try:
            records.append((path, json.loads(read_private(path))))
        except UnsafePathError as e:
            print(f"ember: error: {e}", file=sys.stderr)
            refused += 1
        except (OSError, ValueError):
            os.unlink(path)
    records.sort(key=lambda r: r[1].get("is_head", False))  # worker nodes first, head last
    stopped = sum(_stop_recorded(path, rec, ns.force) for path, rec in records)
    if has_nodes and os.path.lexists(node_mod.CURRENT_CLUSTER_FILE):
        os.unlink(node_mod.CURRENT_CLUSTER_FILE)
    print(f"Stopped {len(records)} node(s) ({stopped} processes).")
    return 1 if refused else 0


def _stop_recorded(path: str, rec: dict[str, Any], force: bool) -> int:
    """Stops one recorded node: its processes in the record's order (only the current user's),
    its store directory and its record file; for a head, the current-cluster file too. Returns
    how many processes it signalled."""
    from ember._private import node as node_mod
    from ember._private.private_fs import UnsafePathError, check_private_dir, owned_by_me

    stopped = 0
    for pid in rec["pids"]:
        if not owned_by_me(pid):
            print(f"skipping pid {pid} from {path}: not a process of the current user "
                  "(or no longer running)", file=sys.stderr)
            continue
        if force:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        else:
            node_mod.stop_process(pid, timeout_s=10)
        stopped += 1
    store_dir = rec.get("store_dir", "")
    try:
        if store_dir and check_private_dir(store_dir):
            shutil.rmtree(store_dir, ignore_errors=True)
    except UnsafePathError as e:
        print(f"not removing {store_dir}: {e}", file=sys.stderr)
    if os.path.lexists(path):
        os.unlink(path)
    if rec.get("is_head") and os.path.lexists(node_mod.CURRENT_CLUSTER_FILE):
        os.unlink(node_mod.CURRENT_CLUSTER_FILE)
    return stopped
