"""The state view after a driver ends, as Ray's: a driver SIGKILLed ends its job FAILED, one
interrupted with Ctrl-C ends it STOPPED, one that returns ends it SUCCEEDED; the dead driver's
running tasks are FAILED (WORKER_DIED, saying why) and its non-detached actors DEAD. Real
processes: a LocalCluster, and each driver a subprocess connected to it."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from ember.testing import LocalCluster, wait_for
from ember.util import state

DRIVER = textwrap.dedent("""
    import os, sys, time
    import ember
    ember.init(address=sys.argv[1])

    @ember.remote
    def long_task():
        time.sleep(300)

    @ember.remote
    class Holder:
        def ping(self):
            return "pong"

    ref = long_task.remote()
    holder = Holder.remote()
    ember.get(holder.ping.remote(), timeout=60)
    with open(sys.argv[3] + ".tmp", "w") as f:
        f.write(ember.get_runtime_context().get_job_id())
    os.rename(sys.argv[3] + ".tmp", sys.argv[3])
    if sys.argv[2] == "return":
        sys.exit(0)
    time.sleep(300)  # killed or interrupted here
""")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    script = tmp_path_factory.mktemp("driver") / "driver.py"
    script.write_text(DRIVER)
    with LocalCluster() as c:
        c.add_node({"CPU": 2}, is_head=True)
        yield c, str(script)


@contextlib.contextmanager
def _driver(cluster, mode: str):
    """A driver process (its output discarded: nothing can fill a pipe) and its job id; killed
    and reaped at the end whatever happened."""
    c, script = cluster
    id_file = f"{script}.{mode}.{time.monotonic_ns()}.job"
    p = subprocess.Popen([sys.executable, script, c.gcs_address, mode, id_file],
                         stdout=subprocess.DEVNULL)
    try:
        wait_for(lambda: os.path.exists(id_file) or p.poll() is not None, timeout_s=120, interval_s=0.2,
                 what="the driver to start")
        assert os.path.exists(id_file), f"the driver exited with {p.returncode} before starting"
        with open(id_file) as f:
            yield p, f.read().strip()
    finally:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=60)


def _job(cluster, job_id):
    return next(j for j in state.list_jobs(address=cluster[0].gcs_address) if j.job_id == job_id)


def _ended(cluster, job_id, status):
    def check():
        job = _job(cluster, job_id)
        tasks = state.list_tasks(address=cluster[0].gcs_address, filters=[("job_id", "=", job_id)], detail=True)
        actors = [a for a in state.list_actors(address=cluster[0].gcs_address)
                  if a.job_id == job_id]
        if job.status != status or any(t.state not in ("FINISHED", "FAILED") for t in tasks):
            return None
        if any(a.state != "DEAD" for a in actors):
            return None
        return job, tasks, actors
    return wait_for(check, timeout_s=60, interval_s=0.5, what=f"job {job_id} {status} with its tasks closed")


@pytest.mark.parametrize("sig, status", [(signal.SIGKILL, "FAILED"), (signal.SIGINT, "STOPPED")])
def test_a_dead_drivers_job_ends_and_its_running_tasks_fail(cluster, sig, status):
    with _driver(cluster, "wait") as (p, job_id):
        os.kill(p.pid, sig)
        p.wait(timeout=120)
    job, tasks, actors = _ended(cluster, job_id, status)
    running = [t for t in tasks if t.name == "long_task"]
    assert running and running[0].state == "FAILED" and running[0].error_type == "WORKER_DIED"
    assert f"Job {job_id} ended ({status}" in running[0].error_message
    assert job.message and ("without ember.shutdown()" in job.message if status == "FAILED"
                            else "KeyboardInterrupt" in job.message)
    assert [a.state for a in actors] == ["DEAD"]


def test_a_driver_that_returns_ends_its_job_succeeded(cluster):
    with _driver(cluster, "return") as (p, job_id):
        assert p.wait(timeout=120) == 0
    job, tasks, _ = _ended(cluster, job_id, "SUCCEEDED")
    assert job.message is None
    assert [t.state for t in tasks if t.name == "long_task"] == ["FAILED"]  # still running at the end
