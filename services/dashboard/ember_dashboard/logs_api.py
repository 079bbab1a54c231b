"""The dashboard's log routes: every node's log files, read through each node's raylet (its
LogService) by the log state API and its door, so the page shows the logs of nodes on other
machines and in other containers.

    GET /api/logs?glob=                        the UI's list: per alive node, its files
    GET /api/logs/file?node_id=&name=&lines=   the UI's view: the last lines of one file
    GET /api/v0/logs?node_id=|node_ip=&glob=   Ray's list_logs reply (files by component)
    GET /api/v0/logs/{file|stream}?node_id=|node_ip=&filename=|actor_id=|task_id=|pid=&lines=
                                               Ray's get_log: the file (or its tail), or it
                                               followed as it grows (stream), as plain text

Blocking calls run in the thread pool; a followed stream is cancelled at the raylet when the
HTTP client goes away.
"""
from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

TIMEOUT_S = 10


def _bad(message: str, code: int = 400) -> PlainTextResponse:
    return PlainTextResponse(message, status_code=code)


def _int(q: Any, name: str, default: int) -> int:
    raw = q.get(name)
    try:
        return default if raw in (None, "") else int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None


def _nodes(glob: str) -> dict[str, Any]:
    from ember.util.state.logs import list_log_files

    by_node: dict[str, dict[str, Any]] = {}
    for r in list_log_files(None, glob_filter=glob, timeout=TIMEOUT_S):
        n = by_node.setdefault(r["node_id"], {"node_id": r["node_id"], "node_ip": r["node_ip"],
                                              "is_head": r.get("is_head", False), "files": [], "error": None})
        if "missing" in r:
            n["error"] = r["missing"]
        else:
            n["files"].append({"name": r["name"], "size": r["size"], "mtime": r["mtime"]})
    for n in by_node.values():
        n["files"].sort(key=lambda f: (-f["mtime"], f["name"]))
    return {"nodes": sorted(by_node.values(), key=lambda n: (not n["is_head"], n["node_id"]))}


async def logs(request: Request) -> Response:
    """Every alive node's log files (a node whose raylet does not answer carries its error)."""
    return JSONResponse(await run_in_threadpool(_nodes, request.query_params.get("glob", "")))


def _text(**kw: Any) -> str:
    from ember.util.state import get_log

    return "".join(get_log(timeout=TIMEOUT_S, errors="replace", **kw))


async def log_file(request: Request) -> Response:
    """The tail of one file of one node."""
    q = request.query_params
    try:
        lines = _int(q, "lines", 1000)
        if lines <= 0:
            raise ValueError(f"lines must be a positive integer, got {lines}")
        text = await run_in_threadpool(_text, node_id=q.get("node_id") or None, filename=q.get("name", ""),
                                       tail=lines)
    except LookupError as e:
        return _bad(str(e).strip("'\""), 404)
    except ValueError as e:
        return _bad(str(e))
    except ConnectionError as e:
        return _bad(str(e), 502)
    return PlainTextResponse(text)


async def ray_list(request: Request) -> Response:
    """Ray's GET /api/v0/logs: {component: [file names]} of one node."""
    from ember.util.state import list_logs

    q = request.query_params
    try:
        result = await run_in_threadpool(list_logs, None, q.get("node_id") or None, q.get("node_ip") or None,
                                         q.get("glob") or None, _int(q, "timeout", TIMEOUT_S))
    except (ValueError, LookupError) as e:
        return JSONResponse({"result": False, "msg": str(e), "data": {}}, status_code=400)
    except ConnectionError as e:
        return JSONResponse({"result": False, "msg": str(e), "data": {}}, status_code=502)
    return JSONResponse({"result": True, "msg": "", "data": {"result": result}})


async def ray_get(request: Request) -> Response:
    """Ray's GET /api/v0/logs/{file|stream}: the content as plain text, streamed."""
    from ember._private.doors import logs as door
    from ember._private.doors import state
    from ember.util.state import logs as state_logs

    media = request.path_params["media_type"]
    if media not in ("file", "stream"):
        return _bad(f"media type {media!r}: file or stream", 404)
    q = request.query_params
    follow = media == "stream"
    try:
        lines, pid = _int(q, "lines", 1000), _int(q, "pid", 0)
        attempt, timeout = _int(q, "attempt_number", 0), _int(q, "timeout", TIMEOUT_S)
        interval = float(q.get("interval") or 0)
        suffix = q.get("suffix") or "out"
        node, wpid, keep, name = await run_in_threadpool(
            state_logs.resolve_target, state.resolve_address(None), q.get("node_id") or None, q.get("node_ip") or None,
            q.get("actor_id") or None, q.get("task_id") or None, pid or None, q.get("submission_id") or None,
            attempt, timeout)
        stream = await run_in_threadpool(
            door.stream, node["raylet_address"], node["node_id"], filename=name or q.get("filename", ""),
            pid=wpid, suffix=suffix if wpid else "", lines=-1 if keep else lines, follow=follow,
            interval_s=interval, timeout_s=None if follow else timeout)
    except LookupError as e:
        return _bad(str(e).strip("'\""), 404)
    except ValueError as e:
        return _bad(str(e))
    except ConnectionError as e:
        return _bad(str(e), 502)
    strip = q.get("filter_ansi_code", "false").lower() in ("1", "true")
    chunks = state_logs.readable(stream, keep, strip)

    async def body() -> AsyncIterator[bytes]:
        try:
            while (chunk := await run_in_threadpool(next, chunks, None)) is not None:
                yield chunk
        except (LookupError, ValueError, ConnectionError) as e:  # the file went away mid-stream
            yield f"\n[ember] {e}\n".encode()
        finally:
            stream.cancel()

    return StreamingResponse(body(), media_type="text/plain; charset=utf-8")


ROUTES = [Route("/api/logs", logs), Route("/api/logs/file", log_file),
          Route("/api/v0/logs", ray_list), Route("/api/v0/logs/{media_type}", ray_get)]
