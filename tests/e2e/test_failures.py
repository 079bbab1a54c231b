"""Failure on purpose, on the compose cluster: restart the GCS container (it stops gracefully on
SIGTERM with exit code 0; running work goes on; a
detached named actor is found afterwards, its record read back from etcd), restart etcd (the GCS
reconnects), kill the worker node's raylet container mid-workload (its tasks are retried on the
head, nothing is lost). The raylet kill runs last; the worker node is brought back afterwards."""
from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest

from .conftest import CORE_SERVICES, DRIVER_PRELUDE, Cluster

pytestmark = pytest.mark.chaos


class BackgroundDriver:
    """A driver program running in the head's raylet container, read line by line."""

    def __init__(self, cluster: Cluster, code: str) -> None:
        self.proc = subprocess.Popen(f"{cluster.compose} exec -T raylet-head python -u -",
                                     shell=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, errors="replace")
        assert self.proc.stdin is not None
        self.proc.stdin.write(code)
        self.proc.stdin.close()
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, text: str, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while not any(text in ln for ln in self.lines):
            if self.proc.poll() is not None and not self._reader.is_alive():
                raise AssertionError(f"driver exited before {text!r}: {self.lines} "
                                     f"{self.proc.stderr.read() if self.proc.stderr else ''}")
            assert time.monotonic() < deadline, f"no {text!r} from the driver: {self.lines}"
            time.sleep(0.1)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)
        for f in (self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()

    def finish(self, timeout_s: float = 120) -> list[str]:
        try:
            rc = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.close()
            raise AssertionError(f"driver did not finish: {self.lines}") from None
        self._reader.join(5)
        err = self.proc.stderr.read() if self.proc.stderr else ""
        self.close()
        assert rc == 0, f"driver failed ({rc}): {self.lines}\n{err[-3000:]}"
        return self.lines


def test_gcs_restart_keeps_work_and_detached_actor(cluster: Cluster) -> None:
    cluster.exec_python("raylet-head", DRIVER_PRELUDE + """
@ember.remote
class Keeper:
    def __init__(self):
        self.items = []
    def add(self, x):
        self.items.append(x)
        return len(self.items)
k = Keeper.options(name="keeper", namespace="e2e", lifetime="detached").remote()
assert ember.get([k.add.remote(i) for i in range(3)]) == [1, 2, 3]
""")
    work = BackgroundDriver(cluster, DRIVER_PRELUDE + """
@ember.remote(num_cpus=1)
def step(i):
    time.sleep(0.2)
    return i
print("STARTED", flush=True)
done = 0
t_end = time.time() + 15
while time.time() < t_end:                        # tasks keep running while the GCS restarts
    assert ember.get([step.remote(i) for i in range(4)]) == list(range(4))
    done += 4
print("DONE", done, flush=True)
""")
    try:
        work.wait_for("STARTED")
        time.sleep(2)
        cid = cluster.container("gcs")
        t0 = time.monotonic()
        cluster.run("stop -t 20 gcs")           # SIGTERM: a graceful stop, well before SIGKILL
        stopped_in = time.monotonic() - t0
        state = json.loads(subprocess.run(["docker", "inspect", cid], capture_output=True,
                                          text=True, check=True).stdout)[0]["State"]
        assert state["ExitCode"] == 0 and stopped_in < 15, (state, stopped_in)
        cluster.run("start gcs")
        cluster.wait_healthy(["gcs"])
        lines = work.finish()
    finally:
        work.close()
    assert int(lines[-1].split()[1]) >= 20, lines
    out = cluster.exec_python("raylet-head", DRIVER_PRELUDE + """
k = ember.get_actor("keeper", namespace="e2e")
print(ember.get(k.add.remote(99)))
""")
    assert out.strip() == "4"   # the same actor, state kept: its record came back from etcd


def test_etcd_restart_gcs_reconnects(cluster: Cluster) -> None:
    cluster.run("restart -t 10 etcd")
    cluster.wait_healthy(["etcd", "gcs"])
    # New jobs and actors are written to etcd through the same GCS process.
    out = cluster.exec_python("raylet-head", DRIVER_PRELUDE + """
@ember.remote
class After:
    def ping(self):
        return "pong"

deadline = time.time() + 60
while True:
    try:
        a = After.options(name="after-etcd", namespace="e2e", lifetime="detached").remote()
        break
    except Exception as e:                        # the GCS may still be reconnecting
        if time.time() > deadline:
            raise
        time.sleep(1)
print(ember.get(a.ping.remote()), ember.get(ember.get_actor("keeper", namespace="e2e").add.remote(0)))
""")
    assert out.split() == ["pong", "5"], out
    gcs_started = cluster.run("ps -q gcs").stdout.strip()
    restarts = subprocess.run(["docker", "inspect", "-f", "{{.RestartCount}}", gcs_started],
                              capture_output=True, text=True, check=True).stdout.strip()
    assert restarts == "0", "the GCS process restarted instead of reconnecting to etcd"


def test_kill_worker_raylet_mid_workload(cluster: Cluster) -> None:
    work = BackgroundDriver(cluster, DRIVER_PRELUDE + """
import numpy as np
head = ember.get_runtime_context().get_node_id()
data = ember.put(np.ones(10_000_000, dtype=np.uint8))      # 10 MB in the head's store

@ember.remote(num_cpus=0)
class Tracker:                                            # where each attempt of each task ran
    def __init__(self):
        self.starts = []
    def started(self, i, node):
        self.starts.append((i, node))
    def get(self):
        return self.starts

tracker = Tracker.remote()

@ember.remote(num_cpus=1, max_retries=3)
def job(i, a, tracker):
    node = ember.get_runtime_context().get_node_id()
    ember.get(tracker.started.remote(i, node))
    time.sleep(3)
    return i, int(a.sum()), node

refs = [job.remote(i, data, tracker) for i in range(12)]
deadline = time.time() + 60
while not [i for i, n in ember.get(tracker.get.remote()) if n != head]:
    assert time.time() < deadline, "no task reached the worker node"
    time.sleep(0.1)
victims = {i for i, n in ember.get(tracker.get.remote()) if n != head}
print("KILL", flush=True)
res = ember.get(refs, timeout=150)
assert [r[0] for r in res] == list(range(12)) and all(r[1] == 10_000_000 for r in res), res
starts = ember.get(tracker.get.remote())
retried = {i for i in victims if sum(1 for j, _ in starts if j == i) >= 2}
print("VICTIMS", len(victims), "RETRIED", len(retried),
      "ON_HEAD", all(res[i][2] == head for i in victims), flush=True)
""")
    try:
        work.wait_for("KILL")
        subprocess.run(["docker", "kill", cluster.container("raylet-worker")], check=True,
                       capture_output=True)
        lines = work.finish(timeout_s=180)
        # every task done; those running on the killed node ran again, on the head
        _, victims, _, retried, _, on_head = lines[-1].split()
        assert int(victims) >= 1 and retried == victims and on_head == "True", lines
    finally:
        work.close()
        cluster.run("up -d --no-build raylet-worker")
        cluster.wait_healthy(CORE_SERVICES)
    out = cluster.exec_python("raylet-head", DRIVER_PRELUDE + """
deadline = time.time() + 30
while sum(n["Alive"] for n in ember.nodes()) < 2 and time.time() < deadline:
    time.sleep(0.5)
print(sum(n["Alive"] for n in ember.nodes()))
""")
    assert out.strip() == "2"   # the worker node is back
