"""A bad configuration stops a service at start-up with exit code != 0 and ONE line on stderr that
names the problem: unreachable etcd, malformed resources JSON, a port already in use, and the
same for the container entry point's EMBER_* settings (docker/entrypoint.py, run here without
Docker: it fails before exec'ing anything). The processes run on loopback; nothing is left."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def run_service(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=60,
                          errors="replace",  # gRPC C-core logs may carry stray bytes
                          stdin=subprocess.DEVNULL)


def error_line(r: subprocess.CompletedProcess) -> str:
    """The single `error:` line; a traceback or a second error line fails the test."""
    assert r.returncode != 0, f"exited 0: {r.stderr}"
    assert "Traceback" not in r.stderr, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, r.stderr
    return errors[0]


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the socket is closed


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        yield s.getsockname()[1]


def test_gcs_unreachable_etcd(closed_port: int, tmp_path) -> None:
    r = run_service("-m", "ember_gcs", "--port", "0", "--storage", f"etcd://127.0.0.1:{closed_port}",
                    "--session-dir", str(tmp_path))
    line = error_line(r)
    assert "etcd unreachable" in line and f"127.0.0.1:{closed_port}" in line, line


def test_gcs_port_in_use(busy_port: int, tmp_path) -> None:
    line = error_line(run_service("-m", "ember_gcs", "--port", str(busy_port),
                                  "--session-dir", str(tmp_path)))
    assert f"cannot listen on 127.0.0.1:{busy_port}" in line, line  # the default bind: loopback


def test_objmgr_port_in_use(busy_port: int, tmp_path) -> None:
    line = error_line(run_service("-m", "ember_objmgr", "--port", str(busy_port),
                                  "--store-dir", str(tmp_path / "store"), "--capacity-bytes", "4096"))
    assert f"cannot listen on 127.0.0.1:{busy_port}" in line, line  # the default bind: loopback


def test_raylet_malformed_resources(closed_port: int, tmp_path) -> None:
    line = error_line(run_service(
        "-m", "ember_raylet", "--gcs-address", f"127.0.0.1:{closed_port}",
        "--objmgr-address", f"127.0.0.1:{closed_port}", "--node-id", "n" * 28,
        "--store-dir", str(tmp_path / "store"), "--session-dir", str(tmp_path),
        "--resources", '{"CPU": 2,'))
    assert "--resources is not valid JSON" in line, line


@pytest.mark.parametrize("setting, expected", [
    ('EMBER_RESOURCES={"CPU": 2,', "EMBER_RESOURCES is not valid JSON"),
    ('EMBER_RESOURCES=["CPU"]', "EMBER_RESOURCES must be a JSON object of numbers"),
    ("EMBER_NUM_CPUS=two", "EMBER_NUM_CPUS='two' is not a number"),
    ("EMBER_RAYLET_PORT=-1", "EMBER_RAYLET_PORT='-1' is negative"),
    ("EMBER_GCS_ADDRESS=gcs", "EMBER_GCS_ADDRESS='gcs' is not HOST:PORT"),
])
def test_container_entrypoint_settings(setting: str, expected: str) -> None:
    r = run_service(os.path.join(ROOT, "docker", "entrypoint.py"), "raylet",
                    "EMBER_GCS_ADDRESS=127.0.0.1:6379", "EMBER_NODE_IP=127.0.0.1", setting)
    assert r.returncode == 2
    assert error_line(r).startswith(f"error: {expected}"), r.stderr


def test_container_entrypoint_unknown_role() -> None:
    r = run_service(os.path.join(ROOT, "docker", "entrypoint.py"), "scheduler")
    assert "unknown role 'scheduler'" in error_line(r)
