"""The `ember` command line: start/stop nodes, cluster status, microbenchmarks.

    ember start --head [--port 6379] [--num-cpus N] [--num-gpus N] [--resources JSON]
                [--gcs-storage memory|etcd://host:port] [--object-store-memory BYTES]
                [--metrics-export-port N]  # Prometheus: raylet N, objmgr N+1, GCS N+2 (head)
    ember start --address HOST:PORT [--num-cpus N ...]     # add a node to a cluster
    ember stop [--force]                                   # stop every node started here
    ember status [--address HOST:PORT]                     # nodes, resources used/total, actors
    ember list actors|nodes|jobs|objects [--detail]
    ember memory                                           # objects in the stores
    ember trace show TRACE_ID [--dir SPAN_DIR]             # one trace as a tree
    ember microbenchmark [--filter NAME] [--duration-s S]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import sys
from typing import Any


def _resources(ns: argparse.Namespace) -> dict[str, float]:
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
    import psutil

    from ._private import node as node_mod
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
            _check_gcs(gcs_address)
        record, node_procs = node_mod.start_node(
            session_dir, gcs_address, resources=res, object_store_memory=store, is_head=ns.head,
            node_ip=ns.node_ip_address, metrics_export_port=ns.metrics_export_port)
        procs.extend(node_procs)
    except RuntimeError as e:
        for p in procs:
            node_mod.stop_process(p.pid, popen=p.popen)
        print(f"error: {e}", file=sys.stderr)
        return 1
    # Stop order: raylet, objmgr, then the GCS.
    record.pids = [p.pid for p in node_procs] + [p.pid for p in procs if p not in node_procs]
    record.save()
    if ns.head:
        node_mod.write_current_cluster({"gcs_address": gcs_address, "session_dir": session_dir})
        print(f"Ember head node started: GCS at {gcs_address} (storage: {ns.gcs_storage}).")
        print(f"  Add nodes:        ember start --address={gcs_address}")
        print("  Connect drivers:  ember.init(address='auto')   or   "
              f"ember.init(address='{gcs_address}')")
    else:
        print(f"Ember node {record.node_id[:8]} joined the cluster at {gcs_address}.")
    print(f"  Resources: {res}")
    if ns.metrics_export_port:
        print("  Metrics:   " + ", ".join(f"{k} http://{ns.node_ip_address}:{v}/metrics"
                                          for k, v in mports.items() if v and (ns.head or k != "gcs")))
    print(f"  Logs: {session_dir}/logs    Stop: ember stop")
    return 0


def _gcs(address: str) -> Any:
    """A blocking GCS client for one CLI command: one try per call, 5 s each."""
    from ember_common import backoff
    from ember_common.gcs_client import SyncGcsClient

    return SyncGcsClient(address, retry=backoff.NO_RETRY, timeout_s=5)


def _check_gcs(address: str) -> None:
    from ember_common import rpc

    with _gcs(address) as gcs:
        try:
            gcs.get_all_node_info()
        except rpc.ServiceError as e:
            raise RuntimeError(f"cannot reach the GCS at {address}: {e.code.name}") from None


def cmd_stop(ns: argparse.Namespace) -> int:
    from ._private import node as node_mod

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


def _cluster_address(ns: argparse.Namespace) -> str | None:
    """The GCS address from --address or the cluster `ember start` made; None (after printing
    why) when there is none."""
    from ._private.worker import _resolve_address

    try:
        return _resolve_address(ns.address or "auto")
    except ConnectionError as e:
        print(f"error: {e}", file=sys.stderr)
        return None


def cmd_status(ns: argparse.Namespace) -> int:
    from ember_common import rpc
    from ember_common.proto import common_pb2, objmgr_pb2, objmgr_pb2_grpc

    address = _cluster_address(ns)
    if address is None:
        return 1
    with _gcs(address) as gcs:
        try:
            nodes = gcs.get_all_node_info()
        except rpc.ServiceError as e:
            print(f"error: cannot reach the GCS at {address}: {e.code.name}", file=sys.stderr)
            return 1
    alive = [n for n in nodes if n.state == common_pb2.NodeInfo.ALIVE]
    dead = [n for n in nodes if n.state != common_pb2.NodeInfo.ALIVE]
    print(f"======== Cluster status ({address}) ========")
    print(f"Nodes: {len(alive)} alive, {len(dead)} dead")
    total: dict[str, float] = {}
    avail: dict[str, float] = {}
    for n in alive:
        store = _store_stats(n.objmgr_address, objmgr_pb2, objmgr_pb2_grpc)
        head = " (head)" if n.is_head else ""
        print(f"  {n.node_id[:12]}{head}  ALIVE  {n.raylet_address}  {store}")
        print(f"      {_usage(dict(n.total_resources), dict(n.available_resources))}")
        for k, v in n.total_resources.items():
            total[k] = total.get(k, 0.0) + v
            avail[k] = avail.get(k, 0.0) + n.available_resources.get(k, 0.0)
    for n in dead:
        print(f"  {n.node_id[:12]}  DEAD   {n.raylet_address}  ({n.death_reason})")
    actors = _actors(address)
    if actors is not None:
        states: dict[str, int] = {}
        for a in actors:
            name = common_pb2.ActorInfo.State.Name(a.state)
            states[name] = states.get(name, 0) + 1
        print("Actors: " + (", ".join(f"{v} {k}" for k, v in sorted(states.items())) or "none"))
    print("Resources (used/total):")
    print(f"  {_usage(total, avail)}")
    endpoints = _metrics_endpoints(address, {n.node_id for n in alive})
    if endpoints:
        print("Metrics (Prometheus):")
        for key, url in endpoints:
            print(f"  {key:28} {url}")
    return 0


def _metrics_endpoints(address: str, alive: set[str]) -> list[tuple[str, str]]:
    """(service/node, URL) of the metrics endpoints recorded in the GCS KV (alive nodes only)."""
    from ember_common import metrics, rpc

    out = []
    gcs = _gcs(address)
    try:
        keys = gcs.internal_kv_keys(metrics.KV_NAMESPACE)
        for key in sorted(keys):
            raw = gcs.internal_kv_get(metrics.KV_NAMESPACE, key)
            if raw is None:  # removed meanwhile
                continue
            value = raw.decode()
            host, _, port = value.rpartition(":")
            host = host or address.rsplit(":", 1)[0]  # "" = the GCS's own host
            name = key.decode()
            if "/" in name and name.split("/", 1)[1] not in alive:
                continue
            out.append((name[:15] if "/" in name else name, f"http://{host}:{port}/metrics"))
    except rpc.ServiceError:
        return []
    finally:
        gcs.close()
    return out


def _actors(address: str) -> list[Any] | None:
    from ember_common import rpc

    with _gcs(address) as gcs:
        try:
            return gcs.get_all_actor_info()
        except rpc.ServiceError:
            return None


def cmd_list(ns: argparse.Namespace) -> int:
    """`ember list actors|nodes|jobs`: one line per entry."""
    from ember_common import rpc
    from ember_common.proto import common_pb2

    address = _cluster_address(ns)
    if address is None:
        return 1
    gcs = _gcs(address)
    try:
        if ns.what == "actors":
            nodes = {n.node_id: n for n in gcs.get_all_node_info()}
            print(f"{'ACTOR_ID':34} {'CLASS':20} {'STATE':17} {'NAME':20} {'NODE':14} {'PID':>7} RESTARTS")
            for a in gcs.get_all_actor_info():
                state = common_pb2.ActorInfo.State.Name(a.state)
                node = a.address.node_id[:12] if a.address.node_id in nodes else "-"
                name = f"{a.namespace}/{a.name}" if a.name else "-"
                print(f"{a.actor_id.hex():34} {a.class_name[:20]:20} {state:17} {name[:20]:20} "
                      f"{node:14} {a.pid or '-':>7} {a.num_restarts}")
                if a.state == common_pb2.ActorInfo.DEAD and ns.detail:
                    print(f"    death cause: {a.death_cause.splitlines()[0] if a.death_cause else '-'}")
        elif ns.what == "objects":
            _print_objects(gcs)
        elif ns.what == "nodes":
            for n in gcs.get_all_node_info():
                state = "ALIVE" if n.state == common_pb2.NodeInfo.ALIVE else "DEAD"
                print(f"{n.node_id} {state:6} {n.raylet_address:22} head={n.is_head} "
                      f"{dict(n.total_resources)}")
        else:
            for j in gcs.get_all_job_info():
                print(f"{j.job_id.hex()} {'FINISHED' if j.is_dead else 'RUNNING':9} pid={j.driver_pid} "
                      f"{j.entrypoint[:60]}")
    except rpc.ServiceError as e:
        print(f"error: cannot reach the GCS at {address}: {e.code.name}", file=sys.stderr)
        return 1
    finally:
        gcs.close()
    return 0


def _print_objects(gcs: Any) -> None:
    """Every object in every node's store: id, size, state, owner, pins."""
    import grpc

    from ember_common import rpc
    from ember_common.proto import common_pb2, objmgr_pb2, objmgr_pb2_grpc

    print(f"{'OBJECT_ID':42} {'SIZE':>12} {'STATE':8} {'NODE':14} {'OWNER':18} PINS")
    total = 0
    for n in gcs.get_all_node_info():
        if n.state != common_pb2.NodeInfo.ALIVE:
            continue
        ch = rpc.sync_channel(n.objmgr_address)
        try:
            reply = objmgr_pb2_grpc.ObjectManagerStub(ch).ListObjects(objmgr_pb2.ListObjectsRequest(), timeout=5)
        except grpc.RpcError as e:
            print(f"  node {n.node_id[:12]}: object manager unreachable ({e.code().name})")
            continue
        finally:
            ch.close()
        for o in reply.objects:
            total += o.size
            print(f"{o.object_id.hex():42} {o.size:>12} {o.state:8} {n.node_id[:12]:14} "
                  f"{o.owner_worker_id[:16]:18} {o.pins}")
    print(f"total {total / 2**20:.1f} MiB in shared memory and spill")


def cmd_memory(ns: argparse.Namespace) -> int:
    ns.what = "objects"
    ns.detail = False
    return cmd_list(ns)


def cmd_trace(ns: argparse.Namespace) -> int:
    """`ember trace show <trace-id>`: one trace as an indented tree of spans."""
    from ember_common import tracing

    if not ns.dir or not os.path.isdir(ns.dir):
        print("error: no span directory: run with OTEL_TRACES_EXPORTER=ember_file and "
              "EMBER_TRACE_DIR=<dir>, then pass --dir <dir>", file=sys.stderr)
        return 1
    trace_id = ns.trace_id.lower().replace("-", "")
    spans = tracing.read_trace(ns.dir, trace_id)
    if not spans:
        print(f"error: no spans of trace {trace_id} in {ns.dir}", file=sys.stderr)
        return 1
    services = sorted({s["service"] for s in spans})
    print(f"trace {trace_id}: {len(spans)} spans from {', '.join(services)}")
    for line in tracing.render_tree(spans):
        print(line)
    return 0


def _usage(total: dict[str, float], avail: dict[str, float]) -> str:
    parts = []
    for k in sorted(total):
        used = max(total[k] - avail.get(k, 0.0), 0.0)
        if k == "memory":
            parts.append(f"memory {used / 2**30:.1f}/{total[k] / 2**30:.1f} GiB")
        else:
            parts.append(f"{used:g}/{total[k]:g} {k}")
    return ", ".join(parts)


def _store_stats(address: str, pb2: Any, pb2_grpc: Any) -> str:
    import grpc

    from ember_common import rpc

    ch = rpc.sync_channel(address)
    try:
        s = pb2_grpc.ObjectManagerStub(ch).GetStoreStats(pb2.GetStoreStatsRequest(), timeout=3)
        return (f"object store {s.used_bytes / 2**20:.1f}/{s.capacity_bytes / 2**20:.0f} MiB "
                f"({s.num_objects} objects), spilled {s.spilled_bytes / 2**20:.1f} MiB "
                f"({s.num_spilled} objects)")
    except grpc.RpcError:
        return "object store unreachable"
    finally:
        ch.close()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ember", description="Ember cluster command line")
    sub = p.add_subparsers(dest="cmd", required=True)
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
    st = sub.add_parser("stop", help="stop every Ember node started on this machine")
    st.add_argument("--force", action="store_true")
    ss = sub.add_parser("status", help="nodes and resource usage")
    ss.add_argument("--address", default=None)
    ls = sub.add_parser("list", help="list actors, nodes or jobs")
    ls.add_argument("what", choices=["actors", "nodes", "jobs", "objects"])
    ls.add_argument("--address", default=None)
    ls.add_argument("--detail", action="store_true", help="also print death causes")
    mm = sub.add_parser("memory", help="objects in the object stores (= ember list objects)")
    mm.add_argument("--address", default=None)
    tr = sub.add_parser("trace", help="show a trace")
    tr.add_argument("action", choices=["show"])
    tr.add_argument("trace_id")
    tr.add_argument("--dir", default=os.environ.get("EMBER_TRACE_DIR"),
                    help="span directory of the ember_file exporter (default $EMBER_TRACE_DIR)")
    sub.add_parser("microbenchmark", help="Ray-compatible microbenchmarks", add_help=False)
    from ._private import job_submission

    job_submission.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "microbenchmark":
        from ._private import perf

        return perf.main(argv[1:])
    ns = build_parser().parse_args(argv)
    if ns.cmd == "start":
        return cmd_start(ns)
    if ns.cmd == "stop":
        return cmd_stop(ns)
    if ns.cmd == "list":
        return cmd_list(ns)
    if ns.cmd == "memory":
        return cmd_memory(ns)
    if ns.cmd == "trace":
        return cmd_trace(ns)
    if ns.cmd == "job":
        from ._private import job_submission

        return job_submission.main(ns)
    return cmd_status(ns)


if __name__ == "__main__":
    sys.exit(main())
