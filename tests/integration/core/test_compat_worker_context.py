"""Ray 2.60's runtime context and worker environment where Ray programs read them (compatibility
issue 46, items 8 and 6): task and function names, ids and resources in a task, an actor's
constructor, its methods (threaded and async actors too) and the driver; OMP_NUM_THREADS and
CUDA_VISIBLE_DEVICES as set for tasks and actors; no numpy in a fresh worker."""
from __future__ import annotations

import os

import pytest

import ember as ray


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=4, num_gpus=1)  # a GPU in name only: nothing here touches CUDA
    yield
    ray.shutdown()


def snapshot():
    """What a Ray program reads from its runtime context, where it runs."""
    c = ray.get_runtime_context()
    return {"task_id": c.get_task_id(), "task_name": c.get_task_name(),
            "function": c.get_task_function_name(), "actor_id": c.get_actor_id(),
            "actor_name": c.get_actor_name(), "resources": c.get_assigned_resources(),
            "node_id": c.get_node_id(), "labels": c.get_node_labels(), "get": c.get(),
            "omp": os.environ.get("OMP_NUM_THREADS")}


@ray.remote
def task():
    return snapshot()


@ray.remote
class Actor:
    def __init__(self):
        self.at_init = snapshot()

    def init(self):
        return self.at_init

    def method(self):
        return snapshot()

    def reconstructed(self):
        return ray.get_runtime_context().was_current_actor_reconstructed


@ray.remote(max_concurrency=3)
class Threaded:
    def method(self):
        return snapshot()


@ray.remote
class Async:
    async def method(self):
        return snapshot()

    def sync_method(self):
        return snapshot()


def test_driver_context(cluster):
    c = ray.get_runtime_context()
    assert c.get_task_id() is None and c.get_task_name() is None
    assert c.get_task_function_name() is None and c.get_actor_id() is None
    assert c.get_actor_name() is None
    assert c.get_node_labels() == {"ray.io/node-id": c.get_node_id()}
    assert set(c.get()) == {"job_id", "node_id", "namespace"}
    with pytest.raises(AssertionError):
        c.get_assigned_resources()
    with pytest.raises(AssertionError):
        c.was_current_actor_reconstructed  # noqa: B018 (a property, as Ray's)


def test_task_context(cluster):
    s = ray.get(task.remote())
    node = ray.get_runtime_context().get_node_id()
    assert s["task_name"] == "task"
    assert s["function"] == f"{__name__}.task"
    assert s["task_id"] and s["actor_id"] is None and s["actor_name"] is None
    assert s["resources"] == {"CPU": 1.0} and s["node_id"] == node
    assert s["labels"] == {"ray.io/node-id": node}
    assert s["get"]["task_id"] == s["task_id"] and "actor_id" not in s["get"]
    other = ray.get(task.remote())
    assert other["task_id"] != s["task_id"]


def test_actor_constructor_and_method_context(cluster):
    a = Actor.options(name="ctx-actor").remote()
    init, meth = ray.get([a.init.remote(), a.method.remote()])
    aid = a._actor_id.hex()
    assert init["task_name"] == "ctx-actor:Actor.__init__"
    assert init["function"] == f"{__name__}.Actor.__init__"
    assert meth["task_name"] == "Actor.method"
    assert meth["function"] == f"{__name__}.Actor.method"
    assert init["actor_id"] == meth["actor_id"] == aid
    assert init["actor_name"] == meth["actor_name"] == "ctx-actor"
    assert init["task_id"] and meth["task_id"] and init["task_id"] != meth["task_id"]
    assert init["resources"] == meth["resources"] == {}  # an actor holds no CPU by default
    assert meth["get"]["actor_id"] == aid and meth["get"]["task_id"] == meth["task_id"]
    assert ray.get(a.reconstructed.remote()) is False
    unnamed = Actor.remote()
    assert ray.get(unnamed.init.remote())["task_name"] == "Actor.__init__"
    assert ray.get(unnamed.method.remote())["actor_name"] == ""


def test_context_in_threaded_and_async_actors(cluster):
    t = Threaded.options(num_cpus=2).remote()
    ids = set()
    for s in ray.get([t.method.remote() for _ in range(3)]):
        assert s["task_name"] == "Threaded.method" and s["resources"] == {"CPU": 2.0}
        ids.add(s["task_id"])
    assert len(ids) == 3 and None not in ids
    a = Async.remote()
    got = ray.get([a.method.remote(), a.method.remote(), a.sync_method.remote()])
    assert [s["task_name"] for s in got] == ["Async.method", "Async.method", "Async.sync_method"]
    assert len({s["task_id"] for s in got}) == 3 and None not in {s["task_id"] for s in got}
    assert all(s["actor_id"] == a._actor_id.hex() for s in got)


@ray.remote
def env_of(*names):
    return {n: os.environ.get(n) for n in names}


@ray.remote
class EnvActor:
    def env(self):
        return os.environ.get("OMP_NUM_THREADS")


def test_omp_num_threads_follows_num_cpus(cluster):
    # Ray: floor(num_cpus), at least 1; an actor without CPUs: 1; the driver: left alone.
    assert ray.get(env_of.options(num_cpus=2).remote("OMP_NUM_THREADS")) == {"OMP_NUM_THREADS": "2"}
    assert ray.get(env_of.options(num_cpus=0.5).remote("OMP_NUM_THREADS")) == {"OMP_NUM_THREADS": "1"}
    assert ray.get(env_of.options(num_cpus=0).remote("OMP_NUM_THREADS")) == {"OMP_NUM_THREADS": "1"}
    assert ray.get(env_of.remote("OMP_NUM_THREADS")) == {"OMP_NUM_THREADS": "1"}
    assert ray.get(EnvActor.remote().env.remote()) == "1"
    assert ray.get(EnvActor.options(num_cpus=3).remote().env.remote()) == "3"
    # the user's own setting wins
    user = {"env_vars": {"OMP_NUM_THREADS": "7"}}
    got = ray.get(env_of.options(num_cpus=2, runtime_env=user).remote("OMP_NUM_THREADS"))
    assert got == {"OMP_NUM_THREADS": "7"}


def test_noset_cuda_visible_devices_is_honoured(cluster):
    plain = ray.get(env_of.options(runtime_env={"env_vars": {"CUDA_VISIBLE_DEVICES": "5"}})
                    .remote("CUDA_VISIBLE_DEVICES"))
    assert plain == {"CUDA_VISIBLE_DEVICES": ""}  # no GPU asked for: none visible
    for name in ("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES",):
        env = {"env_vars": {"CUDA_VISIBLE_DEVICES": "5", name: "1"}}
        got = ray.get(env_of.options(runtime_env=env).remote("CUDA_VISIBLE_DEVICES"))
        assert got == {"CUDA_VISIBLE_DEVICES": "5"}, name


def test_a_fresh_worker_has_not_imported_numpy(cluster):
    @ray.remote
    def loaded():
        import sys

        return "numpy" in sys.modules

    fresh = {"env_vars": {"EMBER_TEST_FRESH_WORKER": "numpy"}}  # its own, new worker
    assert ray.get(loaded.options(runtime_env=fresh).remote()) is False
    # a worker forked from the raylet's preloaded template (no task here read an object)
    assert ray.get(loaded.remote()) is False

    @ray.remote
    def uses_numpy():
        import sys

        import numpy

        return int(numpy.arange(3).sum()), "numpy" in sys.modules

    assert ray.get(uses_numpy.remote()) == (3, True)


def test_gpu_and_cpu_tasks_do_not_share_workers(cluster):
    @ray.remote
    def pid():
        return os.getpid()

    # Each CPU task has a shape no worker ran before: the most recently idle worker (the one
    # that just ran the GPU task) would be the pick if kinds were not kept apart.
    for cpus in (3, 2.5, 1.5):
        gpu = ray.get(pid.options(num_gpus=1).remote())
        assert ray.get(pid.options(num_cpus=cpus).remote()) != gpu
        cpu = ray.get(pid.options(num_cpus=cpus + 0.25).remote())
        assert ray.get(pid.options(num_gpus=1, num_cpus=cpus).remote()) != cpu
