"""Token authentication for every gRPC server and channel the kit builds (Ray's token-auth
contract with EMBER_ names).

    EMBER_AUTH_MODE        token (default) | disabled
    EMBER_AUTH_TOKEN       the token itself; else
    EMBER_AUTH_TOKEN_PATH  a file holding it (set but unreadable or empty: a fatal error); else
    ~/.ember/auth_token    created 0600 by `ember start --head` / the embedded `ember.init()`

Servers (`rpc.build_server`) check `authorization: Bearer <token>` on every call but the
grpc.health.v1 ones, in constant time, from the call's metadata: a rejected call answers
UNAUTHENTICATED before a byte of its request is read or parsed (the rejecting handler takes a
request stream it never reads), the server logs the peer (never the token) and counts it
(`ember_rpc_unauthenticated_total`). What a caller without the token can still cost a server is
bounded by gRPC's HTTP/2 flow-control window per call; the message size limits (rpc.py) bound
what an authenticated one can send. Channels
(`rpc.aio_channel` / `rpc.sync_channel`) add the header to every call from one cached metadata
tuple. Child services receive the token in their environment (`service_env()`), never argv.
The token is read once per process (`reset()` re-reads it after the environment changed).
"""
from __future__ import annotations

import hmac
import logging
import os
import secrets
from dataclasses import dataclass
from typing import Any

import grpc

from . import envvars
from .log_limit import LogBudget, held_note

log = logging.getLogger(__name__)

MODE_ENV = "EMBER_AUTH_MODE"
TOKEN_ENV = "EMBER_AUTH_TOKEN"
PATH_ENV = "EMBER_AUTH_TOKEN_PATH"
HEADER = "authorization"
_OPEN_PREFIX = "/grpc.health.v1.Health/"  # health checks stay open (compose, probes)


class AuthConfigError(ValueError):
    """The token configuration is unusable (unknown mode, unreadable or empty token file). Its
    message is one line naming the variable or file and what to do."""


@dataclass(frozen=True)
class TokenSource:
    """The token this process uses (None when auth is off or none was found) and where it came
    from, in words, for error messages. Never printed with the token."""

    token: str | None
    source: str
    enabled: bool


_cached: TokenSource | None = None
_metadata: tuple[tuple[str, str], ...] = ()
rejected_total = 0  # rejected calls in this process (the metric reads it)


def mode() -> str:
    """EMBER_AUTH_MODE: `token` (the default) or `disabled`."""
    value = envvars.get(MODE_ENV, "token").strip().lower() or "token"
    if value not in ("token", "disabled"):
        raise AuthConfigError(f"{MODE_ENV}={value!r}: must be 'token' or 'disabled'")
    return value


def default_token_path() -> str:
    """~/.ember/auth_token (HOME as it is now)."""
    return os.path.join(os.path.expanduser("~"), ".ember", "auth_token")


def token_path() -> str:
    """The file the token is read from (and written to by `ensure_token`)."""
    return envvars.get(PATH_ENV) or default_token_path()


def _read_file(path: str, variable: str | None) -> str:
    where = f"{variable}={path}" if variable else path
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as e:
        raise AuthConfigError(f"cannot read the auth token file {where}: {e.strerror or e}; "
                              f"fix the file or unset {variable or PATH_ENV}") from None
    if not token:
        raise AuthConfigError(f"the auth token file {where} is empty; write a token to it "
                              f"(`ember get-auth-token --generate`) or remove it")
    return token


def _load() -> TokenSource:
    if mode() == "disabled":
        return TokenSource(None, f"auth disabled ({MODE_ENV}=disabled)", False)
    env = envvars.get(TOKEN_ENV)
    if env is not None:
        if not env.strip():
            raise AuthConfigError(f"{TOKEN_ENV} is set but empty; set it to the cluster's token or unset it")
        return TokenSource(env.strip(), f"${TOKEN_ENV}", True)
    path = envvars.get(PATH_ENV)
    if path:
        return TokenSource(_read_file(path, PATH_ENV), f"the file {path} (${PATH_ENV})", True)
    path = default_token_path()
    if not os.path.exists(path):
        return TokenSource(None, f"no token (${TOKEN_ENV} and ${PATH_ENV} unset, {path} missing)", True)
    return TokenSource(_read_file(path, None), f"the file {path}", True)


def load() -> TokenSource:
    """The token of this process (read once, then cached). Raises AuthConfigError."""
    global _cached, _metadata
    if _cached is None:
        src = _load()
        _metadata = ((HEADER, f"Bearer {src.token}"),) if src.token else ()
        _cached = src
    return _cached


def reset() -> None:
    """Forgets the cached token (after the environment or the token file changed)."""
    global _cached, _metadata
    _cached, _metadata = None, ()


def client_metadata() -> tuple[tuple[str, str], ...]:
    """The metadata every call carries: (("authorization", "Bearer <token>"),) or () (cached)."""
    if _cached is None:
        load()
    return _metadata


def generate_token() -> str:
    """A new random token (256 bits, hex)."""
    return secrets.token_hex(32)


def write_token(path: str, token: str) -> None:
    """Writes token to path, readable by its owner only (0600; the directory 0700 when made)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.replace(tmp, path)


def ensure_token() -> TokenSource:
    """For a head node / the embedded cluster: the token, creating ~/.ember/auth_token (0600)
    when auth is on and no token is configured anywhere. A set EMBER_AUTH_TOKEN_PATH is never
    created: a missing file there is the fatal error of `load()`."""
    src = load()
    if src.enabled and src.token is None:
        path = default_token_path()
        write_token(path, generate_token())
        log.info("created a new auth token in %s", path)
        reset()
        src = load()
    return src


def require_token() -> TokenSource:
    """The token, or AuthConfigError when auth is on and none is configured (a service must not
    start open by accident)."""
    src = load()
    if src.enabled and src.token is None:
        raise AuthConfigError(f"auth is on ({MODE_ENV}=token) but there is {src.source}; set "
                              f"{TOKEN_ENV} to the cluster's token (`ember get-auth-token` on the head "
                              f"node) or {MODE_ENV}=disabled")
    return src


def service_env() -> dict[str, str]:
    """Environment for a child service: the token (never on its command line, which `ps` shows)."""
    src = load()
    env = {MODE_ENV: "token" if src.enabled else "disabled"}
    if src.token:
        env[TOKEN_ENV] = src.token
    return env


COOKIE = "ember-authentication-token"


def http_headers() -> dict[str, str]:
    """Headers an HTTP client of an Ember admin endpoint sends ({} when auth is off)."""
    src = load()
    return {"Authorization": f"Bearer {src.token}"} if src.token else {}


def http_authorized(headers: Any) -> bool:
    """Whether an HTTP request's headers (ASGI (name, value) byte pairs, lower-case names)
    carry this process's token: `Authorization: Bearer <token>` or the `ember-authentication-token`
    cookie. True when auth is off."""
    src = load()
    if src.token is None:
        return not src.enabled
    expected = src.token.encode()
    for name, value in headers:
        if name == b"authorization" and value[:7].lower() == b"bearer ":
            if hmac.compare_digest(value[7:].strip(), expected):
                return True
        elif name == b"cookie":
            for part in value.split(b";"):
                key, _, val = part.strip().partition(b"=")
                if key == COOKIE.encode() and hmac.compare_digest(val, expected):
                    return True
    return False


def _deny_reason(metadata: Any, expected: str) -> str | None:
    """None when the metadata carries the expected header value (no allocation on that path)."""
    for key, value in metadata or ():
        if key == HEADER:
            try:
                ok = hmac.compare_digest(value, expected) if isinstance(value, str) else \
                    hmac.compare_digest(bytes(value), expected.encode())
            except TypeError:  # a non-ASCII str value: not our token
                ok = False
            return None if ok else "wrong token"
    return "no token"


class ServerInterceptor(grpc.aio.ServerInterceptor):
    """Rejects calls without the right `authorization: Bearer <token>` (health checks pass)
    from their metadata alone, before any of the request is read (`REJECT_HANDLER`)."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}"

    async def intercept_service(self, continuation: Any, handler_call_details: Any) -> Any:
        """Passes an authenticated call on; answers UNAUTHENTICATED otherwise, the same way for
        every method name (no method-existence oracle) and without reading the request."""
        method = handler_call_details.method
        reason = _deny_reason(handler_call_details.invocation_metadata, self._expected)
        if reason is None or method.startswith(_OPEN_PREFIX):
            return await continuation(handler_call_details)
        return _rejecting_handler(method, reason)


# A caller without the token can send rejected calls at will: their warnings are budgeted
# (log_limit), so a flood writes a few lines a second, each naming how many it stands for.
_REJECTED_LOG = LogBudget(per_s=1.0, burst=10)


async def _deny(context: Any, method: str, reason: str) -> None:
    global rejected_total
    rejected_total += 1
    held = _REJECTED_LOG.take()
    if held is not None:
        log.warning("rejected %s from %s: %s%s", method, context.peer(), reason,
                    held_note(held, "rejected calls"))
    await context.abort(grpc.StatusCode.UNAUTHENTICATED,
                        f"{method}: {reason} (this cluster requires token authentication)")


def _rejecting_handler(method: str, reason: str) -> Any:
    """A handler that answers UNAUTHENTICATED at once, whatever the method's shape. It takes a
    request *stream* it never reads and has no deserializer: gRPC then reads no message (a unary
    handler would first receive the whole request, up to the size limit), so a caller without
    the token costs the server its headers and one flow-control window, never its body. On the
    wire a unary call answered with trailers only looks the same to its caller."""
    async def reject(request_iterator: Any, context: Any) -> Any:
        await _deny(context, method, reason)

    return grpc.stream_unary_rpc_method_handler(reject)
