#!/usr/bin/env python3
"""The etcd container's entry point: etcd with authentication on, and its health check.

    ember-etcd [etcd flags...]     runs etcd (settings from the image's ETCD_* variables) and, as
                                   soon as it answers on 127.0.0.1:2379, turns authentication on
    ember-etcd health              exit 0 only when etcd is healthy, refuses an anonymous read,
                                   and accepts EMBER_ETCD_PASSWORD (the container's health check)

EMBER_ETCD_PASSWORD (required) is the password of etcd's `root` user, the one user the GCS
connects as; compose takes it from .env (`make compose-env` writes it), Kubernetes from the
Secret `ember-etcd-auth`. On a fresh data directory this script creates `root` with it, grants it
the root role and enables authentication, through etcd's JSON gateway on loopback; until then the
health check fails, so the GCS (which waits for a healthy etcd) never talks to an open etcd. On a
data directory where authentication is on already, the password is only checked: with a
different one (the data directory keeps the password it was first set up with) etcd is stopped
and the container exits 1, saying so. The password never reaches etcd's environment or command line.

Only the Python standard library: the etcd image has python3 but no virtualenv, so no
ember_common either; this script takes its one variable (registered in envvars_table) out of a
copy of its environment itself.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

PASSWORD_ENV = "EMBER_ETCD_PASSWORD"
USER = "root"
SETUP_DEADLINE_S = 120.0
MARKER = "/tmp/ember-etcd-password-ok"  # the health check's memory (tmpfs in compose)


def _gateway() -> str:
    """etcd's first client URL (ETCD_LISTEN_CLIENT_URLS, the image sets it), reached on loopback."""
    url = os.environ.get("ETCD_LISTEN_CLIENT_URLS", "http://127.0.0.1:2379").split(",")[0].strip()
    scheme, _, rest = url.partition("://")
    port = rest.rpartition(":")[2] or "2379"
    return f"{scheme or 'http'}://127.0.0.1:{port}"


GATEWAY = _gateway()


def _post(path: str, body: dict[str, object], token: str | None = None, timeout: float = 4.0) -> dict:
    """POST to etcd's JSON gateway; returns the reply, or {"error": ...} for an answered error."""
    req = urllib.request.Request(GATEWAY + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": token} if token else {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:  # etcd answers errors with a JSON body
        try:
            return json.loads(e.read() or b"{}") or {"error": str(e)}
        except ValueError:
            return {"error": str(e)}


def _password(env: dict[str, str]) -> str:
    """Takes EMBER_ETCD_PASSWORD out of env (etcd's environment must not hold it); exit 2 if unset."""
    pw = env.pop(PASSWORD_ENV, "")
    if not pw.strip():
        print(f"ember-etcd: error: {PASSWORD_ENV} is not set: etcd would accept every client "
              "(compose: `make compose-env` writes it into .env; Kubernetes: the Secret "
              "ember-etcd-auth)", file=sys.stderr)
        sys.exit(2)
    return pw


def auth_state(password: str) -> str:
    """"open" (authentication off), "ok" (on, password accepted), "wrong-password" (on, refused),
    or raises OSError while etcd does not answer."""
    status = _post("/v3/auth/status", {})
    if "error" not in status:
        return "ok" if status.get("enabled") else "open"
    if "user name is empty" not in str(status.get("error")):
        raise OSError(f"etcd answered {status}")
    token = _post("/v3/auth/authenticate", {"name": USER, "password": password}).get("token")
    return "ok" if token else "wrong-password"


def enable_auth(password: str) -> None:
    """Creates `root` with the password, grants it the root role and enables authentication."""
    for path, body in (("/v3/auth/user/add", {"name": USER, "password": password}),
                       ("/v3/auth/user/grant", {"user": USER, "role": "root"}),
                       ("/v3/auth/enable", {})):
        reply = _post(path, body)
        if "error" in reply and "already exists" not in str(reply["error"]):
            raise OSError(f"{path}: {reply['error']}")


def set_up(password: str, etcd: subprocess.Popen[bytes]) -> bool:
    """Waits for etcd to answer, then turns authentication on (or checks the password). False when
    etcd refuses the password: then etcd is stopped (the container exits 1, its log says why)."""
    deadline = time.monotonic() + SETUP_DEADLINE_S
    while time.monotonic() < deadline and etcd.poll() is None:
        try:
            state = auth_state(password)
            if state == "open":
                enable_auth(password)
                print("ember-etcd: authentication enabled (user root)", file=sys.stderr, flush=True)
            elif state == "wrong-password":
                print(f"ember-etcd: error: etcd refuses {PASSWORD_ENV}: this data directory was set "
                      "up with another password (compose: keep .env's, or `docker compose down -v` "
                      "deletes the cluster's state); stopping etcd", file=sys.stderr, flush=True)
                etcd.terminate()
                return False
            return True
        except OSError:
            time.sleep(0.2)
    if etcd.poll() is None:
        print(f"ember-etcd: error: etcd did not answer on {GATEWAY} in time; authentication "
              "is not set up (the health check stays failing)", file=sys.stderr, flush=True)
    return True


def health(password: str) -> int:
    """The health check: etcd healthy, anonymous reads refused, the password accepted. The password
    is checked (a bcrypt hash on etcd's side) until it passed once, then remembered in MARKER:
    etcd keeps it for as long as it runs, and the check stays cheap on a loaded machine."""
    try:
        with urllib.request.urlopen(GATEWAY + "/health", timeout=4) as r:
            if b"true" not in r.read():
                print("etcd is not healthy")
                return 1
        if os.path.exists(MARKER):
            status = _post("/v3/auth/status", {})
            state = "ok" if "user name is empty" in str(status.get("error")) else "open"
        else:
            state = auth_state(password)
    except OSError as e:
        print(f"etcd does not answer: {e}")
        return 1
    if state != "ok":
        print(f"etcd authentication: {state}")
        return 1
    try:
        with open(MARKER, "w"):
            pass
    except OSError:  # no writable /tmp: the password is checked every time
        pass
    return 0


def run(argv: list[str]) -> int:
    """Runs etcd as a child (signals forwarded), sets up authentication, returns etcd's status."""
    env = dict(os.environ)
    password = _password(env)
    etcd = subprocess.Popen(["etcd", *argv], env=env)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: etcd.send_signal(s))
    usable = set_up(password, etcd)
    code = etcd.wait()
    if code < 0:  # etcd ends itself with the signal it stopped on, as a shell reports it
        code = 128 - code
    return code if usable else 1


def main(argv: list[str]) -> int:
    """`ember-etcd health` or `ember-etcd [etcd flags]`."""
    if argv[:1] == ["health"]:
        return health(_password(dict(os.environ)))
    return run(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
