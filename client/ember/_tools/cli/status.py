"""`ember status`: nodes (with their object stores), actors and placement groups by state,
resources, the autoscaler's node status and the pending demand (status_autoscaler.py, as `ray
status`), metrics; the placement groups that can never be placed say why."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import ADDRESS_HELP, clip, cluster_address, gcs, usage
from .status_autoscaler import autoscaler_report


def add_parser(sub: Any) -> None:
    """`status`."""
    ss = sub.add_parser("status", help="nodes and resource usage")
    ss.add_argument("--address", default=None, help=ADDRESS_HELP)
    ss.set_defaults(func=cmd_status)


def cmd_status(ns: argparse.Namespace) -> int:
    """Prints the cluster's state; 1 when no GCS answers."""
    from ember_common import rpc
    from ember_common.proto import common_pb2

    address = cluster_address(ns)
    with gcs(address) as client:
        try:
            nodes = client.get_all_node_info()
        except rpc.ServiceError as e:
            print(f"ember: error: cannot reach the GCS at {address}: {e.code.name}", file=sys.stderr)
            return 1
        try:
            actors = client.get_all_actor_info()
        except rpc.ServiceError:
            actors = None
    alive = [n for n in nodes if n.state == common_pb2.NodeInfo.ALIVE]
    dead = [n for n in nodes if n.state != common_pb2.NodeInfo.ALIVE]
    print(f"======== Cluster status ({address}) ========")
    print(f"Nodes: {len(alive)} alive, {len(dead)} dead")
    total: dict[str, float] = {}
    avail: dict[str, float] = {}
    for n in alive:
        head = " (head)" if n.is_head else ""
        print(f"  {n.node_id[:12]}{head}  ALIVE  {n.raylet_address}  {store_stats(n.objmgr_address)}")
        print(f"      {usage(dict(n.total_resources), dict(n.available_resources))}")
        for k, v in n.total_resources.items():
            total[k] = total.get(k, 0.0) + v
            avail[k] = avail.get(k, 0.0) + n.available_resources.get(k, 0.0)
    for n in dead:
        print(f"  {n.node_id[:12]}  DEAD   {n.raylet_address}  ({n.death_reason})")
    if actors is not None:
        states: dict[str, int] = {}
        for a in actors:
            name = common_pb2.ActorInfo.State.Name(a.state)
            states[name] = states.get(name, 0) + 1
        print("Actors: " + (", ".join(f"{v} {k}" for k, v in sorted(states.items())) or "none"))
    got = placement_group_states(address)
    if got is not None:
        groups, never = got
        print("Placement groups: " + (", ".join(f"{v} {k}" for k, v in sorted(groups.items()))
                                      or "none"))
        for pg_id, why in never:
            print(f"  {pg_id[:12]}  {why}")
    failures = runtime_env_failures(address)
    if failures:
        print("Runtime env set-up failures (latest per node; the raylet log has the details):")
        for node_id, env, msg in failures:
            print(f"  {node_id[:12]}  env {env}: {msg}")
    print("Resources (used/total):")
    print(f"  {usage(total, avail)}")
    for line in autoscaler_report(address):  # ray status's node status and demands
        print(line)
    endpoints = metrics_endpoints(address, {n.node_id for n in alive})
    if endpoints:
        print("Metrics (Prometheus):")
        for key, url in endpoints:
            print(f"  {key:28} {url}")
    return 0


def placement_group_states(address: str) -> tuple[dict[str, int], list[tuple[str, str]]] | None:
    """Placement groups by state (REMOVED ones left out), and (hex id, why) of the waiting groups
    that can never be placed on the alive nodes; None when the GCS does not answer."""
    from ember._private.doors import state

    try:
        groups, _ = state.fetch("placement_groups", address, timeout_s=5)
    except ConnectionError:
        return None
    states: dict[str, int] = {}
    never: list[tuple[str, str]] = []
    for g in groups:
        if g["state"] != "REMOVED":
            states[g["state"]] = states.get(g["state"], 0) + 1
        why = g.get("state_message") or ""
        if g["state"] in ("PENDING", "RESCHEDULING") and why.startswith("infeasible"):
            never.append((g["placement_group_id"], why))
    return states, never


def metrics_endpoints(address: str, alive: set[str]) -> list[tuple[str, str]]:
    """(service/node, URL) of the metrics endpoints the services recorded in the internal KV
    (alive nodes only); [] when the KV cannot be read."""
    from ember._private.doors import internal_kv as kv
    from ember_common import metrics, rpc

    out = []
    kv._initialize_internal_kv(address, timeout_s=5)
    try:
        for key in kv._internal_kv_list(b"", namespace=metrics.KV_NAMESPACE):
            raw = kv._internal_kv_get(key, namespace=metrics.KV_NAMESPACE)
            if raw is None:  # removed meanwhile
                continue
            host, _, port = raw.decode().rpartition(":")
            host = host or address.rsplit(":", 1)[0]  # "" = the GCS's own host
            name = key.decode()
            if "/" in name and name.split("/", 1)[1] not in alive:
                continue
            out.append((name[:15] if "/" in name else name, f"http://{host}:{port}/metrics"))
    except rpc.ServiceError:
        return []
    finally:
        kv._internal_kv_reset()
    return out


def store_stats(address: str) -> str:
    """One line about a node's object store, or 'object store unreachable'."""
    import grpc

    from ember_common import rpc
    from ember_common.proto import objmgr_pb2, objmgr_pb2_grpc

    ch = rpc.sync_channel(address)
    try:
        s = objmgr_pb2_grpc.ObjectManagerStub(ch).GetStoreStats(objmgr_pb2.GetStoreStatsRequest(),
                                                                timeout=3)
        return (f"object store {s.used_bytes / 2**20:.1f}/{s.capacity_bytes / 2**20:.0f} MiB "
                f"({s.num_objects} objects), spilled {s.spilled_bytes / 2**20:.1f} MiB "
                f"({s.num_spilled} objects)")
    except grpc.RpcError:
        return "object store unreachable"
    finally:
        ch.close()


def runtime_env_failures(address: str) -> list[tuple[str, str, str]]:
    """(node id, env hash, first line of the reason) of the raylets' latest runtime env set-up
    failures (they publish them in the KV, namespace "runtime_env", key failures/<node id>)."""
    import json

    from ember_common import rpc

    out = []
    try:
        with gcs(address) as client:
            for key in client.internal_kv_keys("runtime_env", b"failures/", timeout_s=5):
                blob = client.internal_kv_get("runtime_env", key, timeout_s=5)
                for env, msg in json.loads(blob or b"[]")[-3:]:
                    out.append((key.decode()[len("failures/"):], env, clip(msg.splitlines()[0], 160)))
    except (rpc.ServiceError, ValueError):
        return []
    return out
