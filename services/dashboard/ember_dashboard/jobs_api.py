"""Ray's job REST API (what `ray.job_submission.JobSubmissionClient` and `ray job submit
--address http://HOST:8265` speak), over `ember._tools.job_manager`:

    GET    /api/version                        {"version", "ray_version", ...}
    GET    /api/packages/{protocol}/{name}     200 when uploaded, else 404
    PUT    /api/packages/{protocol}/{name}     body: the zip (working_dir)
    POST   /api/jobs/                          JobSubmitRequest -> {"job_id", "submission_id"}
    GET    /api/jobs/                          [JobDetails]
    GET    /api/jobs/{id}                      JobDetails (by submission id or driver job id)
    GET    /api/jobs/{id}/logs                 {"logs": "..."}
    WS     /api/jobs/{id}/logs/tail            text frames as the output grows; closed at the end
    POST   /api/jobs/{id}/stop                 {"stopped": bool}
    DELETE /api/jobs/{id}                      {"deleted": bool}

Bad input is a 400 whose body names the problem; an unknown job is a 404. The job manager
calls block (they wait on actors), so they run in the thread pool.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

# The Ray API version Ember's REST API follows (Ray's clients check ray_version >= 2.8).
RAY_API_VERSION = "2.60.0"
EMBER_VERSION = "0.1.0"
SUBMIT_FIELDS = ("entrypoint", "submission_id", "job_id", "runtime_env", "metadata", "entrypoint_num_cpus",
                 "entrypoint_num_gpus", "entrypoint_memory", "entrypoint_resources", "entrypoint_label_selector")


def _jm() -> Any:
    from ember._tools import job_manager

    return job_manager


def _bad(message: str, code: int = 400) -> PlainTextResponse:
    return PlainTextResponse(message, status_code=code)


async def version(request: Request) -> JSONResponse:
    """Ray's version handshake."""
    return JSONResponse({"version": "4", "ray_version": RAY_API_VERSION, "ray_commit": "ember",
                         "ember_version": EMBER_VERSION,
                         "session_name": request.app.state.session_name})


async def get_package(request: Request) -> Response:
    """200 when the package was uploaded, 404 when not."""
    uri = f"{request.path_params['protocol']}://{request.path_params['name']}"
    try:
        exists = await run_in_threadpool(_jm().package_exists, uri)
    except ValueError as e:
        return _bad(str(e))
    return Response(status_code=200) if exists else _bad(f"Package {uri} not found", 404)


async def put_package(request: Request) -> Response:
    """Stores an uploaded package."""
    uri = f"{request.path_params['protocol']}://{request.path_params['name']}"
    data = await request.body()
    try:
        await run_in_threadpool(_jm().put_package, uri, data)
    except ValueError as e:
        return _bad(str(e))
    return Response(status_code=200)


async def submit(request: Request) -> Response:
    """Starts a job."""
    try:
        body = json.loads(await request.body())
    except ValueError:
        return _bad("the request body is not JSON")
    if not isinstance(body, dict):
        return _bad("the request body must be a JSON object (Ray's JobSubmitRequest)")
    unknown = sorted(set(body) - set(SUBMIT_FIELDS))
    if unknown:
        return _bad(f"unknown JobSubmitRequest fields {unknown}")
    if "entrypoint" not in body:
        return _bad("JobSubmitRequest needs an 'entrypoint'")
    if body.get("entrypoint_label_selector"):
        return _bad("entrypoint_label_selector is not supported by Ember yet (a job's entrypoint is "
                    "not placed by node labels; its tasks and actors take label_selector)")
    kwargs = {k: body.get(k) for k in SUBMIT_FIELDS[3:-1]}
    sid = body.get("submission_id") or body.get("job_id")
    try:
        sid = await run_in_threadpool(lambda: _jm().submit(body["entrypoint"], submission_id=sid, **kwargs))
    except ValueError as e:
        return _bad(str(e))
    return JSONResponse({"job_id": sid, "submission_id": sid})


def _find(job_id: str) -> dict[str, Any] | None:
    """A submitted job by submission id, else a driver job by job id."""
    from ember._private.doors import state

    rec = _jm().info(job_id)
    if rec is not None:
        return dict(rec)
    rows, _ = state.fetch("jobs", state.resolve_address(None), 10)
    for r in rows:
        if r["type"] == "DRIVER" and r["job_id"] == job_id:
            return dict(r)
    return None


async def list_jobs(request: Request) -> JSONResponse:
    """Every job: submitted ones and connected drivers (Ray lists both)."""
    from ember._private.doors import state

    def read() -> list[dict[str, Any]]:
        drivers = [r for r in state.fetch("jobs", state.resolve_address(None), 10)[0] if r["type"] == "DRIVER"]
        return list(_jm().list_infos()) + drivers

    return JSONResponse(await run_in_threadpool(read))


async def get_job(request: Request) -> Response:
    """One job's details."""
    job_id = request.path_params["job_id"]
    rec = await run_in_threadpool(_find, job_id)
    if rec is None:
        return _bad(f"Job {job_id} does not exist", 404)
    return JSONResponse(rec)


async def job_logs(request: Request) -> Response:
    """The job's output so far."""
    job_id = request.path_params["job_id"]
    if await run_in_threadpool(_jm().read_info, job_id) is None:
        return _bad(f"Job {job_id} does not exist", 404)
    text, _ = await run_in_threadpool(_jm().logs, job_id, 0)
    return JSONResponse({"logs": text})


async def tail_logs(ws: WebSocket) -> None:
    """Streams the job's output as text frames until it ends, then closes normally."""
    job_id = ws.path_params["job_id"]
    await ws.accept()
    jm = _jm()
    if await run_in_threadpool(jm.read_info, job_id) is None:
        await ws.close(code=1008, reason=f"Job {job_id} does not exist")
        return
    offset = 0
    try:
        while True:
            rec = await run_in_threadpool(jm.info, job_id)
            text, offset = await run_in_threadpool(jm.logs, job_id, offset)
            if text:
                await ws.send_text(text)
            if rec is None or rec["status"] in jm.TERMINAL:
                text, offset = await run_in_threadpool(jm.logs, job_id, offset)
                if text:
                    await ws.send_text(text)
                break
            await asyncio.sleep(0.3)
    except WebSocketDisconnect:
        return
    await ws.close(code=1000)


async def stop_job(request: Request) -> Response:
    """Stops a running job."""
    job_id = request.path_params["job_id"]
    if await run_in_threadpool(_jm().read_info, job_id) is None:
        return _bad(f"Job {job_id} does not exist", 404)
    return JSONResponse({"stopped": await run_in_threadpool(_jm().stop, job_id)})


async def delete_job(request: Request) -> Response:
    """Deletes a finished job."""
    job_id = request.path_params["job_id"]
    if await run_in_threadpool(_jm().read_info, job_id) is None:
        return _bad(f"Job {job_id} does not exist", 404)
    try:
        return JSONResponse({"deleted": await run_in_threadpool(_jm().delete, job_id)})
    except ValueError as e:
        return _bad(str(e))


ROUTES = [
    Route("/api/version", version, methods=["GET"]),
    Route("/api/packages/{protocol}/{name}", get_package, methods=["GET"]),
    Route("/api/packages/{protocol}/{name}", put_package, methods=["PUT"]),
    Route("/api/jobs/", submit, methods=["POST"]),
    Route("/api/jobs/", list_jobs, methods=["GET"]),
    Route("/api/jobs/{job_id}", get_job, methods=["GET"]),
    Route("/api/jobs/{job_id}", delete_job, methods=["DELETE"]),
    Route("/api/jobs/{job_id}/logs", job_logs, methods=["GET"]),
    WebSocketRoute("/api/jobs/{job_id}/logs/tail", tail_logs),
    Route("/api/jobs/{job_id}/stop", stop_job, methods=["POST"]),
]
