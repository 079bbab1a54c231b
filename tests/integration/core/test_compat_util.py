"""`ray.util` on an embedded cluster, from Ray's docs and tests: multiprocessing.Pool, the joblib
backend, metrics on a Prometheus endpoint (read over HTTP on loopback), get_node_ip_address,
inspect_serializability, list_named_actors, and exceptions raised where Ray raises them."""
from __future__ import annotations

import io
import os
import threading
import time
import urllib.request

import pytest

import ember
from ember.exceptions import ActorUnschedulableError
from ember.util.multiprocessing import Pool, TimeoutError
from ember.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@pytest.fixture(scope="module")
def cluster():
    ember.init(num_cpus=2, object_store_memory=128 * 2**20)
    yield ember
    ember.shutdown()


def square(x):
    return x * x


def slow_identity(x):
    time.sleep(0.05 * (5 - x) if x < 5 else 0)
    return x


def fails_on_three(x):
    if x == 3:
        raise KeyError(f"no {x}")
    return x


def pid(_=None):
    return os.getpid()


_init_value = {}


def set_value(v):
    _init_value["v"] = v


def read_value(_):
    return _init_value.get("v")


def test_pool_map_family_keeps_order_and_spreads_over_actors(cluster):
    with Pool(processes=2) as pool:
        assert pool.map(square, range(20)) == [x * x for x in range(20)]
        assert pool.map(square, range(7), chunksize=3) == [x * x for x in range(7)]
        assert pool.starmap(pow, [(2, 3), (3, 2)]) == [8, 9]
        assert list(pool.imap(slow_identity, range(8))) == list(range(8))
        assert sorted(pool.imap_unordered(slow_identity, range(8))) == list(range(8))
        assert pool.apply(square, (7,)) == 49
        r = pool.map_async(square, [1, 2, 3])
        assert r.get(timeout=60) == [1, 4, 9] and r.ready() and r.successful()
        assert pool.starmap_async(pow, [(2, 2)]).get(timeout=60) == [4]
        assert len(set(pool.map(pid, range(8), chunksize=1))) == 2  # two actor processes
        assert os.getpid() not in pool.map(pid, range(2))


def test_pool_async_callbacks_timeout_and_initializer(cluster):
    got, errors = [], []
    done = threading.Event()
    with Pool(processes=1, initializer=set_value, initargs=("ready",)) as pool:
        assert pool.map(read_value, range(2)) == ["ready", "ready"]
        pool.apply_async(square, (4,), callback=lambda v: (got.append(v), done.set()))
        assert done.wait(60) and got == [16]
        done.clear()
        r = pool.map_async(fails_on_three, range(5), error_callback=lambda e: (errors.append(e),
                                                                                 done.set()))
        assert done.wait(60) and isinstance(errors[0], KeyError)
        assert not r.successful()
        slow = pool.apply_async(time.sleep, (2,))
        with pytest.raises(TimeoutError):
            slow.get(timeout=0.1)
        with pytest.raises(ValueError, match="not ready"):
            slow.successful()


def test_pool_errors_propagate_with_their_type(cluster):
    with Pool(processes=2) as pool:
        with pytest.raises(KeyError, match="no 3"):
            pool.map(fails_on_three, range(6))
        with pytest.raises(KeyError):
            list(pool.imap(fails_on_three, range(6)))
        with pytest.raises(ZeroDivisionError):
            pool.apply(divmod, (1, 0))
        assert pool.map(square, [3]) == [9]  # the pool still works


def test_pool_close_join_terminate_and_bad_arguments(cluster):
    pool = Pool(processes=2)
    r = pool.map_async(slow_identity, range(4))
    pool.close()
    with pytest.raises(ValueError, match="Pool not running"):
        pool.map(square, [1])
    pool.join()  # waits for the submitted work
    assert r.get(timeout=60) == [0, 1, 2, 3]
    pool2 = Pool(processes=1)
    with pytest.raises(ValueError, match="still running"):
        pool2.join()
    pending = pool2.apply_async(time.sleep, (30,))
    pool2.terminate()
    with pytest.raises(ember.exceptions.RayActorError):
        pending.get(timeout=60)
    with pytest.raises(ValueError, match="only 2 CPUs"):
        Pool(processes=3)
    with pytest.raises(ValueError, match="context"):
        Pool(processes=1, context=object())
    with Pool(processes=1, maxtasksperchild=1) as pool3:  # a new actor after each batch
        assert len(set(pool3.map(pid, range(3), chunksize=1))) == 3


def test_joblib_parallel_with_the_ray_backend(cluster):
    joblib = pytest.importorskip("joblib", reason="joblib is in the dev extra")
    from ember.util.joblib import register_ray

    register_ray()
    with joblib.parallel_backend("ray"):
        out = joblib.Parallel(n_jobs=2)(joblib.delayed(square)(i) for i in range(10))
        pids = joblib.Parallel(n_jobs=-1, batch_size=1)(joblib.delayed(pid)() for _ in range(6))
    assert out == [i * i for i in range(10)]
    assert os.getpid() not in pids
    with joblib.parallel_backend("ray"), pytest.raises(KeyError):
        joblib.Parallel(n_jobs=2)(joblib.delayed(fails_on_three)(i) for i in range(5))


def _scrape_all() -> str:
    from ember._private.doors import internal_kv

    text = []
    for key in internal_kv._internal_kv_list("worker/", namespace="metrics"):
        address = internal_kv._internal_kv_get(key, namespace="metrics").decode()
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as r:
            text.append(r.read().decode())
    return "\n".join(text)


def test_metrics_with_tags_on_the_prometheus_endpoint(cluster):
    from ember.util.metrics import Counter, Gauge, Histogram

    @ember.remote
    class Recorder:
        def __init__(self):
            self.c = Counter("app_requests", "Requests", tag_keys=("route",))
            self.c.set_default_tags({"route": "/a"})
            self.g = Gauge("app_queue", "Queue length", tag_keys=("q", "kind"))
            self.h = Histogram("app_latency_s", "Latency", boundaries=[0.1, 1.0],
                               tag_keys=("route",))

        def record(self):
            self.c.inc()
            self.c.inc(2.0, tags={"route": "/b"})
            self.g.set(7, tags={"q": "in", "kind": "x"})
            self.h.observe(0.5, tags={"route": "/a"})
            return True

    r = Recorder.remote()
    assert ember.get(r.record.remote(), timeout=60)
    text = _scrape_all()
    assert 'app_requests_total{route="/a"} 1.0' in text
    assert 'app_requests_total{route="/b"} 2.0' in text
    assert 'app_queue{kind="x",q="in"} 7.0' in text
    assert 'app_latency_s_bucket{le="1.0",route="/a"} 1.0' in text
    assert 'app_latency_s_bucket{le="0.1",route="/a"} 0.0' in text
    # The driver's metrics are exported too, from its own endpoint.
    Gauge("driver_gauge", tag_keys=()).set(3)
    assert "driver_gauge 3.0" in _scrape_all()
    ember.kill(r)


def test_metric_arguments_are_validated_as_ray_does(cluster):
    from ember.util.metrics import Counter, Gauge, Histogram

    with pytest.raises(ValueError, match="Empty name"):
        Counter("")
    with pytest.raises(TypeError, match="tuple"):
        Counter("c1", tag_keys=["a"])
    with pytest.raises(ValueError, match="boundaries"):
        Histogram("h1")
    with pytest.raises(ValueError, match="index 1"):
        Histogram("h2", boundaries=[1.0, -1.0])
    c = Counter("c2", tag_keys=("a", "b"))
    assert c.set_default_tags({"a": "1"}) is c
    with pytest.raises(ValueError, match="Missing value for tag key"):
        c.inc()
    with pytest.raises(ValueError, match=">0"):
        c.inc(0, tags={"b": "2"})
    with pytest.raises(ValueError, match="Unrecognized tag key"):
        c.set_default_tags({"zz": "1"})
    with pytest.raises(TypeError, match="str"):
        c.inc(1, tags={"b": 2})
    with pytest.warns(UserWarning, match="Invalid metric name"):
        bad = Gauge("1-bad")
    bad.set(1)  # discarded, as Ray does
    assert c.info == {"name": "c2", "description": "", "tag_keys": ("a", "b"),
                      "default_tags": {"a": "1"}}


def test_node_ip_inspect_serializability_and_named_actors(cluster):
    from ember.util import get_node_ip_address, inspect_serializability, list_named_actors

    assert get_node_ip_address() == ember.nodes()[0]["NodeManagerAddress"]
    ok, failures = inspect_serializability(square, print_file=io.StringIO())
    assert ok and failures == set()
    lock = threading.Lock()

    def uses_lock():
        with lock:
            return 1

    out = io.StringIO()
    ok, failures = inspect_serializability(uses_lock, name="uses_lock", print_file=out)
    assert not ok
    assert [f.name for f in failures] == ["lock"] and failures.pop().obj is lock
    assert "lock" in out.getvalue()

    @ember.remote
    class Named:
        def ping(self):
            return 1

    a = Named.options(name="util-named", namespace="other-ns").remote()
    ember.get(a.ping.remote(), timeout=60)
    assert {"name": "util-named", "namespace": "other-ns"} in list_named_actors(all_namespaces=True)
    assert "util-named" not in list_named_actors()
    ember.kill(a)


def test_accelerator_constants_match_rays_names():
    from ember.util import accelerators

    assert accelerators.NVIDIA_TESLA_V100 == "V100"
    assert accelerators.NVIDIA_A100 == "A100" and accelerators.NVIDIA_H100 == "H100"
    assert accelerators.AMD_INSTINCT_MI300x == "AMD-Instinct-MI300X-OAM"
    assert accelerators.GOOGLE_TPU_V4 == "TPU-V4"


def test_actor_unschedulable_error_for_hard_affinity_to_an_unknown_node(cluster):
    @ember.remote
    class Pinned:
        pass

    unknown = "ab" * 14
    with pytest.raises(ActorUnschedulableError, match="which is unknown"):
        Pinned.options(scheduling_strategy=NodeAffinitySchedulingStrategy(unknown, soft=False)).remote()


def test_pending_calls_limit_exceeded_at_max_pending_calls(cluster):
    from ember.exceptions import PendingCallsLimitExceeded

    @ember.remote(max_pending_calls=2, num_cpus=0)
    class Slow:
        def wait(self, s):
            time.sleep(s)
            return s

    a = Slow.remote()
    first = [a.wait.remote(0.5), a.wait.remote(0.5)]
    with pytest.raises(PendingCallsLimitExceeded, match="max_pending_calls=2"):
        a.wait.remote(0)
    assert ember.get(first, timeout=60) == [0.5, 0.5]
    deadline = time.monotonic() + 10
    while True:  # the count drops as the results arrive (a callback on the core's loop)
        try:
            ref = a.wait.remote(0)
            break
        except PendingCallsLimitExceeded:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    assert ember.get(ref, timeout=60) == 0
    with pytest.raises(ValueError, match="max_pending_calls"):
        Slow.options(max_pending_calls=0)
    ember.kill(a)
