"""`ember.cancel` on actor calls, as in Ray 2.60 (compatibility issue items 14 and 15).

A call that has not started — queued on the actor's worker behind a running call, waiting for its
arguments, or waiting for the actor to be created — never runs and `get` raises
TaskCancelledError, and the calls after it still run. A running call of an async actor is
cancelled: `asyncio.CancelledError` is raised inside its coroutine. A running call of a sync actor
is not interrupted (actors have state) but `get` raises TaskCancelledError (as in Ray 2.60).
`force=True` on an actor call is a ValueError.
"""
from __future__ import annotations

import asyncio
import time

import pytest

import ember as ray
from ember.exceptions import TaskCancelledError


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2)
    yield
    ray.shutdown()


@ray.remote(num_cpus=0)
class Recorder:
    def __init__(self, init_s=0.0):
        time.sleep(init_s)
        self.ran = []

    def slow(self, s):
        time.sleep(s)
        self.ran.append("slow")
        return "slow"

    def record(self, tag):
        self.ran.append(tag)
        return tag

    def log(self):
        return list(self.ran)


@ray.remote(num_cpus=0)
class AsyncRecorder:
    def __init__(self):
        self.ran = []
        self.cancelled = []

    async def wait(self, tag, s):
        self.ran.append(tag)
        try:
            await asyncio.sleep(s)
        except asyncio.CancelledError:
            self.cancelled.append(tag)
            raise
        return tag

    async def log(self):
        return list(self.ran), list(self.cancelled)


@ray.remote(num_cpus=0)
def sleep_then(value, s):
    time.sleep(s)
    return value


def _cancelled(ref):
    with pytest.raises(TaskCancelledError):
        ray.get(ref, timeout=60)


def test_a_call_queued_behind_a_running_one_never_runs(cluster):
    a = Recorder.remote()
    ray.get(a.log.remote(), timeout=60)
    running = a.slow.remote(2.0)
    queued = a.record.remote("queued")
    after = a.record.remote("after")
    time.sleep(0.5)  # both wait on the worker behind the running call
    ray.cancel(queued)
    _cancelled(queued)
    assert ray.get(running, timeout=60) == "slow"  # cancelling another call leaves it be
    assert ray.get(after, timeout=60) == "after"
    assert ray.get(a.log.remote(), timeout=60) == ["slow", "after"]


def test_a_running_sync_call_runs_to_its_end_and_get_says_cancelled(cluster):
    a = Recorder.remote()
    ray.get(a.log.remote(), timeout=60)
    running = a.slow.remote(1.5)
    time.sleep(0.5)
    ray.cancel(running)
    _cancelled(running)
    assert ray.get(a.log.remote(), timeout=60) == ["slow"]  # it was not interrupted


def test_a_call_waiting_for_its_argument_never_runs_and_later_calls_go_on(cluster):
    a = Recorder.remote()
    ray.get(a.log.remote(), timeout=60)
    waiting = a.record.remote(sleep_then.remote("late", 2.0))
    nxt = a.record.remote("next")
    ray.cancel(waiting)
    _cancelled(waiting)
    assert ray.get(nxt, timeout=60) == "next"
    time.sleep(2.5)  # the argument is ready by now: the cancelled call still does not run
    assert ray.get(a.log.remote(), timeout=60) == ["next"]


def test_a_call_waiting_for_the_actor_to_start_never_runs(cluster):
    a = Recorder.remote(init_s=2.0)
    early = a.record.remote("early")
    later = a.record.remote("later")
    ray.cancel(early)
    _cancelled(early)
    assert ray.get(later, timeout=60) == "later"
    assert ray.get(a.log.remote(), timeout=60) == ["later"]


def test_force_is_rejected_for_actor_calls(cluster):
    a = Recorder.remote()
    ref = a.slow.remote(0.5)
    with pytest.raises(ValueError, match="force=True is not supported for actor tasks"):
        ray.cancel(ref, force=True)
    assert ray.get(ref, timeout=60) == "slow"  # nothing happened to it


def test_a_running_async_call_is_cancelled_inside_its_coroutine(cluster):
    a = AsyncRecorder.remote()
    ref = a.wait.remote("long", 30)
    deadline = time.monotonic() + 30
    while ray.get(a.log.remote(), timeout=60)[0] != ["long"] and time.monotonic() < deadline:
        time.sleep(0.05)
    t0 = time.monotonic()
    ray.cancel(ref)
    _cancelled(ref)
    assert time.monotonic() - t0 < 10  # not after the 30 s sleep
    assert ray.get(a.log.remote(), timeout=60) == (["long"], ["long"])
    assert ray.get(a.wait.remote("again", 0), timeout=60) == "again"  # the actor goes on


def test_a_queued_async_call_never_runs(cluster):
    a = AsyncRecorder.options(max_concurrency=1).remote()
    running = a.wait.remote("first", 1.5)
    queued = a.wait.remote("second", 0)
    time.sleep(0.5)
    ray.cancel(queued)
    _cancelled(queued)
    assert ray.get(running, timeout=60) == "first"
    assert ray.get(a.log.remote(), timeout=60) == (["first"], [])
