"""The state API's schemas and pure helpers (Ray 2.60's `ray.util.state.common`): one dataclass
per resource whose fields are Ray's columns (`detail=True` columns are filled only when asked
for), filters as Ray's `(column, "=" | "!=", value)` tuples, limits and summaries. No I/O here:
`ember.util.state` feeds these from the state door.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any

DEFAULT_LIMIT = 100
DEFAULT_RPC_TIMEOUT = 30
PREDICATES = ("=", "!=")


def state_column(*, filterable: bool, detail: bool = False, default: Any = None) -> Any:
    """A schema field: whether it can be filtered on and whether it is a detail-only column."""
    return field(default=default, metadata={"filterable": filterable, "detail": detail})


class StateSchema:
    """Base of the schemas: dataclasses that also read like dicts (`actor["state"]`), as Ray's."""

    def asdict(self) -> dict[str, Any]:
        """The entry as a plain dict."""
        return dataclasses.asdict(self)  # type: ignore[call-overload,no-any-return]

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    @classmethod
    def list_columns(cls, detail: bool = True) -> list[str]:
        """The columns a list shows (detail columns only with detail=True)."""
        return [f.name for f in fields(cls)  # type: ignore[arg-type]
                if detail or not f.metadata.get("detail", False)]

    @classmethod
    def filterable_columns(cls) -> set[str]:
        """The columns filters may name."""
        return {f.name for f in fields(cls) if f.metadata.get("filterable")}  # type: ignore[arg-type]


@dataclass
class ActorState(StateSchema):
    """An actor (Ray's ActorState)."""
    actor_id: str = state_column(filterable=True)
    class_name: str = state_column(filterable=True)
    state: str = state_column(filterable=True)
    job_id: str = state_column(filterable=True)
    name: str | None = state_column(filterable=True)
    node_id: str | None = state_column(filterable=True)
    pid: int | None = state_column(filterable=True)
    ray_namespace: str | None = state_column(filterable=True)
    serialized_runtime_env: str | None = state_column(filterable=False, detail=True)
    required_resources: dict[str, Any] | None = state_column(filterable=False, detail=True)
    death_cause: dict[str, Any] | None = state_column(filterable=False, detail=True)
    is_detached: bool | None = state_column(filterable=False, detail=True)
    placement_group_id: str | None = state_column(filterable=True, detail=True)
    repr_name: str | None = state_column(filterable=True, detail=True)
    num_restarts: int | None = state_column(filterable=False, detail=True)
    num_restarts_due_to_lineage_reconstruction: int | None = state_column(filterable=False, detail=True)
    num_restarts_due_to_node_preemption: int | None = state_column(filterable=False, detail=True)
    call_site: str | None = state_column(filterable=False, detail=True)
    label_selector: dict[str, Any] | None = state_column(filterable=False, detail=True)
    fallback_strategy: list[dict[str, Any]] | None = state_column(filterable=False, detail=True)


@dataclass
class NodeState(StateSchema):
    """A node (Ray's NodeState; resources_available, the raylet/objmgr addresses and the store
    capacity are Ember's detail columns)."""
    node_id: str = state_column(filterable=True)
    node_ip: str = state_column(filterable=True)
    is_head_node: bool = state_column(filterable=True)
    state: str = state_column(filterable=True)
    state_message: str | None = state_column(filterable=False)
    node_name: str = state_column(filterable=True)
    resources_total: dict[str, Any] = state_column(filterable=False)
    labels: dict[str, Any] = state_column(filterable=False)
    start_time_ms: int | None = state_column(filterable=False, detail=True)
    end_time_ms: int | None = state_column(filterable=False, detail=True)
    resources_available: dict[str, Any] | None = state_column(filterable=False, detail=True)
    raylet_address: str | None = state_column(filterable=False, detail=True)
    objmgr_address: str | None = state_column(filterable=False, detail=True)
    object_store_memory: int | None = state_column(filterable=False, detail=True)


@dataclass
class JobState(StateSchema):
    """A job (Ray's JobState = JobDetails): a driver that connected (type DRIVER) or a submitted
    job (type SUBMISSION, with its submission_id)."""
    type: str = state_column(filterable=True)
    job_id: str | None = state_column(filterable=True)
    submission_id: str | None = state_column(filterable=True)
    driver_info: dict[str, Any] | None = state_column(filterable=False)
    status: str = state_column(filterable=True)
    entrypoint: str = state_column(filterable=False)
    message: str | None = state_column(filterable=False)
    error_type: str | None = state_column(filterable=False)
    start_time: int | None = state_column(filterable=False)
    end_time: int | None = state_column(filterable=False)
    metadata: dict[str, Any] | None = state_column(filterable=False)
    runtime_env: dict[str, Any] | None = state_column(filterable=False)
    driver_agent_http_address: str | None = state_column(filterable=False)
    driver_node_id: str | None = state_column(filterable=False)
    driver_exit_code: int | None = state_column(filterable=False)
    entrypoint_num_cpus: float | None = state_column(filterable=False, detail=True)
    entrypoint_num_gpus: float | None = state_column(filterable=False, detail=True)
    entrypoint_memory: int | None = state_column(filterable=False, detail=True)
    entrypoint_resources: dict[str, Any] | None = state_column(filterable=False, detail=True)


@dataclass
class PlacementGroupState(StateSchema):
    """A placement group (Ray's PlacementGroupState; strategy and state_message are Ember's)."""
    placement_group_id: str = state_column(filterable=True)
    name: str = state_column(filterable=True)
    creator_job_id: str = state_column(filterable=True)
    state: str = state_column(filterable=True)
    bundles: list[Any] | None = state_column(filterable=False, detail=True)
    is_detached: bool | None = state_column(filterable=True, detail=True)
    stats: dict[str, Any] | None = state_column(filterable=False, detail=True)
    topology_strategy: dict[str, Any] | None = state_column(filterable=False, detail=True)
    topology_assignments: dict[str, Any] | None = state_column(filterable=False, detail=True)
    strategy: str | None = state_column(filterable=True, detail=True)
    ray_namespace: str | None = state_column(filterable=True, detail=True)
    state_message: str | None = state_column(filterable=False, detail=True)


@dataclass
class WorkerState(StateSchema):
    """A worker or driver process (Ray's WorkerState; current_task is Ember's)."""
    worker_id: str = state_column(filterable=True)
    is_alive: bool = state_column(filterable=True)
    worker_type: str = state_column(filterable=True)
    exit_type: str | None = state_column(filterable=True)
    node_id: str = state_column(filterable=True)
    ip: str = state_column(filterable=True)
    pid: int = state_column(filterable=True)
    exit_detail: str | None = state_column(filterable=False, detail=True)
    worker_launch_time_ms: int | None = state_column(filterable=False, detail=True)
    worker_launched_time_ms: int | None = state_column(filterable=False, detail=True)
    start_time_ms: int | None = state_column(filterable=False, detail=True)
    end_time_ms: int | None = state_column(filterable=False, detail=True)
    debugger_port: int | None = state_column(filterable=True, detail=True)
    num_paused_threads: int | None = state_column(filterable=True, detail=True)
    current_task: str | None = state_column(filterable=False, detail=True)


@dataclass
class ObjectState(StateSchema):
    """An object in a node's store (Ray's ObjectState; node_id, store_state, owner_worker_id
    and pins are Ember's)."""
    object_id: str = state_column(filterable=True)
    object_size: int = state_column(filterable=True)
    task_status: str = state_column(filterable=True)
    attempt_number: int = state_column(filterable=True)
    reference_type: str = state_column(filterable=True)
    call_site: str = state_column(filterable=True)
    type: str = state_column(filterable=True)
    pid: int | None = state_column(filterable=True)
    ip: str = state_column(filterable=True)
    node_id: str | None = state_column(filterable=True, detail=True)
    store_state: str | None = state_column(filterable=True, detail=True)
    owner_worker_id: str | None = state_column(filterable=True, detail=True)
    pins: int | None = state_column(filterable=False, detail=True)


@dataclass
class TaskState(StateSchema):
    """A task attempt (Ray's TaskState) from the task events; trace_id is Ember's."""
    task_id: str = state_column(filterable=True)
    attempt_number: int = state_column(filterable=True)
    name: str = state_column(filterable=True)
    state: str = state_column(filterable=True)
    job_id: str = state_column(filterable=True)
    actor_id: str | None = state_column(filterable=True)
    type: str = state_column(filterable=True)
    func_or_class_name: str = state_column(filterable=True)
    parent_task_id: str | None = state_column(filterable=False)
    node_id: str | None = state_column(filterable=True)
    worker_id: str | None = state_column(filterable=True)
    worker_pid: int | None = state_column(filterable=True)
    error_type: str | None = state_column(filterable=True)
    language: str | None = state_column(filterable=False, detail=True)
    required_resources: dict[str, Any] | None = state_column(filterable=False, detail=True)
    runtime_env_info: dict[str, Any] | None = state_column(filterable=False, detail=True)
    placement_group_id: str | None = state_column(filterable=False, detail=True)
    events: list[Any] | None = state_column(filterable=False, detail=True)
    profiling_data: dict[str, Any] | None = state_column(filterable=False, detail=True)
    creation_time_ms: int | None = state_column(filterable=False, detail=True)
    start_time_ms: int | None = state_column(filterable=False, detail=True)
    end_time_ms: int | None = state_column(filterable=False, detail=True)
    task_log_info: dict[str, Any] | None = state_column(filterable=False, detail=True)
    error_message: str | None = state_column(filterable=False, detail=True)
    call_site: str | None = state_column(filterable=False, detail=True)
    label_selector: dict[str, Any] | None = state_column(filterable=False, detail=True)
    is_debugger_paused: bool | None = state_column(filterable=False, detail=True)
    trace_id: str | None = state_column(filterable=False, detail=True)


SCHEMAS: dict[str, type[StateSchema]] = {
    "actors": ActorState, "nodes": NodeState, "jobs": JobState,
    "placement_groups": PlacementGroupState, "workers": WorkerState, "objects": ObjectState,
    "tasks": TaskState}
# The column `get_*` looks an entry up by.
ID_COLUMNS = {"actors": "actor_id", "nodes": "node_id", "placement_groups": "placement_group_id",
              "workers": "worker_id", "objects": "object_id", "tasks": "task_id"}


def validate_filters(resource: str, filters: list[tuple[str, str, Any]] | None) -> list[tuple[str, str, Any]]:
    """Ray's filter tuples, checked: a known filterable column, '=' or '!='. ValueError naming
    the problem otherwise."""
    schema = SCHEMAS[resource]
    out = []
    for f in filters or []:
        if not isinstance(f, (tuple, list)) or len(f) != 3:
            raise ValueError(f"a filter is a (column, predicate, value) tuple, got {f!r}")
        column, predicate, value = f
        if column not in schema.filterable_columns():
            raise ValueError(f"Given filter column {column!r} is not supported. Enter filters with one of "
                             f"following columns: {sorted(schema.filterable_columns())}")
        if predicate not in PREDICATES:
            raise ValueError(f"Unsupported filter predicate {predicate!r}: use '=' or '!='")
        out.append((column, predicate, value))
    return out


def _matches(entry: dict[str, Any], column: str, predicate: str, value: Any) -> bool:
    have = entry.get(column)
    if isinstance(have, bool) or isinstance(value, bool):
        equal = str(have).lower() == str(value).lower()
    elif isinstance(have, (int, float)) and not isinstance(value, (int, float)):
        try:
            equal = float(have) == float(value)
        except (TypeError, ValueError):
            equal = False
    elif isinstance(have, str) or isinstance(value, str):
        equal = str(have).lower() == str(value).lower()  # Ray: strings compare case-insensitively
    else:
        equal = have == value
    return equal if predicate == "=" else not equal


def apply(resource: str, rows: list[dict[str, Any]], *, filters: list[tuple[str, str, Any]] | None = None,
          limit: int = DEFAULT_LIMIT, detail: bool = False) -> tuple[list[StateSchema], int]:
    """Filtered, limited schema objects (detail columns blanked unless detail) and how many
    entries matched before the limit."""
    if not isinstance(limit, int) or limit <= 0:
        raise ValueError(f"limit must be a positive integer, got {limit!r}")
    checked = validate_filters(resource, filters)
    matched = [r for r in rows if all(_matches(r, c, p, v) for c, p, v in checked)]
    schema = SCHEMAS[resource]
    keep = set(schema.list_columns(detail=detail))
    out = [schema(**{k: v for k, v in r.items() if k in keep}) for r in matched[:limit]]
    return out, len(matched)


def summarize_actors(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Ray's ActorSummaries under 'cluster': actors per class, counted by state."""
    summary: dict[str, dict[str, Any]] = {}
    for a in rows:
        entry = summary.setdefault(a["class_name"], {"class_name": a["class_name"], "state_counts": {}})
        entry["state_counts"][a["state"]] = entry["state_counts"].get(a["state"], 0) + 1
    return {"cluster": {"summary": summary, "total_actors": len(rows), "summary_by": "class"}}


def summarize_objects(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Ray's ObjectSummaries under 'cluster', grouped by call site ('disabled': Ember records none,
    as Ray without RAY_record_ref_creation_sites)."""
    summary: dict[str, dict[str, Any]] = {}
    for o in rows:
        e = summary.setdefault(o.get("call_site") or "disabled", {
            "total_objects": 0, "total_size_mb": 0.0, "total_num_workers": 0, "total_num_nodes": 0,
            "task_state_counts": {}, "task_attempt_number_counts": {}, "ref_type_counts": {},
            "_owners": set(), "_nodes": set()})
        e["total_objects"] += 1
        e["total_size_mb"] += o["object_size"] / 2**20
        e["_owners"].add(o.get("owner_worker_id"))
        e["_nodes"].add(o.get("node_id"))
        for key, col in (("task_state_counts", "task_status"), ("ref_type_counts", "reference_type"),
                         ("task_attempt_number_counts", "attempt_number")):
            k = str(o[col])
            e[key][k] = e[key].get(k, 0) + 1
    for e in summary.values():
        e["total_num_workers"] = len(e.pop("_owners"))
        e["total_num_nodes"] = len(e.pop("_nodes"))
    return {"cluster": {"summary": summary, "total_objects": len(rows),
                        "total_size_mb": sum(o["object_size"] for o in rows) / 2**20,
                        "callsite_enabled": False, "summary_by": "callsite"}}


def summarize_tasks(summary: list[tuple[str, str, dict[str, int]]], total: int) -> dict[str, Any]:
    """Ray's TaskSummaries under 'cluster' from the GCS's per-function counts: tasks per
    function (or Class.method), counted by state."""
    out: dict[str, dict[str, Any]] = {}
    actor_tasks = actors_scheduled = 0
    for name, typ, counts in summary:
        e = out.setdefault(name, {"func_or_class_name": name, "type": typ, "state_counts": {}})
        for state, n in counts.items():
            e["state_counts"][state] = e["state_counts"].get(state, 0) + n
        n = sum(counts.values())
        if typ == "ACTOR_TASK":
            actor_tasks += n
        elif typ == "ACTOR_CREATION_TASK":
            actors_scheduled += n
    return {"cluster": {"summary": out, "total_tasks": total - actor_tasks - actors_scheduled,
                        "total_actor_tasks": actor_tasks, "total_actor_scheduled": actors_scheduled,
                        "summary_by": "func_name"}}
