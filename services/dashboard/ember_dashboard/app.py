"""The dashboard's ASGI app: the web UI (one HTML page, one JS file, one CSS file; no build step,
nothing fetched from elsewhere) and the JSON it reads.

    GET /                                   the UI (pages are #/overview, #/jobs, #/actors, ...)
    GET /api/v0/{resource}                  Ray's state REST API: limit, detail, filter_keys /
                                            filter_predicates / filter_values
    GET /api/v0/{actors|objects}/summarize  Ray's summaries
    GET /api/v0/tasks, /api/v0/tasks/summarize   the same for tasks (tasks_api.py)
    GET /api/cluster                        nodes with resources and object store use
    GET /api/serve/overview                 Serve applications, deployments, replicas, proxies (the UI's)
    GET /api/logs, /api/logs/file?node_id=&name=&lines=, /api/v0/logs[/file|/stream]
                                            every node's log files, through its raylet (logs_api.py)
    GET /api/metrics/targets, /api/metrics/scrape?target=   Prometheus endpoints (from the KV)
    GET /api/traces?contains=&since_ms=&until_ms=, /api/traces/{trace_id}   ember_file spans
    + the job REST API (jobs_api.py), Ray Serve's REST API (serve_api.py), the logs (logs_api.py)
    Every endpoint but GET /api/healthz and the login needs the cluster's token (auth.py).

Handlers read the cluster through `ember.util.state`, `ember.serve` and the internal KV, in
the thread pool (those calls block).
"""
from __future__ import annotations

import os
import urllib.request
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from . import auth, jobs_api, logs_api, readers, serve_api, tasks_api

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
RESOURCES = {"actors": "actors", "nodes": "nodes", "jobs": "jobs", "placement_groups": "placement_groups",
             "workers": "workers", "objects": "objects"}


def _bad(message: str, code: int = 400) -> PlainTextResponse:
    return PlainTextResponse(message, status_code=code)


async def index(request: Request) -> Response:
    """The UI."""
    return FileResponse(os.path.join(STATIC, "index.html"), headers={"Cache-Control": "no-store"})


async def state_list(request: Request) -> Response:
    """Ray's /api/v0/{resource} reply."""
    from ember._private.doors import state
    from ember.util.state import common

    resource = RESOURCES.get(request.path_params["resource"])
    if resource is None:
        return _bad(f"unknown resource {request.path_params['resource']!r}; one of {sorted(RESOURCES)}", 404)
    q = request.query_params
    keys, preds, values = q.getlist("filter_keys"), q.getlist("filter_predicates"), q.getlist("filter_values")
    if not len(keys) == len(preds) == len(values):
        return _bad("filter_keys, filter_predicates and filter_values must come in threes")
    try:
        limit = int(q.get("limit", common.DEFAULT_LIMIT))
        detail = q.get("detail", "false").lower() in ("1", "true", "yes")
        rows, missing = await run_in_threadpool(state.fetch, resource, state.resolve_address(None), 10.0)
        entries, matched = common.apply(resource, rows, filters=list(zip(keys, preds, values, strict=True)),
                                        limit=limit, detail=detail)
    except ValueError as e:
        return _bad(str(e))
    return JSONResponse({"result": True, "msg": "", "data": {"result": {
        "total": len(rows), "num_after_truncation": len(entries), "num_filtered": matched,
        "result": [e.asdict() for e in entries],
        "partial_failure_warning": "; ".join(missing), "warnings": None}}})


async def state_summary(request: Request) -> Response:
    """Ray's /api/v0/{actors|objects}/summarize reply."""
    from ember.util import state

    what = request.path_params["resource"]
    fn = {"actors": state.summarize_actors, "objects": state.summarize_objects}.get(what)
    if fn is None:
        return _bad("summaries exist for actors and objects", 404)
    summary = await run_in_threadpool(fn, None, 10, False)
    return JSONResponse({"result": True, "msg": "", "data": {"result": {"node_id_to_summary": summary}}})


def _cluster() -> dict[str, Any]:
    from ember._private.doors import state

    address = state.resolve_address(None)
    nodes, _ = state.fetch("nodes", address, 10.0)
    stores = state.store_stats(address)
    for n in nodes:
        n["object_store"] = stores.get(n["node_id"])
    alive = [n for n in nodes if n["state"] == "ALIVE"]
    total: dict[str, float] = {}
    avail: dict[str, float] = {}
    for n in alive:
        for k, v in n["resources_total"].items():
            total[k] = total.get(k, 0.0) + v
        for k, v in (n["resources_available"] or {}).items():
            avail[k] = avail.get(k, 0.0) + v
    return {"gcs_address": address, "nodes": nodes, "alive": len(alive), "dead": len(nodes) - len(alive),
            "resources_total": total, "resources_available": avail,
            "object_store_used": sum(s["used_bytes"] for s in stores.values()),
            "object_store_capacity": sum(s["capacity_bytes"] for s in stores.values())}


async def cluster(request: Request) -> Response:
    """Nodes, resources and object store use."""
    return JSONResponse(await run_in_threadpool(_cluster))


def _serve() -> dict[str, Any]:
    import dataclasses

    from ember import serve
    from ember.experimental import internal_kv as kv
    from ember.util.state import list_actors

    status = serve.status()
    apps = {name: dataclasses.asdict(a) for name, a in status.applications.items()}
    replicas = [a.asdict() for a in list_actors(filters=[("ray_namespace", "=", "serve")], limit=10_000,
                                                raise_on_missing_output=False)]
    proxies = []
    for key in kv._internal_kv_list(b"proxies/", namespace="serve"):
        proxies.append(key.decode().split("/", 1)[1])
    return {"applications": apps, "actors": replicas, "proxies": proxies}


async def serve_apps(request: Request) -> Response:
    """Serve applications, their deployments and replica states, the replica actors, the proxies."""
    return JSONResponse(await run_in_threadpool(_serve))


def _targets() -> dict[str, str]:
    from ember._private.doors import state
    from ember.experimental import internal_kv as kv

    gcs_host = state.resolve_address(None).rsplit(":", 1)[0]
    out = {}
    for key in kv._internal_kv_list(b"", namespace="metrics"):
        raw = kv._internal_kv_get(key, namespace="metrics")
        if raw:
            host, _, port = raw.decode().rpartition(":")
            out[key.decode()] = f"http://{host or gcs_host}:{port}/metrics"
    return out


async def metric_targets(request: Request) -> Response:
    """The Prometheus endpoints the services registered (name -> URL)."""
    return JSONResponse(await run_in_threadpool(_targets))


def _scrape(target: str) -> list[dict[str, Any]]:
    url = _targets().get(target)
    if url is None:
        raise KeyError(target)
    # The cluster's own endpoints: straight there, whatever http_proxy says.
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=5) as r:
        return readers.parse_prometheus(r.read().decode())


async def metric_scrape(request: Request) -> Response:
    """One endpoint's samples, now (the page keeps the history it charts)."""
    target = request.query_params.get("target", "")
    try:
        return JSONResponse(await run_in_threadpool(_scrape, target))
    except KeyError:
        return _bad(f"no metrics endpoint {target!r}", 404)
    except OSError as e:
        return _bad(f"metrics endpoint {target!r} did not answer: {e}", 502)


async def traces(request: Request) -> Response:
    """Recent traces (ember_file exporter)."""
    d = request.app.state.trace_dir
    if not d:
        return JSONResponse({"dir": None, "traces": []})
    q = request.query_params
    try:
        since, until, limit = (int(float(q.get("since_ms", "0")) * 1e6), int(float(q.get("until_ms", "0")) * 1e6),
                               int(q.get("limit", "100")))
    except ValueError:
        return _bad("since_ms, until_ms and limit are numbers")
    found = await run_in_threadpool(readers.list_traces, d, limit, q.get("contains", ""), since, until)
    return JSONResponse({"dir": d, "traces": found})


async def trace(request: Request) -> Response:
    """One trace as a waterfall."""
    d = request.app.state.trace_dir
    tid = request.path_params["trace_id"]
    spans = await run_in_threadpool(readers.waterfall, d, tid) if d else []
    if not spans:
        return _bad(f"no spans of trace {tid}", 404)
    return JSONResponse({"trace_id": tid, "spans": spans})


def build_app(*, session_name: str, trace_dir: str | None) -> Starlette:
    """The app; trace_dir None = no traces. Logs come from every node's raylet (logs_api.py)."""
    routes = [
        Route("/", index), *jobs_api.ROUTES, *tasks_api.ROUTES, *serve_api.ROUTES, *logs_api.ROUTES,
        Route("/api/v0/{resource}", state_list),
        Route("/api/v0/{resource}/summarize", state_summary),
        Route("/api/cluster", cluster),
        Route("/api/serve/overview", serve_apps),
        Route("/api/metrics/targets", metric_targets), Route("/api/metrics/scrape", metric_scrape),
        Route("/api/traces", traces), Route("/api/traces/{trace_id}", trace),
        Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
    ]
    app = Starlette(routes=routes, middleware=[Middleware(auth.TokenAuthMiddleware)])  # auth.py: the token
    app.state.session_name = session_name
    app.state.trace_dir = trace_dir
    return app
