"""`ember start` (a head node, or a node joining a cluster) and `ember stop`."""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import sys
from typing import Any

from .common import check_gcs


def add_parser(sub: Any) -> None:
    """`start` and `stop`."""
    s = sub.add_parser("start", help="start a head node or add a node to a cluster")
    s.add_argument("--head", action="store_true")
    s.add_argument("--address", default=None, help="GCS address HOST:PORT of the cluster to join")
    s.add_argument("--port", type=int, default=6379, help="GCS port (head only)")
    s.add_argument("--num-cpus", type=float, default=None)
    s.add_argument("--num-gpus", type=float, default=None)
    s.add_argument("--memory", type=int, default=None)
    s.add_argument("--resources", default=None, help='custom resources as JSON, e.g. {"accel": 2}')
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
        raise SystemExit(f"error: {e}") from None
    return res


def cmd_start(ns: argparse.Namespace) -> int:
    """Starts the GCS (head) and the node's raylet and object manager, detached."""
    import psutil

    from ember._private import node as node_mod
    from ember_common.config import get_config

    if ns.head == bool(ns.address):
        raise SystemExit("error: give exactly one of --head or --address HOST:PORT")
    res = _resources(ns)
    store = ns.object_store_memory or int(psutil.virtual_memory().total *
                                          get_config().object_store_memory_fraction)
    try:
        mports = node_mod.metrics_ports(ns.metrics_export_port)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    session_dir = node_mod.new_session_dir()
    procs = []
    try:
        if ns.head:
            gcs = node_mod.start_gcs(session_dir, port=ns.port, storage=ns.gcs_storage,
                                     cluster_name=ns.cluster_name, metrics_export_port=mports["gcs"])
            procs.append(gcs)
            gcs_address = f"{ns.node_ip_address}:{gcs.port}"
        else:
            gcs_address = ns.address
            check_gcs(gcs_address)
        record, node_procs = node_mod.start_node(
            session_dir, gcs_address, resources=res, object_store_memory=store, is_head=ns.head,
            node_ip=ns.node_ip_address, metrics_export_port=ns.metrics_export_port)
        procs.extend(node_procs)
        dashboard = None
        if ns.head and (ns.include_dashboard or ns.dashboard_port is not None):
            port = node_mod.DEFAULT_DASHBOARD_PORT if ns.dashboard_port is None else ns.dashboard_port
            dashboard = node_mod.start_dashboard(session_dir, gcs_address, host=ns.dashboard_host, port=port)
            procs.append(dashboard)
    except (RuntimeError, ValueError) as e:  # ValueError: the auth token configuration
        for p in procs:
            node_mod.stop_process(p.pid, popen=p.popen)
        print(f"error: {e}", file=sys.stderr)
        return 1
    # Stop order: the dashboard (a driver), raylet, objmgr, then the GCS.
    record.pids = ([dashboard.pid] if dashboard else []) + [p.pid for p in node_procs] + [
        p.pid for p in procs if p not in node_procs and p is not dashboard]
    record.save()
    if ns.head:
        info = {"gcs_address": gcs_address, "session_dir": session_dir}
        if dashboard is not None:
            info["dashboard_url"] = f"http://{ns.dashboard_host}:{dashboard.port}"
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
    print(f"  Resources: {res}")
    if ns.metrics_export_port:
        print("  Metrics:   " + ", ".join(f"{k} http://{ns.node_ip_address}:{v}/metrics"
                                          for k, v in mports.items() if v and (ns.head or k != "gcs")))
    print(f"  Logs: {session_dir}/logs    Stop: ember stop")
    return 0


def cmd_stop(ns: argparse.Namespace) -> int:
    """Stops every node `ember start` recorded on this machine (worker nodes first)."""
    from ember._private import node as node_mod

    records = []
    for path in glob.glob(os.path.join(node_mod.NODES_DIR, "*.json")):
        try:
            with open(path) as f:
                records.append((path, json.load(f)))
        except (OSError, ValueError):
            os.unlink(path)
    records.sort(key=lambda r: r[1].get("is_head", False))  # worker nodes first, head last
    stopped = 0
    for path, rec in records:
        for pid in rec["pids"]:
            if ns.force:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            else:
                node_mod.stop_process(pid, timeout_s=10)
            stopped += 1
        shutil.rmtree(rec.get("store_dir", ""), ignore_errors=True)
        os.unlink(path)
    if os.path.exists(node_mod.CURRENT_CLUSTER_FILE):
        os.unlink(node_mod.CURRENT_CLUSTER_FILE)
    print(f"Stopped {len(records)} node(s) ({stopped} processes).")
    return 0
