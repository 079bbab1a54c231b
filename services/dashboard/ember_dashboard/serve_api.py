"""Ray Serve's REST API (what Ray's `serve deploy/status/config/shutdown --address http://HOST:8265`
and Ember's `serve` CLI speak), over `ember.serve.declarative`:

    GET    /api/ray/version            the version handshake Ray's Serve client starts with
    GET    /api/serve/applications/    Ray's ServeInstanceDetails (controller, proxies, applications)
    PUT    /api/serve/applications/    body: a ServeDeploySchema config; 200 once every application
                                       is built and handed to the controller (they deploy on)
    DELETE /api/serve/applications/    shuts Serve down (every application, proxy, controller)

A config that does not fit the schema, or an import path that fails, is a 400 whose body names
the field or the path; the applications already running are left as they were.
"""
from __future__ import annotations

import json
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from . import jobs_api


def _declarative() -> Any:
    from ember.serve import declarative

    return declarative


async def get_applications(request: Request) -> Response:
    """Serve's state in Ray's ServeInstanceDetails shape."""
    return JSONResponse(await run_in_threadpool(_declarative().details))


async def put_applications(request: Request) -> Response:
    """Deploys a config (applications it no longer names are deleted)."""
    try:
        config = json.loads(await request.body())
    except ValueError:
        return PlainTextResponse("the request body is not JSON", status_code=400)
    try:
        await run_in_threadpool(_declarative().deploy_config, config)
    except (ValueError, TypeError, ImportError) as e:
        return PlainTextResponse(str(e), status_code=400)
    except Exception as e:  # the cluster failed it (a timeout, a replica that cannot start): say what
        return PlainTextResponse(f"{type(e).__name__}: {e}", status_code=500)
    return Response(status_code=200)


async def delete_applications(request: Request) -> Response:
    """Shuts Serve down."""
    await run_in_threadpool(_declarative().shutdown)
    return Response(status_code=200)


ROUTES = [
    Route("/api/ray/version", jobs_api.version, methods=["GET"]),
    Route("/api/serve/applications/", get_applications, methods=["GET"]),
    Route("/api/serve/applications/", put_applications, methods=["PUT"]),
    Route("/api/serve/applications/", delete_applications, methods=["DELETE"]),
]
