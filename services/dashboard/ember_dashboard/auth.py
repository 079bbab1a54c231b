"""Token check for every dashboard endpoint (Ray 2.59+'s dashboard token auth, Ember's token).

A request passes with the cluster's token (`ember_common.auth`, the one the dashboard itself
uses as a driver) in any of

    Authorization: Bearer <token>        API clients: Ray's and Ember's JobSubmissionClient, curl
    X-Ray-Authorization: Bearer <token>  Ray's fallback header (proxies, KubeRay)
    cookie ember-authentication-token or ray-authentication-token    the browser, after login

Open without it: the health check `GET /api/healthz` (answered here: "success"), Ray's
`GET /api/authentication_mode`, and the login itself:

    POST /api/authenticate   with `Authorization: Bearer <token>` (Ray's UI: JSON reply) or a
                             form field `token` (the login page: 303 to /); a right token sets
                             the cookie (HttpOnly, SameSite=Strict, Secure over https, 30 days)
    GET /?token=<token>      the URL `ember start` prints: sets the cookie, 303 to / so the
                             token leaves the address bar

A request without a token gets 401 (a browser asking for a page gets the login form instead),
one with a wrong token 403, as Ray's. The comparison is constant-time; rejections are logged
with the client address, never the token. With EMBER_AUTH_MODE=disabled everything passes.
"""
from __future__ import annotations

import hmac
import html
import json
import logging
import urllib.parse
from typing import Any, Awaitable, Callable

from ember_common import auth

log = logging.getLogger(__name__)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

COOKIES = (auth.COOKIE.encode(), b"ray-authentication-token")
HEALTH = "/api/healthz"
OPEN = {HEALTH, "/api/authentication_mode", "/api/authenticate", "/favicon.ico"}
MAX_AGE_S = 30 * 24 * 3600
_MAX_FORM_BYTES = 8192

LOGIN_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Ember dashboard - sign in</title>
<style>body{{font-family:sans-serif;max-width:32em;margin:4em auto}}input{{width:100%;padding:.4em}}
.err{{color:#b00}}</style></head><body><h1>Ember dashboard</h1>
<p>This cluster requires its token. Print it on the head node with <code>ember get-auth-token</code>
(a compose cluster's is <code>EMBER_AUTH_TOKEN</code> in its project's <code>.env</code>).</p>
{error}<form method="post" action="/api/authenticate"><input type="password" name="token"
autocomplete="current-password" placeholder="token" autofocus><p><button type="submit">Sign in</button></p>
</form></body></html>"""


def expected_token() -> str | None:
    """The cluster's token, or None when auth is off (EMBER_AUTH_MODE=disabled)."""
    src = auth.load()
    return src.token if src.enabled else None


def _bearer(value: bytes) -> bytes:
    return value[7:].strip() if value[:7].lower() == b"bearer " else value.strip()


def presented(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The token a request carries (header first, then a cookie), or None."""
    cookie_token = None
    for name, value in headers:
        if name in (b"authorization", b"x-ray-authorization"):
            return _bearer(value)
        if name == b"cookie" and cookie_token is None:
            for part in value.split(b";"):
                key, _, val = part.strip().partition(b"=")
                if key in COOKIES and val:
                    cookie_token = val
    return cookie_token


def _matches(given: bytes | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given, token.encode())


def _cookie(token: str, secure: bool) -> bytes:
    flags = f"; Max-Age={MAX_AGE_S}; Path=/; HttpOnly; SameSite=Strict" + ("; Secure" if secure else "")
    return f"{auth.COOKIE}={token}{flags}".encode()


async def _reply(send: Send, status: int, body: str, ctype: str = "text/plain; charset=utf-8",
                 extra: list[tuple[bytes, bytes]] | None = None) -> None:
    data = body.encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", ctype.encode()), (b"content-length", str(len(data)).encode()),
        (b"cache-control", b"no-store"), *(extra or [])]})
    await send({"type": "http.response.body", "body": data})


async def _read_form(receive: Receive) -> dict[str, list[str]]:
    body = b""
    while True:
        m = await receive()
        body += m.get("body", b"")
        if len(body) > _MAX_FORM_BYTES or not m.get("more_body"):
            break
    return urllib.parse.parse_qs(body[:_MAX_FORM_BYTES].decode(errors="replace"))


class TokenAuthMiddleware:
    """ASGI middleware in front of the dashboard app (http and websocket scopes)."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        token = expected_token()
        path = scope.get("path", "")
        if scope["type"] == "http" and path == HEALTH:
            return await _reply(send, 200, "success")
        if scope["type"] == "http" and path == "/api/authentication_mode":
            return await _reply(send, 200, json.dumps({"authentication_mode": "token" if token else "disabled"}),
                                "application/json")
        if token is None:
            return await self.app(scope, receive, send)
        headers = scope.get("headers", [])
        secure = scope.get("scheme") in ("https", "wss")
        if scope["type"] == "http" and path == "/api/authenticate" and scope.get("method") == "POST":
            return await self._login(scope, receive, send, token, secure)
        if scope["type"] == "http" and path == "/":
            query = urllib.parse.parse_qs(scope.get("query_string", b"").decode(errors="replace"))
            if "token" in query:
                if _matches(query["token"][0].encode(), token):
                    return await _reply(send, 303, "", extra=[(b"location", b"/"), (b"set-cookie", _cookie(token, secure))])
                return await self._deny(scope, send, 403, "wrong token in the URL")
        given = presented(headers)
        if _matches(given, token) or path in OPEN:
            return await self.app(scope, receive, send)
        await self._deny(scope, send, 401 if given is None else 403, "no token" if given is None else "wrong token")

    async def _login(self, scope: Scope, receive: Receive, send: Send, token: str, secure: bool) -> None:
        headers = dict(scope.get("headers", []))
        if b"authorization" in headers:  # Ray's UI and API clients
            if not _matches(_bearer(headers[b"authorization"]), token):
                return await self._deny(scope, send, 403, "wrong token")
            return await _reply(send, 200, json.dumps({"status": "authenticated", "message": "Token is valid"}),
                                "application/json", [(b"set-cookie", _cookie(token, secure))])
        form = await _read_form(receive)
        given = (form.get("token") or [""])[0].strip().encode()
        if not _matches(given, token):
            log.warning("rejected a dashboard login from %s: wrong token", _client(scope))
            page = LOGIN_PAGE.format(error='<p class="err">That is not this cluster\'s token.</p>')
            return await _reply(send, 403, page, "text/html; charset=utf-8")
        await _reply(send, 303, "", extra=[(b"location", b"/"), (b"set-cookie", _cookie(token, secure))])

    async def _deny(self, scope: Scope, send: Send, status: int, reason: str) -> None:
        log.warning("rejected %s %s from %s: %s", scope.get("method", "WS"), scope.get("path"),
                    _client(scope), reason)
        if scope["type"] == "websocket":  # closing before accept: the server answers 403
            return await send({"type": "websocket.close", "code": 1008})
        accept = dict(scope.get("headers", [])).get(b"accept", b"")
        if scope.get("method") == "GET" and b"text/html" in accept:
            return await _reply(send, status, LOGIN_PAGE.format(error=""), "text/html; charset=utf-8")
        message = ("Unauthorized: Missing authentication token" if status == 401 else
                   "Forbidden: Invalid authentication token")
        await _reply(send, status, f"{message} ({html.escape(reason)}). Send `Authorization: Bearer "
                     "<token>`; `ember get-auth-token` prints it on the head node (a compose "
                     "cluster's is EMBER_AUTH_TOKEN in its project's .env).",
                     extra=[(b"www-authenticate", b"Bearer")])


def _client(scope: Scope) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "?"
