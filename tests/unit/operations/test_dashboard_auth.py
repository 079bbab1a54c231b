"""The dashboard's token check (ember_dashboard.auth) in front of a small Starlette app, over
Starlette's in-process test client: open health, 401/403, every way to present the token, the
login form and the URL token setting the cookie, websockets, and auth turned off."""
from __future__ import annotations

import warnings

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocketDisconnect

from ember_common import auth
from ember_dashboard.auth import TokenAuthMiddleware

with warnings.catch_warnings():  # starlette's test client names an anyio alias anyio deprecates
    warnings.simplefilter("ignore", DeprecationWarning)
    from starlette.testclient import TestClient

TOKEN = "t0ken-" + "a" * 58


async def hello(request):
    return PlainTextResponse("hello")


async def ws_echo(ws):
    await ws.accept()
    await ws.send_text("hi")
    await ws.close()


@pytest.fixture
def client(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv(auth.PATH_ENV, raising=False)
    monkeypatch.delenv(auth.MODE_ENV, raising=False)
    monkeypatch.setenv(auth.TOKEN_ENV, TOKEN)
    auth.reset()
    app = Starlette(routes=[Route("/", hello), Route("/api/jobs/", hello), WebSocketRoute("/ws", ws_echo)],
                    middleware=[Middleware(TokenAuthMiddleware)])
    with TestClient(app, follow_redirects=False) as c:
        yield c
    auth.reset()


def test_health_is_open_and_the_rest_needs_the_token(client):
    assert client.get("/api/healthz").text == "success"
    r = client.get("/api/jobs/")
    assert r.status_code == 401 and "ember get-auth-token" in r.text and r.headers["www-authenticate"] == "Bearer"
    assert client.get("/api/jobs/", headers={"Authorization": "Bearer nope"}).status_code == 403
    assert client.get("/api/jobs/", headers={"Authorization": f"Bearer {TOKEN}"}).text == "hello"
    assert client.get("/api/jobs/", headers={"X-Ray-Authorization": f"Bearer {TOKEN}"}).text == "hello"
    for name in ("ember-authentication-token", "ray-authentication-token"):
        assert client.get("/api/jobs/", headers={"Cookie": f"x=1; {name}={TOKEN}"}).text == "hello"
    assert client.get("/api/jobs/", headers={"Cookie": "ember-authentication-token=nope"}).status_code == 403
    assert client.get("/api/authentication_mode").json() == {"authentication_mode": "token"}


def test_a_browser_gets_the_login_form_and_signs_in(client):
    page = client.get("/", headers={"Accept": "text/html"})
    assert page.status_code == 401 and 'name="token"' in page.text
    wrong = client.post("/api/authenticate", data={"token": "nope"})
    assert wrong.status_code == 403 and "not this cluster" in wrong.text and "set-cookie" not in wrong.headers
    ok = client.post("/api/authenticate", data={"token": TOKEN})
    assert ok.status_code == 303 and ok.headers["location"] == "/"
    cookie = ok.headers["set-cookie"]
    assert cookie.startswith(f"ember-authentication-token={TOKEN};") and "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie and "Secure" not in cookie  # plain http here
    assert client.get("/").text == "hello"  # the client keeps the cookie


def test_rays_authenticate_call_and_the_url_token(client):
    r = client.post("/api/authenticate", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.json()["status"] == "authenticated" and "ember-authentication-token" in r.headers["set-cookie"]
    client.cookies.clear()
    assert client.post("/api/authenticate", headers={"Authorization": "Bearer x"}).status_code == 403
    assert client.get("/?token=nope").status_code == 403
    r = client.get(f"/?token={TOKEN}")
    assert r.status_code == 303 and r.headers["location"] == "/" and TOKEN in r.headers["set-cookie"]


def test_websockets_need_the_token(client):
    with pytest.raises(WebSocketDisconnect) as e, client.websocket_connect("/ws"):
        pass
    assert e.value.code == 1008
    with client.websocket_connect("/ws", headers={"Authorization": f"Bearer {TOKEN}"}) as ws:
        assert ws.receive_text() == "hi"


def test_auth_disabled_lets_everything_through(client, monkeypatch):
    monkeypatch.setenv(auth.MODE_ENV, "disabled")
    auth.reset()
    assert client.get("/api/jobs/").text == "hello"
    assert client.get("/api/authentication_mode").json() == {"authentication_mode": "disabled"}
