"""The state API (ember.util.state) and its CLI (`ember list|get|summary`) against a live
embedded cluster: actors alive and dead, a placement group, an object in the store, the
driver and its workers; filters, limits, detail columns and errors naming the problem."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import ember
from ember.util import state
from ember.util.placement_group import placement_group, remove_placement_group


@ember.remote
class Counter:
    def __init__(self):
        self.n = 0

    def incr(self):
        self.n += 1
        return self.n


@pytest.fixture(scope="module")
def cluster():
    ember.init(num_cpus=2, object_store_memory=128 * 2**20)
    alive = Counter.options(name="state-alive").remote()
    doomed = Counter.options(name="state-doomed").remote()
    ember.get([alive.incr.remote(), doomed.incr.remote()])
    ember.kill(doomed)
    pg = placement_group([{"CPU": 1}], name="state-pg")
    assert pg.wait(30)
    ref = ember.put(np.arange(200_000, dtype=np.int64))  # 1.6 MB: in the store
    yield {"alive": alive, "pg": pg, "ref": ref, "gcs": ember.get_runtime_context().gcs_address}
    remove_placement_group(pg)
    ember.shutdown()


def _wait_dead(name):
    import time

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        found = state.list_actors(filters=[("name", "=", name)])
        if found and found[0].state == "DEAD":
            return found[0]
        time.sleep(0.1)
    raise AssertionError(f"{name} never DEAD: {state.list_actors()}")


def test_list_actors_with_filters_and_detail(cluster):
    dead = _wait_dead("state-doomed")
    alive = state.list_actors(filters=[("state", "=", "ALIVE"), ("class_name", "=", "Counter")])
    assert [a.name for a in alive] == ["state-alive"]
    a = alive[0]
    assert a["actor_id"] == cluster["alive"]._actor_id.hex()
    assert a.pid and a.node_id and a.required_resources is None  # detail columns need detail=True
    full = state.get_actor(a.actor_id)
    assert full.name == "state-alive" and full.num_restarts == 0 and full.is_detached is False
    assert state.list_actors(filters=[("state", "!=", "ALIVE")], detail=True)[0].death_cause
    assert dead.name == "state-doomed"
    assert state.get_actor("00" * 16) is None
    assert len(state.list_actors(limit=1)) == 1


def test_summaries(cluster):
    _wait_dead("state-doomed")
    s = state.summarize_actors()["cluster"]
    assert s["summary"]["Counter"]["state_counts"] == {"ALIVE": 1, "DEAD": 1}
    objs = state.summarize_objects()["cluster"]
    assert objs["total_objects"] >= 1 and objs["total_size_mb"] >= 1.5


def test_nodes_jobs_workers_objects_placement_groups(cluster):
    nodes = state.list_nodes()
    assert len(nodes) == 1 and nodes[0].state == "ALIVE" and nodes[0].is_head_node
    assert nodes[0].resources_total["CPU"] == 2.0
    assert state.get_node(nodes[0].node_id).resources_available is not None
    jobs = state.list_jobs(filters=[("type", "=", "DRIVER"), ("status", "=", "RUNNING")])
    assert len(jobs) == 1 and jobs[0].job_id == ember.get_runtime_context().get_job_id()
    workers = state.list_workers(detail=True)
    actor_pid = state.list_actors(filters=[("name", "=", "state-alive")])[0].pid
    assert any(w.pid == actor_pid and w.worker_type == "WORKER" and w.current_task for w in workers)
    assert any(w.worker_type == "DRIVER" and w.is_alive for w in workers)
    objs = state.list_objects(filters=[("object_id", "=", cluster["ref"].hex())], detail=True)
    assert len(objs) == 1 and objs[0].object_size >= 1_600_000 and objs[0].node_id == nodes[0].node_id
    assert state.get_objects(cluster["ref"].hex())[0].object_id == cluster["ref"].hex()
    pgs = state.list_placement_groups(filters=[("name", "=", "state-pg")], detail=True)
    assert len(pgs) == 1 and pgs[0].state == "CREATED" and pgs[0].bundles[0]["node_id"] == nodes[0].node_id
    assert state.get_placement_group(cluster["pg"].id.hex()).name == "state-pg"


def test_bad_input_names_the_problem(cluster):
    with pytest.raises(ValueError, match="filter column 'colour'"):
        state.list_actors(filters=[("colour", "=", "red")])
    with pytest.raises(ValueError, match="limit must be a positive integer"):
        state.list_nodes(limit=0)
    with pytest.raises(ConnectionError, match="127.0.0.1:1"):
        state.list_nodes(address="127.0.0.1:1", timeout=2)
    assert state.list_nodes()  # the cluster still answers


def cli(gcs, *args):
    r = subprocess.run([sys.executable, "-m", "ember.scripts", *args, "--address", gcs], capture_output=True,
                       text=True, timeout=60)
    return r


def test_cli_list_get_summary(cluster):
    gcs = cluster["gcs"]
    _wait_dead("state-doomed")
    r = cli(gcs, "list", "actors", "--filter", "state=ALIVE", "--format", "json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [a["name"] for a in rows] == ["state-alive"] and "required_resources" not in rows[0]
    r = cli(gcs, "list", "workers")
    assert r.returncode == 0 and r.stdout.split()[:3] == ["WORKER_ID", "WORKER_TYPE", "IS_ALIVE"] and "DRIVER" in r.stdout
    r = cli(gcs, "list", "nodes")
    assert "ALIVE" in r.stdout and "2 CPU" in r.stdout, r.stdout
    r = cli(gcs, "list", "actors", "--limit", "1")
    assert len(r.stdout.splitlines()) == 2 and "1 more entries" in r.stderr
    actor_id = rows[0]["actor_id"]
    r = cli(gcs, "get", "actors", actor_id, "--format", "json")
    assert json.loads(r.stdout)["name"] == "state-alive"
    r = cli(gcs, "get", "actors", "ab" * 16)
    assert r.returncode == 1 and "no actor with id" in r.stderr
    r = cli(gcs, "summary", "actors")
    assert "Counter" in r.stdout and "ALIVE: 1" in r.stdout and "DEAD: 1" in r.stdout
    r = cli(gcs, "summary", "objects", "--format", "json")
    assert json.loads(r.stdout)["cluster"]["total_objects"] >= 1
    r = cli(gcs, "list", "actors", "--filter", "state")
    assert r.returncode == 1 and "COLUMN=VALUE" in r.stderr
