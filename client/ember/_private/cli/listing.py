"""`ember list actors|nodes|jobs|objects|placement-groups` and `ember memory` (= `ember list
objects`)."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import cluster_address, gcs, table


def add_parser(sub: Any) -> None:
    """`list` and `memory`."""
    ls = sub.add_parser("list", help="list actors, nodes, jobs, objects or placement groups")
    ls.add_argument("what", choices=["actors", "nodes", "jobs", "objects", "placement-groups"])
    ls.add_argument("--address", default=None)
    ls.add_argument("--detail", action="store_true", help="also print death causes")
    ls.set_defaults(func=cmd_list)
    mm = sub.add_parser("memory", help="objects in the object stores (= ember list objects)")
    mm.add_argument("--address", default=None)
    mm.set_defaults(func=cmd_memory, what="objects", detail=False)


def cmd_list(ns: argparse.Namespace) -> int:
    """One line per entry; 1 when no GCS answers."""
    from ember_common import rpc

    address = cluster_address(ns)
    if address is None:
        return 1
    client = gcs(address)
    try:
        if ns.what == "actors":
            lines = actor_lines(client.get_all_actor_info(),
                                {n.node_id for n in client.get_all_node_info()}, ns.detail)
        elif ns.what == "objects":
            lines = object_lines(client.get_all_node_info())
        elif ns.what == "nodes":
            lines = node_lines(client.get_all_node_info())
        elif ns.what == "placement-groups":
            lines = placement_group_lines(placement_groups(address), ns.detail)
        else:
            lines = job_lines(client.get_all_job_info())
    except rpc.ServiceError as e:
        print(f"error: cannot reach the GCS at {address}: {e.code.name}", file=sys.stderr)
        return 1
    finally:
        client.close()
    for line in lines:
        print(line)
    return 0


def cmd_memory(ns: argparse.Namespace) -> int:
    """`ember memory`: every object in every node's store."""
    return cmd_list(ns)


def actor_lines(actors: list[Any], nodes: set[str], detail: bool) -> list[str]:
    """The actor table: NAME is the actor's name and NAMESPACE its namespace (as `ray list
    actors`), both in full; '-' when unnamed."""
    from ember_common.proto import common_pb2

    header = ["ACTOR_ID", "CLASS", "STATE", "NAME", "NAMESPACE", "NODE", "PID", "RESTARTS"]
    rows, causes = [], {}
    for a in actors:
        state = common_pb2.ActorInfo.State.Name(a.state)
        node = a.address.node_id[:12] if a.address.node_id in nodes else "-"
        rows.append([a.actor_id.hex(), a.class_name, state, a.name or "-", a.namespace or "-", node,
                     str(a.pid or "-"), str(a.num_restarts)])
        if detail and a.state == common_pb2.ActorInfo.DEAD:
            causes[len(rows) - 1] = a.death_cause.splitlines()[0] if a.death_cause else "-"
    lines = table(header, rows, right=("PID", "RESTARTS"))
    out = lines[:1]
    for i, line in enumerate(lines[1:]):
        out.append(line)
        if i in causes:
            out.append(f"    death cause: {causes[i]}")
    return out


def node_lines(nodes: list[Any]) -> list[str]:
    """One line per node: id, state, raylet address, head, resources."""
    from ember_common.proto import common_pb2

    out = []
    for n in nodes:
        state = "ALIVE" if n.state == common_pb2.NodeInfo.ALIVE else "DEAD"
        out.append(f"{n.node_id} {state:6} {n.raylet_address:22} head={n.is_head} "
                   f"{dict(n.total_resources)}")
    return out


def placement_groups(address: str) -> list[Any]:
    """Every placement group the GCS knows (removed ones included); rpc errors as ServiceError."""
    import grpc

    from ember_common import rpc
    from ember_common.proto import gcs_pb2, gcs_pb2_grpc

    ch = rpc.sync_channel(address)
    try:
        stub = gcs_pb2_grpc.PlacementGroupInfoGcsServiceStub(ch)
        reply = stub.GetAllPlacementGroup(gcs_pb2.GetAllPlacementGroupRequest(), timeout=5)
    except grpc.RpcError as e:
        raise rpc.status_to_exception(e) from None
    finally:
        ch.close()
    return list(reply.placement_groups)


def placement_group_lines(groups: list[Any], detail: bool) -> list[str]:
    """The placement group table (as `ray list placement-groups`): id, name, state, strategy,
    bundles with their nodes; with detail, why a group waits or was removed."""
    from ember_common.proto import common_pb2

    PG = common_pb2.PlacementGroupInfo
    header = ["PLACEMENT_GROUP_ID", "NAME", "STATE", "STRATEGY", "LIFETIME", "BUNDLES"]
    rows, why = [], {}
    for g in groups:
        bundles = " ".join(
            f"{b.index}:{_fmt(dict(b.resources))}@{b.node_id[:8] if b.node_id else '-'}" for b in g.bundles)
        rows.append([g.placement_group_id.hex(), g.name or "-", PG.State.Name(g.state),
                     PG.Strategy.Name(g.strategy), "detached" if g.detached else "job", bundles])
        if detail and g.state_message:
            why[len(rows) - 1] = g.state_message
    lines = table(header, rows)
    out = lines[:1]
    for i, line in enumerate(lines[1:]):
        out.append(line)
        if i in why:
            out.append(f"    {why[i]}")
    return out


def _fmt(resources: dict[str, float]) -> str:
    return ",".join(f"{k}={v:g}" for k, v in sorted(resources.items()))


def job_lines(jobs: list[Any]) -> list[str]:
    """One line per job: id, state, driver pid, entrypoint."""
    return [f"{j.job_id.hex()} {'FINISHED' if j.is_dead else 'RUNNING':9} pid={j.driver_pid} "
            f"{j.entrypoint[:60]}" for j in jobs]


def object_lines(nodes: list[Any]) -> list[str]:
    """Every object in every alive node's store: id, size, state, node, owner, pins."""
    import grpc

    from ember_common import rpc
    from ember_common.proto import common_pb2, objmgr_pb2, objmgr_pb2_grpc

    out = [f"{'OBJECT_ID':42} {'SIZE':>12} {'STATE':8} {'NODE':14} {'OWNER':18} PINS"]
    total = 0
    for n in nodes:
        if n.state != common_pb2.NodeInfo.ALIVE:
            continue
        ch = rpc.sync_channel(n.objmgr_address)
        try:
            reply = objmgr_pb2_grpc.ObjectManagerStub(ch).ListObjects(objmgr_pb2.ListObjectsRequest(),
                                                                      timeout=5)
        except grpc.RpcError as e:
            out.append(f"  node {n.node_id[:12]}: object manager unreachable ({e.code().name})")
            continue
        finally:
            ch.close()
        for o in reply.objects:
            total += o.size
            out.append(f"{o.object_id.hex():42} {o.size:>12} {o.state:8} {n.node_id[:12]:14} "
                       f"{o.owner_worker_id[:16]:18} {o.pins}")
    out.append(f"total {total / 2**20:.1f} MiB in shared memory and spill")
    return out
