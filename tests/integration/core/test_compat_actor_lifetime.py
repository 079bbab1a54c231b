"""Actor lifetime by handle count, as in Ray 2.60 (compatibility issue item 11): a non-detached
actor, named or not, is destroyed once no handle to it is left — the creator's, those passed to
tasks and actors (borrowed, counted like object refs), those got by name — which frees its
resources and its name; calls in flight keep it alive until they are done; a detached actor stays.
The cluster has one CPU, so an actor holding it blocks the next one until it is destroyed."""
from __future__ import annotations

import gc
import time

import pytest

import ember as ray


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=1, namespace="lifetime")
    yield
    ray.shutdown()


@ray.remote(num_cpus=1)
class Holder:
    def ping(self):
        return "pong"

    def pid(self):
        import os

        return os.getpid()


def _starts(timeout: float) -> bool:
    """A new num_cpus=1 actor starts within timeout (the CPU is free); it is destroyed after."""
    h = Holder.remote()
    ready, _ = ray.wait([h.ping.remote()], timeout=timeout)
    ok = bool(ready)
    del h
    gc.collect()
    return ok


def _gone(name: str, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ray.get_actor(name)
        except ValueError:
            return True
        time.sleep(0.05)
    return False


def test_deleting_the_last_handle_frees_the_actor_cpu(cluster):
    a = Holder.remote()
    assert ray.get(a.ping.remote(), timeout=60) == "pong"
    assert not _starts(timeout=1.5)  # the CPU is held while the handle lives
    del a
    gc.collect()
    assert _starts(timeout=60)


def test_a_handle_passed_to_a_task_keeps_the_actor_alive_while_the_task_holds_it(cluster):
    @ray.remote(num_cpus=0)
    def use_later(handles, wait_s):
        time.sleep(wait_s)  # the driver drops its handle meanwhile
        return ray.get(handles[0].ping.remote(), timeout=60)

    a = Holder.remote()
    assert ray.get(a.ping.remote(), timeout=60) == "pong"
    ref = use_later.remote([a], 2.0)  # nested in a list: borrowed by the task
    del a
    gc.collect()
    assert ray.get(ref, timeout=60) == "pong"
    del ref
    assert _starts(timeout=60)  # the task let go: the actor went


def test_a_handle_kept_by_another_actor_keeps_it_alive(cluster):
    @ray.remote(num_cpus=0)
    class Keeper:
        def keep(self, handles):
            self.h = handles[0]

        def call(self):
            return ray.get(self.h.ping.remote(), timeout=60)

        def drop(self):
            del self.h
            gc.collect()

    a = Holder.remote()
    k = Keeper.remote()
    ray.get(k.keep.remote([a]), timeout=60)
    del a
    gc.collect()
    time.sleep(1.0)  # past the borrower protocol's removal delay
    assert ray.get(k.call.remote(), timeout=60) == "pong"
    ray.get(k.drop.remote(), timeout=60)
    assert _starts(timeout=60)


def test_an_actor_made_in_a_task_lives_while_the_driver_holds_the_returned_handle(cluster):
    @ray.remote(num_cpus=0)
    def make():
        return Holder.remote()  # owned by the task's worker, borrowed by the driver

    h = ray.get(make.remote(), timeout=60)
    time.sleep(1.0)  # the task's own handle is gone by now
    assert ray.get(h.ping.remote(), timeout=60) == "pong"
    del h
    gc.collect()
    assert _starts(timeout=60)


def test_a_named_actor_goes_with_its_last_handle_and_its_name_is_free_again(cluster):
    a = Holder.options(name="solo").remote()
    assert ray.get(a.ping.remote(), timeout=60) == "pong"
    b = ray.get_actor("solo")  # a second handle, by name
    del a
    gc.collect()
    time.sleep(1.0)
    assert ray.get(b.ping.remote(), timeout=60) == "pong"  # b still holds it
    del b
    gc.collect()
    assert _gone("solo")
    assert _starts(timeout=60)
    c = Holder.options(name="solo").remote()  # the name can be taken again
    assert ray.get(c.ping.remote(), timeout=60) == "pong"
    del c
    gc.collect()
    assert _gone("solo")


def test_calls_in_flight_finish_before_an_unreferenced_actor_goes(cluster):
    @ray.remote(num_cpus=1)
    class Slow:
        def work(self, s):
            time.sleep(s)
            return "done"

    ref = Slow.remote().work.remote(1.0)  # the handle is dropped at once
    assert ray.get(ref, timeout=60) == "done"
    del ref
    assert _starts(timeout=60)


def test_a_detached_actor_stays_without_handles(cluster):
    a = Holder.options(name="stays", lifetime="detached", num_cpus=0).remote()
    assert ray.get(a.ping.remote(), timeout=60) == "pong"
    del a
    gc.collect()
    time.sleep(1.0)
    b = ray.get_actor("stays")
    assert ray.get(b.ping.remote(), timeout=60) == "pong"
    ray.kill(b)
