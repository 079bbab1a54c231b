"""Ray 2.60 behaviours of the core API that Ray programs rely on (compatibility issue items 1, 2,
5, 6 and 8): the generator type at the top level, the innermost user exception through nested
tasks, get() argument checks, whole-number node resources, the runtime context in workers."""
from __future__ import annotations

import pytest

import ember
import ember as ray


class DeepError(Exception):
    pass


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, namespace="compat-ns")
    yield
    ray.shutdown()


@ray.remote
def inner():
    raise DeepError("deep down")


@ray.remote
def middle():
    return ray.get(inner.remote())


@ray.remote
def outer():
    return ray.get(middle.remote())


def test_object_ref_generator_is_exported_and_returned(cluster):
    @ray.remote
    def gen(n):
        yield from range(n)

    @ray.remote
    class Streamer:
        def items(self, n):
            yield from range(n)

    g = gen.remote(3)
    assert isinstance(g, ray.ObjectRefGenerator)
    assert [ray.get(r) for r in g] == [0, 1, 2]
    s = gen.options(num_returns="streaming").remote(2)
    assert isinstance(s, ray.ObjectRefGenerator)
    a = Streamer.remote()
    assert isinstance(a.items.options(num_returns="streaming").remote(2), ray.ObjectRefGenerator)


def test_nested_failure_reaches_the_driver_as_the_innermost_user_exception(cluster):
    with pytest.raises(DeepError) as info:
        ray.get(outer.remote(), timeout=60)
    err = info.value
    assert isinstance(err, ray.exceptions.RayTaskError) and isinstance(err, DeepError)
    assert type(err.cause) is DeepError and str(err.cause) == "deep down"
    text = str(err)
    assert "inner" in text and "outer" in text  # every task on the way is named


def test_get_takes_a_ref_or_a_list_of_refs_only(cluster):
    ref = ray.put(1)
    for bad in (1, "ref", (ref,), {ref}):
        with pytest.raises(ValueError, match="ObjectRef"):
            ray.get(bad)
    with pytest.raises(ValueError, match="ObjectRefs"):
        ray.get([ref, 2])
    assert ray.get([ref]) == [1]  # the cluster carries on


def test_node_resources_must_be_whole_numbers(cluster):
    # checked before anything starts (the running cluster is not touched)
    from ember._private.worker import _default_resources

    for kwargs, named in (({"num_cpus": 1.5}, "num_cpus"), ({"num_gpus": 0.5}, "num_gpus"),
                          ({"resources": {"disk": 2.5}}, "disk")):
        with pytest.raises(ValueError, match=named):
            _default_resources(kwargs.get("num_cpus", 2), kwargs.get("num_gpus", 0),
                               kwargs.get("resources"), None)


def test_fractional_num_cpus_is_refused_by_init(tmp_path):
    import subprocess
    import sys

    code = ("import ember\ntry:\n    ember.init(num_cpus=1.5)\nexcept ValueError as e:\n"
            "    print('REFUSED', e)\nprint('RUNNING', ember.is_initialized())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert "REFUSED num_cpus=1.5" in out and "RUNNING False" in out


def test_runtime_context_inside_tasks_and_actors(cluster):
    driver = ray.get_runtime_context()

    @ray.remote(num_cpus=1)
    def where():
        c = ray.get_runtime_context()
        return (c.get_job_id(), c.get_task_id(), c.get_actor_id(), c.get_node_id(), c.get_namespace(),
                c.get_assigned_resources())

    @ray.remote(num_cpus=0)
    class Who:
        def ctx(self):
            c = ray.get_runtime_context()
            return c.get_job_id(), c.get_actor_id(), c.get_namespace()

    job, task, actor, node, ns, res = ray.get(where.remote())
    assert job == driver.get_job_id() and job  # the driver's job, not empty
    assert task and actor is None and node == driver.get_node_id() and ns == "compat-ns"
    assert res == {"CPU": 1.0}
    w = Who.remote()
    a_job, a_id, a_ns = ray.get(w.ctx.remote())
    assert a_job == driver.get_job_id() and a_id == w._actor_id.hex() and a_ns == "compat-ns"
    assert ember.get(ember.remote(lambda: 7).remote()) == 7


@ray.remote
class Limits:
    LIMIT = 3

    @classmethod
    def describe(cls):
        return f"{cls.__name__} up to {cls.LIMIT}"

    @staticmethod
    def clamp(v):
        return min(v, Limits.LIMIT)

    def read_through_the_actor_class(self, v):
        # Inside the actor the module-level name is the actor class, as in Ray.
        return [Limits.LIMIT, Limits.describe(), Limits.clamp(v)]


def test_the_actor_class_carries_the_user_class_attributes(cluster):
    """Ray's ActorClass inherits the user's class: constants, classmethods and staticmethods
    read through it, in the driver and inside the actor."""
    assert Limits.LIMIT == 3 and Limits.describe() == "Limits up to 3" and Limits.clamp(9) == 3
    a = Limits.remote()
    assert ray.get(a.read_through_the_actor_class.remote(7), timeout=30) == [3, "Limits up to 3", 3]
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        Limits.missing  # noqa: B018
    ray.kill(a)


def test_a_job_config_object_as_rays_module_builds_it():
    """`from ray.job_config import JobConfig`: runtime_env and ray_namespace apply; another set
    field is refused by name, and nothing starts."""
    import subprocess
    import sys

    code = ("import ember\nfrom ember.job_config import JobConfig\n"
            "try:\n    ember.init(num_cpus=1, job_config=JobConfig(metadata={'team': 'a'}))\n"
            "except ValueError as e:\n    print('REFUSED', e)\n"
            "print('RUNNING', ember.is_initialized())\n"
            "ember.init(num_cpus=1, job_config=JobConfig(runtime_env={'env_vars': {'JC': 'yes'}}, ray_namespace='jc'))\n"
            "@ember.remote\ndef env():\n    import os\n    return os.environ.get('JC')\n"
            "print('ENV', ember.get(env.remote()), ember.get_runtime_context().namespace)\n"
            "from ember.runtime_context import RuntimeContext\n"
            "print('CTX', isinstance(ember.get_runtime_context(), RuntimeContext))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert "REFUSED job_config ['metadata'] not implemented by Ember" in out and "RUNNING False" in out, out
    assert "ENV yes jc" in out and "CTX True" in out, out
