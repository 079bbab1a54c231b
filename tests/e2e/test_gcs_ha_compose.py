"""The highly available GCS on the compose cluster (docker-compose.yml + docker/compose.ha.yml):
three GCS replicas, the leader's container SIGKILLed while a driver in the head's raylet
container runs tasks and actor calls; another replica leads within the lease, the driver's work
finishes (each actor call once), the killed replica comes back as a follower, and the named
actor, the KV entry, the job and the named placement group are all still there.

Its own compose project (the session's `cluster` is the single-GCS one), torn down at the end."""
from __future__ import annotations

import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import CORE_SERVICES, IMAGES, ROOT, Cluster, _free_port
from .test_failures import BackgroundDriver

pytestmark = pytest.mark.chaos

REPLICAS = ["gcs", "gcs-2", "gcs-3"]
# Once the test's detached placement group holds a CPU the cluster is never all idle, so the
# drivers after the set-up do not wait for that (DRIVER_PRELUDE would, for a minute).
HELD_PRELUDE = "import ember, time\nember.init(namespace=\"ha\")\n"  # named groups live in a namespace
LEASE_S = 2


@pytest.fixture(scope="module")
def ha_cluster(docker_compose_command: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tag = os.environ.get("EMBER_IMAGE_TAG") or "latest"
    missing = [i for i in IMAGES if subprocess.run(["docker", "image", "inspect", f"{i}:{tag}"],
                                                   capture_output=True).returncode != 0]
    if missing:
        pytest.fail(f"images {missing} are not built: run `make images` (docker/build-offline.sh)")
    env_file = Path(tmp_path_factory.mktemp("compose-ha") / "ha.env")
    gcs_port, http_port, dashboard_port = _free_port(), _free_port(), _free_port()
    env_file.write_text(f"EMBER_AUTH_TOKEN={secrets.token_hex(32)}\nEMBER_IMAGE_TAG={tag}\n"
                        f"EMBER_ETCD_PASSWORD={secrets.token_hex(32)}\n"
                        f"EMBER_GCS_HOST_PORT={gcs_port}\nEMBER_HTTP_HOST_PORT={http_port}\n"
                        f"EMBER_DASHBOARD_HOST_PORT={dashboard_port}\nEMBER_GCS_LEADER_LEASE_S={LEASE_S}\n"
                        "EMBER_OBJECT_STORE_BYTES=134217728\nEMBER_SHM_SIZE=256m\n"
                        "EMBER_NODE_DEATH_TIMEOUT_S=10\n")
    project = f"emberha{os.getpid()}"
    compose = (f'{docker_compose_command} --env-file "{env_file}" -f "{ROOT}/docker-compose.yml" '
               f'-f "{ROOT}/docker/compose.ha.yml" -p "{project}"')
    c = Cluster(project, compose, gcs_port, http_port, "", str(env_file), dashboard_port=dashboard_port)
    try:
        c.run("up -d --no-build", timeout=300)
        c.wait_healthy([*CORE_SERVICES, "gcs-2", "gcs-3"])
        yield c
    finally:
        c.run("down -v --remove-orphans -t 10", check=False, timeout=300)


def _leads(c: Cluster, service: str) -> bool:
    """Whether the replica in service answers ember.Gcs SERVING (only the leader does)."""
    r = subprocess.run(f"{c.compose} exec -T {service} ember-healthcheck 127.0.0.1:6379 ember.Gcs",
                       shell=True, capture_output=True, timeout=30)
    return r.returncode == 0


def _leader(c: Cluster, timeout_s: float = 30, other_than: str = "") -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        found = [s for s in REPLICAS if s != other_than and _leads(c, s)]
        if len(found) == 1:
            return found[0]
        assert time.monotonic() < deadline, f"no single GCS leader among {REPLICAS}: {found}"
        time.sleep(0.1)


def test_gcs_leader_killed_under_load_loses_nothing(ha_cluster: Cluster) -> None:
    c = ha_cluster
    c.exec_python("raylet-head", HELD_PRELUDE + """
from ember.experimental import internal_kv
from ember.util.placement_group import placement_group

@ember.remote
class Keeper:
    def __init__(self):
        self.n = 0
    def incr(self):
        self.n += 1
        return self.n
k = Keeper.options(name="keeper", namespace="ha", lifetime="detached").remote()
assert ember.get(k.incr.remote()) == 1
pg = placement_group([{"CPU": 1}], name="held", lifetime="detached")
assert pg.wait(60)
internal_kv._internal_kv_put("ha-key", "ha-value")
print("set up")
""")
    leader = _leader(c)
    driver = BackgroundDriver(c, HELD_PRELUDE + """
import json
@ember.remote
def square(x):
    time.sleep(0.05)
    return x * x
k = ember.get_actor("keeper", namespace="ha")
print("running", flush=True)
tasks, calls = [], []
t_end = time.monotonic() + 12
while time.monotonic() < t_end:  # bounded: 12 s of submissions
    tasks += [square.remote(i) for i in range(4)]
    calls.append(k.incr.remote())
    time.sleep(0.05)
squares = ember.get(tasks, timeout=120)
counts = ember.get(calls, timeout=120)
print(json.dumps({"tasks_ok": squares == [(i % 4) ** 2 for i in range(len(tasks))],
                  "counts": counts}), flush=True)
""")
    # The new leader is watched from inside the compose network (the health service of the other
    # replicas, every 50 ms): `compose exec` per probe would take longer than the failover. The
    # container's monotonic clock is the host kernel's, so its time compares with ours.
    others = [r for r in REPLICAS if r != leader]
    probe = BackgroundDriver(c, f"""
import time, grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
stubs = {{r: health_pb2_grpc.HealthStub(grpc.insecure_channel(r + ":6379")) for r in {others!r}}}
print("probing", flush=True)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    for r, stub in stubs.items():
        try:
            if stub.Check(health_pb2.HealthCheckRequest(service="ember.Gcs"), timeout=0.5).status == 1:
                print("leader", r, repr(time.monotonic()), flush=True)
                raise SystemExit(0)
        except grpc.RpcError:
            pass
    time.sleep(0.05)
print("no leader", flush=True)
""")
    container = c.run(f"ps -q {leader}").stdout.strip()
    try:
        driver.wait_for("running")
        probe.wait_for("probing")
        time.sleep(3)
        t0 = time.monotonic()
        subprocess.run(["docker", "kill", "-s", "SIGKILL", container], check=True, capture_output=True)
        probe.wait_for("leader ", timeout_s=60)
        _, new, at = next(ln for ln in probe.lines if ln.startswith("leader ")).split()
        took = float(at) - t0
        print(f"\nGCS leader {leader} killed -> {new} serving after {took:.2f}s")
        assert took < LEASE_S + 1.5, f"a new leader served {took:.2f}s after the old one was killed"
        assert _leader(c, timeout_s=30, other_than=leader) == new
        lines = driver.finish(timeout_s=180)
    finally:
        driver.close()
        probe.close()
    import json

    result = json.loads(lines[-1])
    assert result["tasks_ok"]
    counts = result["counts"]
    assert counts == list(range(2, 2 + len(counts))), "an actor call was lost or ran twice"
    c.run(f"start {leader}")  # docker kill stops the restart policy; the replica comes back
    c.wait_healthy([leader], timeout_s=120)
    assert not _leads(c, leader)  # as a follower: the new leader keeps its lease
    after = c.exec_python("raylet-head", HELD_PRELUDE + f"""
from ember.experimental import internal_kv
from ember.util.placement_group import get_placement_group
from ember.util.state import list_jobs
k = ember.get_actor("keeper", namespace="ha")
assert ember.get(k.incr.remote()) == {2 + len(counts)}
assert internal_kv._internal_kv_get("ha-key") == b"ha-value"
get_placement_group("held")
print(len(list_jobs()))
""")
    assert int(after.strip().splitlines()[-1]) >= 3  # the set-up, the load and this driver
