"""gRPC plumbing shared by every Ember process: one server builder, channel options, the one
error table.

Servicers stay thin: they validate, call a core object and let `rpc_errors` map the core's
exceptions to status codes through `ERROR_TABLE`. Clients (`gcs_client`, `raylet_client`) map
status codes back with `status_to_exception`, so a caller catches the same `ServiceError`
subclass the core raised. Exception tree:

    ServiceError                 (code UNKNOWN unless given)
     +-- NotFound                NOT_FOUND
     +-- InvalidArgument         INVALID_ARGUMENT    (also a ValueError)
     +-- AlreadyExists           ALREADY_EXISTS
     +-- Infeasible              FAILED_PRECONDITION
     +-- ResourceExhausted       RESOURCE_EXHAUSTED
     +-- Unavailable             UNAVAILABLE         (transient: retried by idempotent callers)
     +-- DeadlineExceeded        DEADLINE_EXCEEDED   (also a TimeoutError; transient)
     +-- DataLoss                DATA_LOSS
     +-- OutOfRange              OUT_OF_RANGE
     +-- Cancelled               CANCELLED
     +-- Internal                INTERNAL, UNKNOWN
     +-- AuthenticationError     UNAUTHENTICATED     (the token is missing or wrong; see auth.py)
    A core's plain ValueError answers INVALID_ARGUMENT, TimeoutError DEADLINE_EXCEEDED, anything
    else INTERNAL (logged).

Limits (what a caller can make a server hold; config.py has the settings):

    before authentication   nothing of the request is read: auth.py rejects a call on its
                            metadata; a worker's direct port reads at most the secret's size
                            (32 bytes) before the secret (client wire.py)
    EMBER_MAX_CONTROL_REQUEST_BYTES   4 MiB: what the GCS and raylets receive in one message
                            (`receive_limit(True)`)
    EMBER_MAX_CONTROL_MESSAGE_BYTES   64 MiB: what one request to a method that carries data
                            (LARGE_CONTROL_METHODS) may be, sent in chunks of at most 2 MiB
                            when over the control limit (`chunked`; `data_limit`); pickled
                            functions, up to 100 MB, and runtime-env packages, up to 500 MiB,
                            reach the GCS KV in 1 MiB parts (kv_parts.py)
    EMBER_MAX_MESSAGE_BYTES 512 MiB: what core workers and object managers receive in one
                            message (inline task args and replies; 16 MiB object chunks) and
                            every channel's send and receive limit
    bind                    a server listens on its host setting; "" (the default) is the node's
                            IP (EMBER_NODE_IP, else 127.0.0.1): a loopback cluster listens on
                            loopback only; 0.0.0.0 (containers) every interface of its host;
                            an advertised IP this machine does not own (NAT) every interface,
                            with a warning (`bind_host`)
A message over its server's limit is RESOURCE_EXHAUSTED, refused by gRPC from its length prefix
before it is buffered; a chunked request over the data limit as soon as its pieces pass it.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import os
import socket
from typing import Any, Awaitable, Callable, TypeVar, cast

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from . import auth, channel_auth, chunked, envvars, metrics, tls, tracing, validate_rules, validate_server
from .config import get_config
from .limits import data_limit as data_limit
from .limits import message_limit as message_limit
from .limits import receive_limit as receive_limit

_F = TypeVar("_F", bound=Callable[..., Any])
# The context every async servicer method receives.
Context = grpc.aio.ServicerContext[Any, Any]
log = logging.getLogger(__name__)

# The options of every channel and server but the message limits (`channel_options`).
CHANNEL_OPTIONS = [
    ("grpc.enable_retries", 0),
    ("grpc.so_reuseport", 0),
    # Cluster RPCs go straight to their peer, as Ray's do: an http_proxy/https_proxy meant for
    # the user's web traffic would otherwise catch them (loopback included) and fail them.
    ("grpc.enable_http_proxy", 0),
]


class ServiceError(Exception):
    """An error a service reports to its caller: one subclass per gRPC status code. Cores raise
    these (or ValueError / TimeoutError); `rpc_errors` turns them into status codes and
    `status_to_exception` turns a failed call's status back into the same class."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str = "", *, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class NotFound(ServiceError):
    """A named thing (node, actor, job, lease, object, key) does not exist."""

    code = grpc.StatusCode.NOT_FOUND


class InvalidArgument(ServiceError, ValueError):
    """A request is malformed."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class AlreadyExists(ServiceError):
    """A unique name is taken."""

    code = grpc.StatusCode.ALREADY_EXISTS


class Infeasible(ServiceError):
    """The request can never be satisfied as the cluster stands (e.g. no node has the
    resources a lease asks for)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class ResourceExhausted(ServiceError):
    """A capacity limit was hit."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class Unavailable(ServiceError):
    """A service or one of its dependencies (storage, another node) cannot be reached right now;
    worth retrying."""

    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(ServiceError, TimeoutError):
    """The call did not finish in time; worth retrying when the call is idempotent."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class DataLoss(ServiceError):
    """Stored data cannot be read back (e.g. a spill file is gone)."""

    code = grpc.StatusCode.DATA_LOSS


class OutOfRange(ServiceError):
    """A read past the end of something."""

    code = grpc.StatusCode.OUT_OF_RANGE


class Cancelled(ServiceError):
    """The call was cancelled (by the peer, or because the server stopped)."""

    code = grpc.StatusCode.CANCELLED


class Internal(ServiceError):
    """A bug on the service's side (an exception the table does not know)."""

    code = grpc.StatusCode.INTERNAL


class AuthenticationError(ServiceError):
    """The peer rejected this process's token (or that it sent none). The message says which
    token source this process used and how to set the cluster's token.
    `ember.exceptions.AuthenticationError` is this class."""

    code = grpc.StatusCode.UNAUTHENTICATED


# Exception type -> gRPC status code, for servicers. First match wins (subclasses first).
ERROR_TABLE: list[tuple[type[BaseException], grpc.StatusCode]] = [
    *((cls, cls.code) for cls in (NotFound, InvalidArgument, AlreadyExists, Infeasible,
                                   ResourceExhausted, Unavailable, DeadlineExceeded, DataLoss,
                                   OutOfRange, Cancelled, Internal, AuthenticationError)),
    (ValueError, grpc.StatusCode.INVALID_ARGUMENT),
    (TimeoutError, grpc.StatusCode.DEADLINE_EXCEEDED),
]
# Status code -> the exception a client raises (the reverse of the ServiceError rows).
_BY_CODE: dict[grpc.StatusCode, type[ServiceError]] = {
    code: typ for typ, code in ERROR_TABLE if isinstance(typ, type) and issubclass(typ, ServiceError)}
_BY_CODE[grpc.StatusCode.UNKNOWN] = Internal  # an unhandled exception in a handler


def code_for(exc: BaseException) -> grpc.StatusCode:
    """The status code a servicer answers for exc (INTERNAL when the table does not know it)."""
    for typ, code in ERROR_TABLE:
        if isinstance(exc, typ):
            return code
    return grpc.StatusCode.INTERNAL


async def _abort(context: grpc.aio.ServicerContext[Any, Any], exc: Exception, where: str) -> None:
    code = code_for(exc)
    if code == grpc.StatusCode.INTERNAL:
        log.error("internal error in %s", where, exc_info=exc)
    message = str(exc) if isinstance(exc, ServiceError) else f"{type(exc).__name__}: {exc}"
    await context.abort(code, message)


def rpc_errors(method: _F) -> _F:
    """Decorates an async servicer method (unary, or a server stream written as an async
    generator): exceptions become status codes through ERROR_TABLE, never swallowed."""
    if inspect.isasyncgenfunction(method):
        @functools.wraps(method)
        async def stream_wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            try:
                async for item in method(self, request, context):
                    yield item
            except (asyncio.CancelledError, grpc.aio.AbortError):
                raise
            except Exception as exc:  # mapped to a status, never swallowed
                await _abort(context, exc, method.__name__)

        return cast(_F, stream_wrapper)

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        try:
            return await method(self, request, context)
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as exc:  # mapped to a status, never swallowed
            await _abort(context, exc, method.__name__)

    return cast(_F, wrapper)


def status_to_exception(err: grpc.RpcError) -> ServiceError:
    """The ServiceError for a failed call's status (the class ERROR_TABLE maps that code from;
    a plain ServiceError carrying the code for codes the table does not use)."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = (err.details() if hasattr(err, "details") else None) or code.name
    typ = _BY_CODE.get(code)
    if typ is not None and issubclass(typ, AuthenticationError):
        return typ(auth_hint(details))
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details:
        details += (" (a gRPC message limit on the receiving side: EMBER_MAX_CONTROL_REQUEST_BYTES "
                    "for the GCS and raylets, EMBER_MAX_MESSAGE_BYTES otherwise; big values "
                    "belong in the object store, e.g. ember.put)")
    return typ(details) if typ is not None else ServiceError(f"{code.name}: {details}", code=code)


def use_client_error(cls: type[ServiceError]) -> None:
    """Makes status_to_exception raise cls (a subclass of a table class) for that class's code:
    how `ember.exceptions.AuthenticationError` is both a RayError and this kit's error."""
    _BY_CODE[cls.code] = cls


def auth_hint(details: str) -> str:
    """An UNAUTHENTICATED reply's text plus the token source this process used and the fix."""
    try:
        source = auth.load().source
    except auth.AuthConfigError as e:
        source = str(e)
    return (f"authentication failed: {details}. This process used {source}; set "
            f"{auth.TOKEN_ENV} (or {auth.PATH_ENV}) to the cluster's token, which "
            "`ember get-auth-token` prints on the head node (a compose cluster's is EMBER_AUTH_TOKEN "
            "in its project's .env)")


def is_transient(exc: BaseException) -> bool:
    """Worth retrying an idempotent call: the peer is unreachable or did not answer in time."""
    return isinstance(exc, (Unavailable, DeadlineExceeded))


class _AioInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, impl: Any) -> None:
        self.impl = impl

    async def intercept_service(self, continuation: Any, handler_call_details: Any) -> Any:
        return await self.impl.intercept_service(continuation, handler_call_details)


def build_server(
    add_servicers: list[Callable[[grpc.aio.Server], None]],
    host: str = "",
    port: int = 0,
    service_names: list[str] | None = None,
    *,
    control: bool = True,
) -> tuple[grpc.aio.Server, int, health.aio.HealthServicer]:
    """Creates an asyncio gRPC server with the given servicers, the standard health service, the
    token check (auth.py; on unless EMBER_AUTH_MODE=disabled), mutual TLS when EMBER_USE_TLS=1
    (tls.py) and the tracing / metrics interceptors when those are on (nothing is added when
    they are off). Every method of the servicers parses its request (each message of a request
    stream) leniently and checks it against `validate_rules.RULES` before the servicer sees it
    (`validate_server`; INVALID_ARGUMENT naming the field);
    a request message bigger than the server's limit is RESOURCE_EXHAUSTED (gRPC's own check,
    from the message's length prefix, before it is buffered): `receive_limit(control)`; a
    control server also serves `chunked.METHOD`, the bigger requests of LARGE_CONTROL_METHODS
    in pieces (up to `data_limit()`).

    host: the interface to listen on, "" for `default_bind_host()` (the node's IP).
    Returns (server, bound_port, health_servicer). Binding a port in use raises OSError naming it.
    """
    # Tracing outside, metrics inside: the metrics interceptor then sees the registered handler
    # (the same object on every call) and wraps each method once.
    interceptors: list[grpc.aio.ServerInterceptor] = []
    src = auth.require_token()  # auth on without a token: a one-line start-up error
    if src.token is not None:
        interceptors.append(auth.ServerInterceptor(src.token))
        _auth_metric()
    if tracing.enabled():
        interceptors.append(_AioInterceptor(tracing.ServerInterceptor()))
    if metrics.enabled():
        interceptors.append(_AioInterceptor(metrics.ServerInterceptor()))
    server = grpc.aio.server(options=server_options(control), interceptors=interceptors or None)
    registrar = validate_server.Registrar(server, validate_rules.RULES, InvalidArgument)
    for add in add_servicers:
        add(cast(grpc.aio.Server, registrar))
    if control:
        server.add_generic_rpc_handlers((chunked.ServerHandler(registrar.handlers, data_limit()),))
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    creds = tls.server_credentials() if tls.enabled() else None  # TLSConfigError before binding
    where = host_port(host or default_bind_host(), port)
    try:
        bound = (server.add_secure_port(where, creds) if creds is not None
                 else server.add_insecure_port(where))
    except RuntimeError as exc:
        raise OSError(f"cannot listen on {where}: {exc}") from None
    if bound == 0:
        raise OSError(f"cannot listen on {where} (address in use?)")
    return server, bound, health_servicer


def default_bind_host() -> str:
    """Where a server listens when its host setting is "": the node's IP (EMBER_NODE_IP, which a
    raylet gives its workers and containers set to their own address; `bind_host`), else
    loopback."""
    return bind_host(envvars.get("EMBER_NODE_IP") or "127.0.0.1")


def bind_host(ip: str) -> str:
    """The interface to listen on for a process that advertises ip: ip itself when this machine
    has it; else (an address this machine does not own: a NAT's, a test's unreachable one) every
    interface, as before binds were narrowed, with a warning naming it."""
    if ip in ("", "0.0.0.0", "::"):
        return ip or "0.0.0.0"
    try:
        with socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET) as s:
            s.bind((ip.strip("[]"), 0))
        return ip
    except OSError as e:
        log.warning("this machine has no address %s (%s): listening on every interface", ip, e.strerror or e)
        return "0.0.0.0"


def host_port(host: str, port: int) -> str:
    """HOST:PORT for gRPC, an IPv6 literal in brackets."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


# Control methods whose requests carry data: up to `data_limit()`, in chunks (chunked.py).
LARGE_CONTROL_METHODS = chunked.LARGE_METHODS


def channel_options() -> list[tuple[str, Any]]:
    """CHANNEL_OPTIONS with both message limits at `message_limit()` (a server enforces its own
    receive limit on what it is sent)."""
    limit = message_limit()
    return [("grpc.max_send_message_length", limit), ("grpc.max_receive_message_length", limit),
            *CHANNEL_OPTIONS]


def server_options(control: bool = True) -> list[tuple[str, Any]]:
    """A server's options: its receive limit (`receive_limit(control)`: a bigger request message
    is refused by gRPC with RESOURCE_EXHAUSTED from its length prefix, before it is buffered or
    any handler runs), the send limit and keepalive."""
    return [("grpc.max_send_message_length", message_limit()),
            ("grpc.max_receive_message_length", receive_limit(control)),
            *CHANNEL_OPTIONS, *keepalive_options()]


def keepalive_options() -> list[tuple[str, Any]]:
    """Channel and server options for EMBER_GRPC_KEEPALIVE_S (config.py): a call whose peer went
    silent (its host or container gone without a reset) fails UNAVAILABLE instead of waiting
    forever; servers accept the pings (no "too many pings" GOAWAY) and ping their callers too."""
    s = get_config().grpc_keepalive_s
    if s < 0:
        raise ValueError(f"EMBER_GRPC_KEEPALIVE_S must be >= 0 (0: off), got {s:g}")
    if s == 0:
        return []
    ms = max(1, int(s * 1000))
    # ping_timeout_ms is what bounds an unanswered ping in gRPC 1.85 (keepalive_timeout_ms alone
    # did not: measured, a stream to a SIGSTOPped server stayed open); the received-ping interval
    # and strikes are the server's side, min_time_between_pings the sender's.
    return [("grpc.keepalive_time_ms", ms), ("grpc.keepalive_timeout_ms", ms),
            ("grpc.http2.ping_timeout_ms", ms), ("grpc.http2.max_pings_without_data", 0),
            ("grpc.http2.max_ping_strikes", 0), ("grpc.http2.min_ping_interval_without_data_ms", min(ms, 1000)),
            ("grpc.http2.min_time_between_pings_ms", min(ms, 1000))]


async def mark_serving(health_servicer: health.aio.HealthServicer, names: list[str]) -> None:
    """Marks the server ("") and each service name SERVING in grpc.health.v1."""
    for name in ["", *names]:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)


_metric_registered = False


def _auth_metric() -> None:
    global _metric_registered
    if metrics.enabled() and not _metric_registered:
        _metric_registered = True
        metrics.gauge("ember_rpc_unauthenticated_total",
                      "gRPC calls this process rejected for a missing or wrong token",
                      lambda: auth.rejected_total)


def aio_channel(address: str, extra_options: list[tuple[str, Any]] | None = None) -> grpc.aio.Channel:
    """An asyncio channel with Ember's options (message limits, no gRPC-level retries) that sends
    this process's auth token on every call, over mutual TLS when EMBER_USE_TLS=1."""
    opts = _merged(channel_options() + keepalive_options() + (extra_options or []))
    channel = (grpc.aio.secure_channel(address, tls.channel_credentials(), options=opts) if tls.enabled()
               else grpc.aio.insecure_channel(address, options=opts))
    return channel_auth.AioAuthChannel(channel, auth.client_metadata())


def sync_channel(address: str, extra_options: list[tuple[str, Any]] | None = None) -> grpc.Channel:
    """A blocking channel with Ember's options that sends the auth token on every call (over
    mutual TLS when EMBER_USE_TLS=1)."""
    opts = _merged(channel_options() + keepalive_options() + (extra_options or []))
    channel = (grpc.secure_channel(address, tls.channel_credentials(), options=opts)
               if tls.enabled() else grpc.insecure_channel(address, options=opts))
    md = auth.client_metadata()
    return chunked.SyncChannel(grpc.intercept_channel(channel, channel_auth.SyncAuthInterceptor(md))
                               if md else channel)


def _merged(options: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Channel options with each key once, the last value given winning (extra_options override)."""
    return list(dict(options).items())


class ChannelPool:
    """Cached asyncio channels by address (one event loop; closed together)."""

    def __init__(self) -> None:
        self._channels: dict[str, grpc.aio.Channel] = {}

    def get(self, address: str) -> grpc.aio.Channel:
        """The channel to address, created on first use."""
        ch = self._channels.get(address)
        if ch is None:
            ch = self._channels[address] = aio_channel(address)
        return ch

    async def close(self) -> None:
        """Closes every channel."""
        channels, self._channels = list(self._channels.values()), {}
        for ch in channels:
            await ch.close()


def write_port_file(path: str | None, port: int) -> None:
    """Tells a parent process which port we bound (atomically: write then rename)."""
    if not path:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(port))
    os.replace(tmp, path)


def best_effort(call: Awaitable[Any]) -> asyncio.Future[Any]:
    """Runs an RPC in the background whose failure only means the peer is gone (a report to an
    owner or caller that exited): nothing to retry, nobody to tell."""
    async def run() -> None:
        try:
            await call
        except (grpc.RpcError, ServiceError, grpc.aio.UsageError):  # failed, or the channel closed
            pass

    return asyncio.ensure_future(run())


def install_signal_stop(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """SIGTERM/SIGINT set `stop` so that main() can shut down gracefully."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
