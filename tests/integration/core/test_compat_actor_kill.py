"""`ember.kill(actor)` as in Ray 2.60 (compatibility issue item 10): the calls running, queued or
made later — by the killer or by any other holder of a handle — raise ActorDiedError (a
RayActorError) naming the cause."""
from __future__ import annotations

import time

import pytest

import ember as ray
from ember.exceptions import ActorDiedError, RayActorError


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2)
    yield
    ray.shutdown()


@ray.remote(num_cpus=0)
class Worker:
    def __init__(self, init_s=0.0):
        time.sleep(init_s)
        self.ran = []

    def slow(self, s):
        time.sleep(s)
        self.ran.append("slow")
        return "slow"

    def fast(self, tag=None):
        self.ran.append(tag)
        return tag

    def ready(self):
        return True


@ray.remote(num_cpus=0)
def sleep_then(value, s):
    time.sleep(s)
    return value


def _died_by_kill(ref):
    with pytest.raises(ActorDiedError) as info:
        ray.get(ref, timeout=60)
    assert isinstance(info.value, RayActorError)
    assert "killed by ember.kill" in str(info.value), str(info.value)


def test_running_queued_and_later_calls_raise_actor_died(cluster):
    a = Worker.remote()
    assert ray.get(a.ready.remote(), timeout=60)
    running = a.slow.remote(30)
    queued = [a.fast.remote(i) for i in range(3)]
    waiting_on_arg = a.fast.remote(sleep_then.remote("late", 1.0))
    time.sleep(0.5)  # the slow call is running, the others wait behind it on the worker
    ray.kill(a)
    for ref in [running, *queued, waiting_on_arg]:
        _died_by_kill(ref)
    _died_by_kill(a.fast.remote("after"))


def test_calls_queued_before_the_actor_started_raise_actor_died(cluster):
    a = Worker.remote(init_s=2.0)
    refs = [a.fast.remote(i) for i in range(3)]
    ray.kill(a)
    for ref in refs:
        _died_by_kill(ref)


def test_other_holders_of_the_handle_see_the_cause(cluster):
    @ray.remote(num_cpus=0)
    def call_after_kill(handle):
        try:
            ray.get(handle.fast.remote("from a task"), timeout=60)
        except ActorDiedError as e:
            return f"ActorDiedError: {e}"
        return "ran"

    a = Worker.remote()
    assert ray.get(a.ready.remote(), timeout=60)
    ray.kill(a)
    out = ray.get(call_after_kill.remote(a), timeout=60)
    assert out.startswith("ActorDiedError") and "killed by ember.kill" in out, out


def test_kill_rejects_what_is_not_an_actor(cluster):
    with pytest.raises(ValueError, match="only supports actors"):
        ray.kill(sleep_then.remote(1, 0))
