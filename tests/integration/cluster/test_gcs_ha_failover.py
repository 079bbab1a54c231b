"""A cluster whose GCS is three replicas on etcd: the leader SIGKILLed (or SIGSTOPped: silent,
its connections left open) while a driver runs tasks and actor calls; a new leader serves within
3 s, the driver's work finishes, and the named actor, KV entries, jobs and placement groups are
all still there."""
from __future__ import annotations

import time

import pytest

import ember
from ember.experimental import internal_kv
from ember.testing import EtcdProcess, LocalCluster
from ember.util.placement_group import get_placement_group, placement_group
from ember.util.state import list_jobs

pytestmark = [pytest.mark.etcd, pytest.mark.chaos]


@pytest.fixture(scope="module")
def etcd():
    with EtcdProcess() as e:
        yield e


@pytest.mark.parametrize("fault", ["sigkill", "sigstop"])
def test_driver_work_survives_the_gcs_leader_lost(etcd, fault):
    with LocalCluster(gcs_storage=etcd.url, gcs_replicas=3, gcs_lease_s=2) as c:
        replicas = c.gcs_replicas
        assert replicas is not None
        c.add_node({"CPU": 3}, is_head=True)
        ember.init(address=c.gcs_address)
        try:
            @ember.remote
            def square(x):
                time.sleep(0.05)
                return x * x

            @ember.remote
            class Counter:
                def __init__(self):
                    self.n = 0

                def incr(self):
                    self.n += 1
                    return self.n

                def slow_incr(self):
                    time.sleep(0.05)
                    return self.incr()

            keeper = Counter.options(name="keeper", lifetime="detached").remote()
            assert ember.get(keeper.incr.remote(), timeout=60) == 1
            pg = placement_group([{"CPU": 1}], name="held")
            assert pg.wait(60)
            internal_kv._internal_kv_put("ha-key", "ha-value")
            assert ember.get([square.remote(i) for i in range(6)], timeout=60) == [i * i for i in range(6)]
            jobs = {j.job_id for j in list_jobs()}
            assert jobs

            # Work that lasts past the fail-over (2 CPUs free: about 2 s of tasks, 2 s of calls).
            in_flight = [square.remote(i) for i in range(80)]
            calls = [keeper.slow_incr.remote() for _ in range(40)]
            leader = replicas.wait_leader()
            t0 = time.monotonic()
            (replicas.kill if fault == "sigkill" else replicas.pause)(leader)
            _, pending = ember.wait(in_flight, num_returns=len(in_flight), timeout=0)
            assert pending, "every task finished before the leader was killed: nothing was in flight"
            new = replicas.wait_leader(timeout_s=10, other_than=leader)
            took = time.monotonic() - t0
            assert took < 3.0, f"a new GCS leader served {took:.2f}s after the old one's {fault}"

            assert ember.get(in_flight, timeout=60) == [i * i for i in range(80)]
            assert ember.get(calls, timeout=60) == list(range(2, 42))  # each call ran once, in order
            # After the fail-over: the GCS's tables as they were, and new work through the new leader.
            assert ember.get(ember.get_actor("keeper").incr.remote(), timeout=60) == 42
            assert internal_kv._internal_kv_get("ha-key") == b"ha-value"
            assert get_placement_group("held").id == pg.id
            fresh = Counter.remote()
            assert ember.get(fresh.incr.remote(), timeout=60) == 1
            assert ember.get([square.remote(i) for i in range(5)], timeout=60) == [i * i for i in range(5)]
            assert jobs <= {j.job_id for j in list_jobs()}
            assert replicas.leaders() == [new]
        finally:
            ember.shutdown()
