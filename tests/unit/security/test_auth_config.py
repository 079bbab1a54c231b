"""The token contract without sockets: source precedence (EMBER_AUTH_TOKEN, then
EMBER_AUTH_TOKEN_PATH, then ~/.ember/auth_token), the fatal errors, the file created 0600, the
metadata check and the HTTP header/cookie check."""
from __future__ import annotations

import os
import stat

import pytest

from ember_common import auth


@pytest.fixture
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in (auth.MODE_ENV, auth.TOKEN_ENV, auth.PATH_ENV):
        monkeypatch.delenv(name, raising=False)
    auth.reset()
    yield monkeypatch
    auth.reset()


def test_precedence_env_then_path_then_default_file(env, tmp_path):
    assert auth.load().token is None and "missing" in auth.load().source
    auth.write_token(auth.default_token_path(), "from-home")
    auth.reset()
    assert auth.load().token == "from-home"
    (tmp_path / "t").write_text("from-path\n")
    env.setenv(auth.PATH_ENV, str(tmp_path / "t"))
    auth.reset()
    assert auth.load().token == "from-path"
    env.setenv(auth.TOKEN_ENV, "from-env")
    auth.reset()
    assert (auth.load().token, auth.load().source) == ("from-env", "$EMBER_AUTH_TOKEN")
    assert auth.client_metadata() == (("authorization", "Bearer from-env"),)
    env.setenv(auth.MODE_ENV, "disabled")
    auth.reset()
    assert auth.load().token is None and auth.client_metadata() == ()


def test_ensure_token_creates_the_default_file_0600(env):
    src = auth.ensure_token()
    path = auth.default_token_path()
    with open(path) as f:
        assert src.token and f.read().strip() == src.token
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    auth.reset()
    assert auth.ensure_token().token == src.token  # kept, not regenerated


@pytest.mark.parametrize("setup, message", [
    (lambda env, p: env.setenv(auth.PATH_ENV, str(p / "missing")), "cannot read the auth token file"),
    (lambda env, p: (p.joinpath("e").write_text(" \n"), env.setenv(auth.PATH_ENV, str(p / "e"))), "is empty"),
    (lambda env, p: env.setenv(auth.TOKEN_ENV, " "), "EMBER_AUTH_TOKEN is set but empty"),
    (lambda env, p: env.setenv(auth.MODE_ENV, "on"), "must be 'token' or 'disabled'"),
])
def test_unusable_configurations_raise_one_line(env, tmp_path, setup, message):
    setup(env, tmp_path)
    with pytest.raises(auth.AuthConfigError, match=message) as err:
        auth.load()
    assert "\n" not in str(err.value)


def test_require_token_refuses_to_run_open(env):
    with pytest.raises(auth.AuthConfigError, match="no token"):
        auth.require_token()


def test_metadata_check():
    want = "Bearer abc"
    assert auth._deny_reason([("authorization", "Bearer abc")], want) is None
    assert auth._deny_reason([("authorization", "Bearer abd")], want) == "wrong token"
    assert auth._deny_reason([("authorization", "Bearer \u00e9")], want) == "wrong token"
    assert auth._deny_reason([("x-other", "Bearer abc")], want) == "no token"
    assert auth._deny_reason(None, want) == "no token"


def test_http_check_accepts_header_or_cookie(env):
    env.setenv(auth.TOKEN_ENV, "tok")
    auth.reset()
    assert auth.http_authorized([(b"authorization", b"Bearer tok")])
    assert auth.http_authorized([(b"cookie", b"a=b; ember-authentication-token=tok")])
    assert not auth.http_authorized([(b"authorization", b"Bearer nope")])
    assert not auth.http_authorized([(b"cookie", b"ember-authentication-token=nope")])
    assert not auth.http_authorized([])
    assert auth.http_headers() == {"Authorization": "Bearer tok"}
