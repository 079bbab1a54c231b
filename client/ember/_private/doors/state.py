"""The state door: what the GCS, the raylets and the object managers know, read through the kit's
clients and handed out as plain dicts in the shapes of Ray 2.60's state API
(`ray.util.state.common.ActorState`, `NodeState`, ...). `ember.util.state` (filters, limits,
schemas, summaries) and the dashboard read the cluster only through this module.

Every reader takes a GCS address and a timeout; an unreachable GCS is a `ConnectionError` naming
the address. A node whose raylet or object manager does not answer is left out of workers /
objects and named in the `partial` list the readers return next to their rows.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

RESOURCES = ("actors", "nodes", "jobs", "placement_groups", "workers", "objects")
# Submission jobs (the job REST API / `ember job submit`) keep their JobInfo here, as JSON.
JOB_KV_NAMESPACE = "_ember_jobs"
# Drivers the cluster runs for itself (the dashboard, Serve's proxy, the job CLI) connect in
# namespaces with this prefix and are left out of the job listings, as Ray leaves out its
# `_ray_internal_` ones.
INTERNAL_NAMESPACE_PREFIX = "_ember_"
JOB_KV_PREFIX = b"job_info:"


def resolve_address(address: str | None) -> str:
    """The GCS address: the given one (HOST:PORT, 'auto', ember://...), else the connected
    driver's, else the cluster `ember start` made. ConnectionError when there is none."""
    if address is None:
        from ..worker import global_worker_or_none

        w = global_worker_or_none()
        if w is not None:
            return str(w.core.gcs_address)
        address = "auto"
    from ..worker import _resolve_address

    resolved = _resolve_address(address)
    if resolved is None:
        raise ConnectionError(f"address {address!r} names no running cluster")
    return resolved


def _gcs(address: str, timeout_s: float) -> Any:
    from ember_common import backoff
    from ember_common.gcs_client import SyncGcsClient

    return SyncGcsClient(address, retry=backoff.NO_RETRY, timeout_s=timeout_s)


def _unreachable(address: str, e: Exception) -> ConnectionError:
    code = getattr(getattr(e, "code", None), "name", type(e).__name__)
    return ConnectionError(f"cannot reach the GCS at {address}: {code}")


def fetch(resource: str, address: str, timeout_s: float = 30.0) -> tuple[list[dict[str, Any]], list[str]]:
    """Every entry of one resource (all columns) and the parts that did not answer."""
    from ember_common import rpc

    if resource not in RESOURCES:
        raise ValueError(f"unknown resource {resource!r}; one of {', '.join(RESOURCES)}")
    readers: dict[str, Callable[[Any, str, float], tuple[list[dict[str, Any]], list[str]]]] = {
        "actors": _actors, "nodes": _nodes, "jobs": _jobs, "placement_groups": _placement_groups,
        "workers": _workers, "objects": _objects}
    client = _gcs(address, timeout_s)
    try:
        return readers[resource](client, address, timeout_s)
    except rpc.ServiceError as e:
        raise _unreachable(address, e) from None
    finally:
        client.close()


def _node_ips(client: Any) -> dict[str, str]:
    return {n.node_id: n.ip or n.raylet_address.rsplit(":", 1)[0] for n in client.get_all_node_info()}


def _actors(client: Any, address: str, timeout_s: float) -> tuple[list[dict[str, Any]], list[str]]:
    from ember_common.proto import common_pb2

    rows = []
    for a in client.get_all_actor_info():
        spec = a.creation_spec
        pg = spec.placement_group_id.hex() if spec.placement_group_id and any(spec.placement_group_id) else None
        dead = a.state == common_pb2.ActorInfo.DEAD
        rows.append({
            "actor_id": a.actor_id.hex(), "class_name": a.class_name,
            "state": common_pb2.ActorInfo.State.Name(a.state),
            "job_id": a.job_id.hex(), "name": a.name, "node_id": a.address.node_id or None,
            "pid": a.pid or None, "ray_namespace": a.namespace,
            "serialized_runtime_env": None, "required_resources": dict(spec.resources),
            "death_cause": {"error_message": a.death_cause} if dead and a.death_cause else None,
            "is_detached": bool(spec.actor_creation.detached), "placement_group_id": pg,
            "repr_name": a.class_name, "num_restarts": int(a.num_restarts),
            "num_restarts_due_to_lineage_reconstruction": 0, "num_restarts_due_to_node_preemption": 0,
            "call_site": None, "label_selector": dict(spec.labels.label_selector) or None,
            "fallback_strategy": [{"label_selector": dict(f.selector)} for f in spec.labels.fallback_strategy] or None,
        })
    return rows, []


def _plain(resources: Any) -> dict[str, float]:
    """A node's resources without the per-bundle ones placement groups add (CPU_group_<id>...)."""
    return {k: float(v) for k, v in dict(resources).items() if "_group_" not in k}


def _nodes(client: Any, address: str, timeout_s: float) -> tuple[list[dict[str, Any]], list[str]]:
    from ember_common.proto import common_pb2

    rows = []
    for n in client.get_all_node_info():
        dead = n.state == common_pb2.NodeInfo.DEAD
        rows.append({
            "node_id": n.node_id, "node_ip": n.ip or n.raylet_address.rsplit(":", 1)[0],
            "is_head_node": bool(n.is_head), "state": "DEAD" if dead else "ALIVE",
            "state_message": n.death_reason or None, "node_name": n.hostname or n.ip,
            "resources_total": _plain(n.total_resources), "labels": dict(n.labels) or {"ray.io/node-id": n.node_id},
            "start_time_ms": int(n.start_time * 1000) if n.start_time else None,
            "end_time_ms": None,
            # Ember's own columns (not in Ray's schema): what the dashboard's overview shows
            "resources_available": _plain(n.available_resources),
            "raylet_address": n.raylet_address, "objmgr_address": n.objmgr_address,
            "object_store_memory": int(n.object_store_memory),
        })
    return rows, []


def _jobs(client: Any, address: str, timeout_s: float) -> tuple[list[dict[str, Any]], list[str]]:
    """Driver jobs from the GCS job table, then submission jobs from the job KV (Ray's JobDetails)."""
    import json

    rows: list[dict[str, Any]] = []
    for j in client.get_all_job_info():
        if j.ray_namespace.startswith(INTERNAL_NAMESPACE_PREFIX):
            continue
        rows.append({
            "type": "DRIVER", "job_id": j.job_id.hex(), "submission_id": None,
            "driver_info": {"id": j.driver_worker_id, "node_ip_address": j.driver_ip, "pid": str(j.driver_pid)},
            "status": (j.end_state or "SUCCEEDED") if j.is_dead else "RUNNING", "entrypoint": j.entrypoint,
            "message": j.end_message or None, "error_type": None,
            "start_time": int(j.start_time * 1000) if j.start_time else None,
            "end_time": int(j.end_time * 1000) if j.end_time else None,
            "metadata": {}, "runtime_env": {}, "driver_agent_http_address": None,
            "driver_node_id": None, "driver_exit_code": None,
        })
    for key in client.internal_kv_keys(JOB_KV_NAMESPACE, JOB_KV_PREFIX):
        raw = client.internal_kv_get(JOB_KV_NAMESPACE, key)
        if raw:
            rows.append(json.loads(raw))
    return rows, []


def _placement_groups(client: Any, address: str, timeout_s: float) -> tuple[list[dict[str, Any]], list[str]]:
    import grpc

    from ember_common import rpc
    from ember_common.proto import common_pb2, gcs_pb2, gcs_pb2_grpc

    PG = common_pb2.PlacementGroupInfo
    ch = rpc.sync_channel(address)
    try:
        reply = gcs_pb2_grpc.PlacementGroupInfoGcsServiceStub(ch).GetAllPlacementGroup(
            gcs_pb2.GetAllPlacementGroupRequest(), timeout=timeout_s)
    except grpc.RpcError as e:
        raise rpc.status_to_exception(e) from None
    finally:
        ch.close()
    rows = []
    for g in reply.placement_groups:
        rows.append({
            "placement_group_id": g.placement_group_id.hex(), "name": g.name,
            "creator_job_id": g.job_id.hex(), "state": PG.State.Name(g.state),
            "bundles": [{"bundle_id": b.index, "node_id": b.node_id or None,
                         "unit_resources": dict(b.resources)} for b in g.bundles],
            "is_detached": bool(g.detached),
            "stats": {"scheduling_state": g.state_message or PG.State.Name(g.state)},
            "topology_strategy": None, "topology_assignments": None,
            # Ember's own columns
            "strategy": PG.Strategy.Name(g.strategy), "ray_namespace": g.namespace,
            "state_message": g.state_message or None,
        })
    return rows, []


def _ask_alive_nodes(client: Any, service: str, ask: Callable[[Any], Any],
                     missing: list[str]) -> Iterator[tuple[Any, str, Any]]:
    """(node, its IP, ask's reply) for every alive node, asking its raylet or object manager
    (`service`) over a fresh channel; a node that does not answer is added to `missing`."""
    import grpc

    from ember_common import rpc
    from ember_common.proto import common_pb2

    for n in client.get_all_node_info():
        if n.state != common_pb2.NodeInfo.ALIVE:
            continue
        ch = rpc.sync_channel(n.raylet_address if service == "raylet" else n.objmgr_address)
        try:
            reply = ask(ch)
        except grpc.RpcError as e:
            missing.append(f"{service} of node {n.node_id[:12]} ({e.code().name})")
            continue
        finally:
            ch.close()
        yield n, n.ip or n.raylet_address.rsplit(":", 1)[0], reply


def _workers(client: Any, address: str, timeout_s: float) -> tuple[list[dict[str, Any]], list[str]]:
    """Alive workers from every alive raylet's GetNodeStats, and the drivers from the job table."""
    from ember_common.proto import raylet_pb2, raylet_pb2_grpc

    rows: list[dict[str, Any]] = []
    missing: list[str] = []
    ask = lambda ch: raylet_pb2_grpc.RayletStub(ch).GetNodeStats(  # noqa: E731
        raylet_pb2.GetNodeStatsRequest(), timeout=timeout_s)
    for n, ip, stats in _ask_alive_nodes(client, "raylet", ask, missing):
        for w in stats.workers:
            rows.append(_worker_row(w.worker_id, "WORKER", True, n.node_id, ip, w.pid,
                                    w.task_name if w.leased else None))
    for j in client.get_all_job_info():
        if j.driver_worker_id:
            rows.append(_worker_row(j.driver_worker_id, "DRIVER", not j.is_dead, "", j.driver_ip,
                                    j.driver_pid, None, start=j.start_time, end=j.end_time))
    return rows, missing


def _worker_row(worker_id: str, kind: str, alive: bool, node_id: str, ip: str, pid: int,
                task: str | None, start: float = 0.0, end: float = 0.0) -> dict[str, Any]:
    return {"worker_id": worker_id, "is_alive": alive, "worker_type": kind,
            "exit_type": None if alive else "INTENDED_USER_EXIT", "node_id": node_id, "ip": ip,
            "pid": int(pid), "exit_detail": None, "worker_launch_time_ms": None,
            "worker_launched_time_ms": None,
            "start_time_ms": int(start * 1000) if start else None,
            "end_time_ms": int(end * 1000) if end else None,
            "debugger_port": None, "num_paused_threads": None,
            "current_task": task}  # Ember's own column: what a leased worker runs


def _objects(client: Any, address: str, timeout_s: float) -> tuple[list[dict[str, Any]], list[str]]:
    """Every object in every alive node's shared-memory store (what `ember memory` shows)."""
    from ember_common.proto import objmgr_pb2, objmgr_pb2_grpc

    rows: list[dict[str, Any]] = []
    missing: list[str] = []
    ask = lambda ch: objmgr_pb2_grpc.ObjectManagerStub(ch).ListObjects(  # noqa: E731
        objmgr_pb2.ListObjectsRequest(), timeout=timeout_s)
    for n, ip, reply in _ask_alive_nodes(client, "object manager", ask, missing):
        for o in reply.objects:
            rows.append({
                "object_id": o.object_id.hex(), "object_size": int(o.size),
                "task_status": "FINISHED" if o.state in ("SEALED", "SPILLED") else "PENDING_OBJ_STORE_MEM_AVAIL",
                "attempt_number": 0,
                "reference_type": "PINNED_IN_MEMORY" if o.pins else "LOCAL_REFERENCE",
                "call_site": "disabled", "type": "WORKER", "pid": None, "ip": ip,
                # Ember's own columns
                "node_id": n.node_id, "store_state": o.state, "owner_worker_id": o.owner_worker_id,
                "pins": int(o.pins),
            })
    return rows, missing


def store_stats(address: str, timeout_s: float = 5.0) -> dict[str, dict[str, int]]:
    """Per alive node: used/capacity/spilled bytes and object counts of its store."""
    import grpc

    from ember_common import rpc
    from ember_common.proto import common_pb2, objmgr_pb2, objmgr_pb2_grpc

    out: dict[str, dict[str, int]] = {}
    client = _gcs(address, timeout_s)
    try:
        nodes = client.get_all_node_info()
    except rpc.ServiceError as e:
        raise _unreachable(address, e) from None
    finally:
        client.close()
    for n in nodes:
        if n.state != common_pb2.NodeInfo.ALIVE:
            continue
        ch = rpc.sync_channel(n.objmgr_address)
        try:
            s = objmgr_pb2_grpc.ObjectManagerStub(ch).GetStoreStats(objmgr_pb2.GetStoreStatsRequest(),
                                                                    timeout=timeout_s)
        except grpc.RpcError:
            continue
        finally:
            ch.close()
        out[n.node_id] = {"used_bytes": s.used_bytes, "capacity_bytes": s.capacity_bytes,
                          "num_objects": s.num_objects, "spilled_bytes": s.spilled_bytes,
                          "num_spilled": s.num_spilled}
    return out


def session_logs_dir(address: str) -> str | None:
    """The head node's session log directory when it is on this machine (the logs viewer's root)."""
    client = _gcs(address, 5.0)
    try:
        nodes = [n for n in client.get_all_node_info() if n.is_head]
    finally:
        client.close()
    for n in nodes:
        if n.store_dir:
            # store_dir = <store parent>/<session name>/<node id>; logs under the session dir
            from ..node import EMBER_TMP

            path = os.path.join(EMBER_TMP, os.path.basename(os.path.dirname(n.store_dir)), "logs")
            if os.path.isdir(path):
                return path
    return None


# ---------------------------------------------------------------------- tasks (task events)
def fetch_tasks(address: str, filters: list[tuple[str, str, Any]] | None = None, limit: int = 0,
                timeout_s: float = 30.0) -> tuple[list[dict[str, Any]], int, dict[str, int]]:
    """Task attempts from the GCS's task-event store (filtered and limited there, newest
    first), how many matched, and the events lost per job (hex; the store's bound and the
    reporters' drops). ValueError names a bad filter."""
    from ember_common import rpc

    client = _task_client(address, timeout_s)
    try:
        reply = client.get_task_events([(c, p, _text(v)) for c, p, v in filters or []], limit)
    except rpc.InvalidArgument as e:
        raise ValueError(str(e)) from None
    except rpc.ServiceError as e:
        raise _unreachable(address, e) from None
    finally:
        client.close()
    return [_task_row(t) for t in reply.tasks], int(reply.total), dict(reply.dropped_by_job)


def task_summary(address: str, filters: list[tuple[str, str, Any]] | None = None,
                 timeout_s: float = 30.0) -> tuple[list[tuple[str, str, dict[str, int]]], int, int]:
    """(function, type, state counts) per function, the attempts counted and the events lost."""
    from ember_common import rpc
    from ember_common.proto import gcs_task_pb2

    client = _task_client(address, timeout_s)
    try:
        reply = client.get_task_summary([(c, p, _text(v)) for c, p, v in filters or []])
    except rpc.InvalidArgument as e:
        raise ValueError(str(e)) from None
    except rpc.ServiceError as e:
        raise _unreachable(address, e) from None
    finally:
        client.close()
    types = gcs_task_pb2.TaskAttempt.Type.Name
    return ([(s.func_name, types(s.type), dict(s.state_counts)) for s in reply.summary],
            int(reply.total), int(reply.num_dropped))


def _task_client(address: str, timeout_s: float) -> Any:
    from ember_common import backoff
    from ember_common.gcs_task_client import TaskEventsClient

    return TaskEventsClient(address, retry=backoff.NO_RETRY, timeout_s=timeout_s)


def _text(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def _task_row(t: Any) -> dict[str, Any]:
    from ember_common.proto import gcs_task_pb2

    TA = gcs_task_pb2.TaskAttempt
    ts = dict(t.state_ts_ns)
    ms = {k: v // 1_000_000 for k, v in ts.items()}
    order = TA.State.keys()
    events = sorted(({"state": k, "created_ms": v} for k, v in ms.items()),
                    key=lambda e: (e["created_ms"], order.index(e["state"])))
    end = ms.get("FINISHED", ms.get("FAILED"))
    return {
        "task_id": t.task_id.hex(), "attempt_number": int(t.attempt), "name": t.name,
        "state": TA.State.Name(t.state), "job_id": t.job_id.hex(), "actor_id": t.actor_id.hex() or None,
        "type": TA.Type.Name(t.type), "func_or_class_name": t.func_name, "parent_task_id": None,
        "node_id": t.node_id or None, "worker_id": t.worker_id or None, "worker_pid": int(t.pid) or None,
        "error_type": t.error_type or None, "error_message": t.error_message or None,
        "language": "PYTHON", "required_resources": None, "runtime_env_info": None,
        "placement_group_id": None, "events": events, "profiling_data": None,
        "creation_time_ms": ms.get("PENDING_ARGS_AVAIL", min(ms.values(), default=None)),
        "start_time_ms": ms.get("RUNNING"), "end_time_ms": end, "task_log_info": None,
        "call_site": None, "label_selector": None, "is_debugger_paused": None,
        # Ember's own column: the trace of the task's submission (`ember trace show ID`)
        "trace_id": t.trace_id or None,
    }
