"""The state API (Ray 2.60's `ray.util.state`): what the cluster holds, as lists of schema
objects that also read like dicts.

    from ember.util.state import list_actors, summarize_actors
    list_actors(filters=[("state", "=", "ALIVE")], limit=10, detail=True)
    summarize_actors()["cluster"]["summary"]

Sources: actors, nodes, jobs and placement groups from the GCS; workers from each raylet;
objects from each object manager (what `ember memory` shows); submitted jobs from the job
records the job REST API keeps in the internal KV; tasks from the GCS's task-event store (owners
and executors report state transitions there in batches, about once a second, so a task shows
up to a second late), filtered and limited in the GCS; log files from each node's raylet
(logs.py: `list_logs`, `get_log`). Each call goes through `ember._private.doors.state` (the
state door) or `ember._private.doors.logs`.
"""
from __future__ import annotations

import warnings
from typing import Any, cast

from ember._private.doors import state as _door

from .common import (
    DEFAULT_LIMIT,
    DEFAULT_RPC_TIMEOUT,
    ID_COLUMNS,
    ActorState,
    JobState,
    NodeState,
    ObjectState,
    PlacementGroupState,
    StateSchema,
    TaskState,
    WorkerState,
    apply,
    validate_filters,
)
from .common import summarize_actors as _summarize_actors
from .common import summarize_objects as _summarize_objects
from .common import summarize_tasks as _summarize_tasks
from .logs import get_log, list_logs

__all__ = ["ActorState", "JobState", "NodeState", "ObjectState", "PlacementGroupState",
           "StateSchema", "TaskState", "WorkerState", "get_actor", "get_job", "get_log", "get_node", "get_objects",
           "get_placement_group", "get_task", "get_worker", "list_actors", "list_jobs", "list_logs", "list_nodes",
           "list_objects", "list_placement_groups", "list_tasks", "list_workers", "summarize_actors",
           "summarize_objects", "summarize_tasks"]

Filters = list[tuple[str, str, Any]] | None


def _rows(resource: str, address: str | None, timeout: float, raise_on_missing_output: bool) -> list[dict[str, Any]]:
    rows, missing = _door.fetch(resource, _door.resolve_address(address), timeout)
    if missing:
        message = f"{resource}: no answer from {', '.join(missing)}; the list leaves them out"
        if raise_on_missing_output:
            raise RuntimeError(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)
    return rows


def _list(resource: str, address: str | None, filters: Filters, limit: int, timeout: float, detail: bool,
          raise_on_missing_output: bool) -> list[Any]:
    entries, _ = apply(resource, _rows(resource, address, timeout, raise_on_missing_output),
                       filters=filters, limit=limit, detail=detail)
    return entries


def list_actors(address: str | None = None, filters: Filters = None, limit: int = DEFAULT_LIMIT,
                timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False, raise_on_missing_output: bool = True,
                _explain: bool = False) -> list[ActorState]:
    """Actors in the cluster (alive, pending, restarting and dead)."""
    return _list("actors", address, filters, limit, timeout, detail, raise_on_missing_output)


def list_nodes(address: str | None = None, filters: Filters = None, limit: int = DEFAULT_LIMIT,
               timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False, raise_on_missing_output: bool = True,
               _explain: bool = False) -> list[NodeState]:
    """Nodes in the cluster, alive and dead."""
    return _list("nodes", address, filters, limit, timeout, detail, raise_on_missing_output)


def list_jobs(address: str | None = None, filters: Filters = None, limit: int = DEFAULT_LIMIT,
              timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False, raise_on_missing_output: bool = True,
              _explain: bool = False) -> list[JobState]:
    """Jobs: drivers that connected (type DRIVER) and submitted jobs (type SUBMISSION)."""
    return _list("jobs", address, filters, limit, timeout, detail, raise_on_missing_output)


def list_placement_groups(address: str | None = None, filters: Filters = None, limit: int = DEFAULT_LIMIT,
                          timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False,
                          raise_on_missing_output: bool = True, _explain: bool = False) -> list[PlacementGroupState]:
    """Placement groups, removed ones included."""
    return _list("placement_groups", address, filters, limit, timeout, detail, raise_on_missing_output)


def list_workers(address: str | None = None, filters: Filters = None, limit: int = DEFAULT_LIMIT,
                 timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False, raise_on_missing_output: bool = True,
                 _explain: bool = False) -> list[WorkerState]:
    """Worker processes of every alive node and the drivers of every job."""
    return _list("workers", address, filters, limit, timeout, detail, raise_on_missing_output)


def list_objects(address: str | None = None, filters: Filters = None, limit: int = DEFAULT_LIMIT,
                 timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False, raise_on_missing_output: bool = True,
                 _explain: bool = False) -> list[ObjectState]:
    """Objects in every alive node's shared-memory store (small values inline in their owner
    are not in a store and not listed)."""
    return _list("objects", address, filters, limit, timeout, detail, raise_on_missing_output)


def _get(resource: str, id: str, address: str | None, timeout: float) -> Any:
    if not isinstance(id, str) or not id:
        raise ValueError(f"an id is a non-empty hex string, got {id!r}")
    rows = [r for r in _rows(resource, address, timeout, False) if r[ID_COLUMNS[resource]] == id]
    entries, _ = apply(resource, rows, detail=True, limit=max(len(rows), 1))
    return entries


def get_actor(id: str, address: str | None = None, timeout: int = DEFAULT_RPC_TIMEOUT,
              _explain: bool = False) -> ActorState | None:
    """One actor by id (hex), all columns; None when the GCS does not know it."""
    found = _get("actors", id, address, timeout)
    return found[0] if found else None


def get_node(id: str, address: str | None = None, timeout: int = DEFAULT_RPC_TIMEOUT,
             _explain: bool = False) -> NodeState | None:
    """One node by id; None when unknown."""
    found = _get("nodes", id, address, timeout)
    return found[0] if found else None


def get_placement_group(id: str, address: str | None = None, timeout: int = DEFAULT_RPC_TIMEOUT,
                        _explain: bool = False) -> PlacementGroupState | None:
    """One placement group by id (hex); None when unknown."""
    found = _get("placement_groups", id, address, timeout)
    return found[0] if found else None


def get_worker(id: str, address: str | None = None, timeout: int = DEFAULT_RPC_TIMEOUT,
               _explain: bool = False) -> WorkerState | None:
    """One worker (or driver) by worker id; None when unknown."""
    found = _get("workers", id, address, timeout)
    return found[0] if found else None


def get_job(id: str, address: str | None = None, timeout: int = DEFAULT_RPC_TIMEOUT,
            _explain: bool = False) -> JobState | None:
    """One job by job id or submission id; None when unknown."""
    if not isinstance(id, str) or not id:
        raise ValueError(f"an id is a non-empty string, got {id!r}")
    rows = [r for r in _rows("jobs", address, timeout, False) if id in (r.get("job_id"), r.get("submission_id"))]
    entries, _ = apply("jobs", rows, detail=True, limit=max(len(rows), 1))
    return cast(JobState, entries[0]) if entries else None


def get_objects(id: str, address: str | None = None, timeout: int = DEFAULT_RPC_TIMEOUT,
                _explain: bool = False) -> list[ObjectState]:
    """Every copy of one object (one entry per node holding it)."""
    return list(_get("objects", id, address, timeout))


def summarize_actors(address: str | None = None, timeout: int = DEFAULT_RPC_TIMEOUT,
                     raise_on_missing_output: bool = True, _explain: bool = False) -> dict[str, Any]:
    """Actors per class with counts by state: {'cluster': {'summary': {...}, 'total_actors': n}}."""
    return _summarize_actors(_rows("actors", address, timeout, raise_on_missing_output))


def summarize_objects(address: str | None = None, timeout: int = DEFAULT_RPC_TIMEOUT,
                      raise_on_missing_output: bool = True, _explain: bool = False) -> dict[str, Any]:
    """Objects grouped by call site with counts and total size: {'cluster': {...}}."""
    return _summarize_objects(_rows("objects", address, timeout, raise_on_missing_output))


def list_tasks(address: str | None = None, filters: Filters = None, limit: int = DEFAULT_LIMIT,
               timeout: int = DEFAULT_RPC_TIMEOUT, detail: bool = False, raise_on_missing_output: bool = True,
               _explain: bool = False) -> list[TaskState]:
    """Task attempts (newest first) from the task events; filtered and limited in the GCS. When
    events were lost (the GCS's bound, or a reporter's full buffer) a warning says how many."""
    if not isinstance(limit, int) or limit <= 0:
        raise ValueError(f"limit must be a positive integer, got {limit!r}")
    checked = validate_filters("tasks", filters)
    rows, _, dropped = _door.fetch_tasks(_door.resolve_address(address), checked, limit, timeout)
    lost = sum(dropped.values())
    if lost:
        warnings.warn(f"tasks: {lost} task events were dropped (the GCS keeps at most "
                      "EMBER_TASK_EVENTS_MAX_NUM_TASK_IN_GCS attempts); the list may be incomplete",
                      RuntimeWarning, stacklevel=2)
    entries, _ = apply("tasks", rows, limit=max(len(rows), 1), detail=detail)
    return entries  # type: ignore[return-value]


def get_task(id: Any, address: str | None = None, timeout: int = DEFAULT_RPC_TIMEOUT,
             _explain: bool = False) -> TaskState | list[TaskState] | None:
    """A task's attempts by task id (hex) or by an ObjectRef it returns: the attempt when there
    is one, a list when it was retried (as Ray), None when unknown."""
    task_id = id.task_id().hex() if hasattr(id, "task_id") else id
    if not isinstance(task_id, str) or not task_id:
        raise ValueError(f"an id is a non-empty hex string or an ObjectRef, got {id!r}")
    rows, _, _ = _door.fetch_tasks(_door.resolve_address(address), [("task_id", "=", task_id)], 0, timeout)
    entries, _ = apply("tasks", rows, limit=max(len(rows), 1), detail=True)
    if not entries:
        return None
    return entries[0] if len(entries) == 1 else entries  # type: ignore[return-value]


def summarize_tasks(address: str | None = None, timeout: int = DEFAULT_RPC_TIMEOUT,
                    raise_on_missing_output: bool = True, _explain: bool = False) -> dict[str, Any]:
    """Ray's task summary: attempts per function (or Class.method) by state, counted in the GCS."""
    summary, total, _ = _door.task_summary(_door.resolve_address(address), None, timeout)
    return _summarize_tasks(summary, total)
