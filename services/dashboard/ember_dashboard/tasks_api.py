"""The dashboard's task routes (Ray's state REST API for tasks), kept apart from app.py:

    GET /api/v0/tasks              limit, detail, filter_keys / filter_predicates / filter_values;
                                   filtered and limited in the GCS's task-event store, newest first
    GET /api/v0/tasks/summarize    tasks per function and state (Ray's TaskSummaries)

Both read through `ember.util.state`'s door (`ember._private.doors.state.fetch_tasks / task_summary`)
in the thread pool. The UI's tasks page (static/tasks.js) reads them.
"""
from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route


def _list(filters: list[tuple[str, str, str]], limit: int, detail: bool) -> dict[str, Any]:
    from ember._private.doors import state
    from ember.util.state import common

    checked = common.validate_filters("tasks", filters)
    rows, matched, dropped = state.fetch_tasks(state.resolve_address(None), checked, limit, 10.0)
    entries, _ = common.apply("tasks", rows, limit=max(len(rows), 1), detail=detail)
    lost = sum(dropped.values())
    return {"total": matched, "num_after_truncation": len(entries), "num_filtered": matched,
            "result": [e.asdict() for e in entries], "partial_failure_warning": "",
            "warnings": [f"{lost} task events were dropped; the list may be incomplete"] if lost else None,
            "dropped_by_job": dropped}


async def tasks_list(request: Request) -> Response:
    """Ray's /api/v0/tasks reply."""
    q = request.query_params
    keys, preds, values = q.getlist("filter_keys"), q.getlist("filter_predicates"), q.getlist("filter_values")
    if not len(keys) == len(preds) == len(values):
        return PlainTextResponse("filter_keys, filter_predicates and filter_values must come in threes", 400)
    try:
        limit = int(q.get("limit", "100"))
        if limit <= 0:
            raise ValueError(f"limit must be a positive integer, got {limit}")
        detail = q.get("detail", "false").lower() in ("1", "true", "yes")
        result = await run_in_threadpool(_list, list(zip(keys, preds, values, strict=True)), limit, detail)
    except ValueError as e:
        return PlainTextResponse(str(e), 400)
    return JSONResponse({"result": True, "msg": "", "data": {"result": result}})


def _summary() -> dict[str, Any]:
    from ember._private.doors import state
    from ember.util.state import common

    counts, total, lost = state.task_summary(state.resolve_address(None), None, 10.0)
    out = common.summarize_tasks(counts, total)
    out["cluster"]["num_dropped"] = lost  # Ember's: events the store or reporters dropped
    return out


async def tasks_summary(request: Request) -> Response:
    """Ray's /api/v0/tasks/summarize reply."""
    summary = await run_in_threadpool(_summary)
    return JSONResponse({"result": True, "msg": "", "data": {"result": {"node_id_to_summary": summary}}})


# Registered before app.py's generic /api/v0/{resource} routes.
ROUTES = [Route("/api/v0/tasks", tasks_list), Route("/api/v0/tasks/summarize", tasks_summary)]
