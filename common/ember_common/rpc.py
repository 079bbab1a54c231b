"""gRPC plumbing shared by every Ember process: one server builder, channel options, error table.

Servicers stay thin: they validate, call a core object and let `rpc_errors` map the core's
exceptions to status codes through `ERROR_TABLE`. Clients map status codes back with
`status_to_exception`.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from typing import Any, Awaitable, Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 1024 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.enable_retries", 0),
    ("grpc.so_reuseport", 0),
]


class NotFound(Exception):
    """A named thing (node, lease, object, key) does not exist."""


class InvalidArgument(ValueError):
    """A request is malformed."""


class Unavailable(Exception):
    """A dependency (storage, another node) cannot be reached right now."""


class ResourceExhausted(Exception):
    """A capacity limit was hit."""


class AlreadyExists(Exception):
    """A unique name is taken."""


# Core exception type -> gRPC status code. First match wins (order subclasses first).
ERROR_TABLE: list[tuple[type[BaseException], grpc.StatusCode]] = [
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (ValueError, grpc.StatusCode.INVALID_ARGUMENT),
    (Unavailable, grpc.StatusCode.UNAVAILABLE),
    (ResourceExhausted, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (AlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (TimeoutError, grpc.StatusCode.DEADLINE_EXCEEDED),
]


def code_for(exc: BaseException) -> grpc.StatusCode:
    for typ, code in ERROR_TABLE:
        if isinstance(exc, typ):
            return code
    return grpc.StatusCode.INTERNAL


def rpc_errors(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Decorates an async servicer method: maps core exceptions to gRPC status codes."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await method(self, request, context)
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as exc:  # mapped to a status, never swallowed
            code = code_for(exc)
            if code == grpc.StatusCode.INTERNAL:
                log.exception("internal error in %s", method.__name__)
            await context.abort(code, f"{type(exc).__name__}: {exc}")

    return wrapper


def status_to_exception(err: grpc.aio.AioRpcError | grpc.RpcError) -> Exception:
    """Maps a failed call's status back to the core exception type."""
    code = err.code()
    details = err.details() or ""
    for typ, c in ERROR_TABLE:
        if c == code and typ is not ValueError:
            return typ(details)
    return Unavailable(details) if code == grpc.StatusCode.UNAVAILABLE else RuntimeError(f"{code.name}: {details}")


class _AioInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, impl: Any) -> None:
        self.impl = impl

    async def intercept_service(self, continuation: Any, handler_call_details: Any) -> Any:
        return await self.impl.intercept_service(continuation, handler_call_details)


def build_server(
    add_servicers: list[Callable[[grpc.aio.Server], None]],
    host: str = "0.0.0.0",
    port: int = 0,
    service_names: list[str] | None = None,
) -> tuple[grpc.aio.Server, int, health.aio.HealthServicer]:
    """Creates an asyncio gRPC server with the given servicers, the standard health service and
    the tracing / metrics interceptors when those are on (nothing is added when they are off).

    Returns (server, bound_port, health_servicer). Binding a port in use raises OSError naming it.
    """
    from . import metrics, tracing

    # Tracing outside, metrics inside: the metrics interceptor then sees the registered handler
    # (the same object on every call) and wraps each method once.
    interceptors = []
    if tracing.enabled():
        interceptors.append(_AioInterceptor(tracing.ServerInterceptor()))
    if metrics.enabled():
        interceptors.append(_AioInterceptor(metrics.ServerInterceptor()))
    server = grpc.aio.server(options=CHANNEL_OPTIONS, interceptors=interceptors or None)
    for add in add_servicers:
        add(server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError as exc:
        raise OSError(f"cannot listen on {host}:{port}: {exc}") from None
    if bound == 0:
        raise OSError(f"cannot listen on {host}:{port} (address in use?)")
    return server, bound, health_servicer


async def mark_serving(health_servicer: health.aio.HealthServicer, names: list[str]) -> None:
    for name in ["", *names]:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)


def aio_channel(address: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)


def sync_channel(address: str) -> grpc.Channel:
    return grpc.insecure_channel(address, options=CHANNEL_OPTIONS)


def write_port_file(path: str | None, port: int) -> None:
    """Tells a parent process which port we bound (atomically: write then rename)."""
    if not path:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(port))
    import os

    os.replace(tmp, path)


async def follow(gcs: Any, request: Any, handle: Callable[[Any], None],
                 stop: asyncio.Event | None = None, retry_s: float = 0.5) -> None:
    """Reads a GCS Subscribe stream, passing each message to handle; reconnects after errors
    (the GCS may restart) until stop is set or the task is cancelled."""
    while stop is None or not stop.is_set():
        try:
            async for msg in gcs.Subscribe(request):
                handle(msg)
        except grpc.aio.AioRpcError:
            pass
        if stop is None:
            await asyncio.sleep(retry_s)
            continue
        try:
            await asyncio.wait_for(stop.wait(), retry_s)
        except asyncio.TimeoutError:
            pass


def best_effort(call: Awaitable[Any]) -> asyncio.Future:
    """Runs an RPC in the background whose failure only means the peer is gone (a report to an
    owner or caller that exited): nothing to retry, nobody to tell."""
    async def run() -> None:
        try:
            await call
        except (grpc.RpcError, grpc.aio.UsageError):  # failed, or the channel already closed
            pass

    return asyncio.ensure_future(run())


def install_signal_stop(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """SIGTERM/SIGINT set `stop` so that main() can shut down gracefully."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
