"""Cancelling a task fails the tasks that depend on its result (compatibility issue item 13):
their `get` raises TaskCancelledError at once, even when every CPU is busy (they never need a
worker to find out), through chains of dependents and refs nested in arguments, and the
cancelled task's message survives the trip unchanged. And (issue 46 item 3, issue 40 item 8) a
task blocked in get is cancelled at once, with what it submitted when recursive=True."""
from __future__ import annotations

import time

import pytest

import ember as ray
from ember import exceptions as ex


@ray.remote
def spin(seconds):
    end = time.time() + seconds
    while time.time() < end:
        time.sleep(0.02)
    return "done"


@ray.remote
def dep(x):
    return x


@ray.remote
def get_nested(refs):
    return ray.get(refs[0])


def _fails_fast(ref, task_id_hex):
    t = time.monotonic()
    with pytest.raises(ex.TaskCancelledError) as info:
        ray.get(ref, timeout=15)
    assert time.monotonic() - t < 10
    assert str(info.value).count("was cancelled") == 1 and task_id_hex in str(info.value)


def test_dependents_of_a_queued_task_fail_while_every_cpu_is_busy(ray_start):
    busy = [spin.remote(60) for _ in range(2)]  # the 2-CPU node is full
    time.sleep(1.0)
    up = spin.remote(60)  # queued behind them
    d1 = dep.remote(up)
    d2 = dep.remote(d1)
    n = dep.remote([up])  # a nested ref is not a dependency: this one runs when a CPU frees
    ray.cancel(up)
    for r in (up, d1, d2):
        _fails_fast(r, up.task_id().hex())
    for b in busy:
        ray.cancel(b, force=True)
    assert ray.get(n, timeout=60)[0] == up  # it ran, holding the cancelled ref
    assert ray.get(spin.remote(0), timeout=60) == "done"  # the node works on


def test_dependents_of_a_running_task_fail(ray_start):
    up = spin.remote(60)
    time.sleep(1.0)  # running
    d1, d2 = dep.remote(up), get_nested.remote([up])
    d3 = dep.remote(d1)
    ray.cancel(up)
    for r in (up, d1, d3):
        _fails_fast(r, up.task_id().hex())
    with pytest.raises(ex.TaskCancelledError):  # raised by get() inside the task
        ray.get(d2, timeout=15)


def test_a_dependent_submitted_after_the_cancel_fails_too(ray_start):
    up = spin.remote(60)
    ray.cancel(up)
    with pytest.raises(ex.TaskCancelledError):
        ray.get(up, timeout=15)
    _fails_fast(dep.remote(up), up.task_id().hex())


def test_a_cancel_that_reaches_the_worker_before_its_task_starts_is_not_lost(ray_start):
    # Cancels at several moments after submission: queued, pushed but not started, running.
    for i in range(12):
        up = spin.remote(30)
        time.sleep(0.005 * (i % 6))
        ray.cancel(up)
        with pytest.raises(ex.TaskCancelledError):
            ray.get(up, timeout=20)


# --- A task blocked in get is cancelled; recursive=True cancels what it submitted (issue 46 item 3,
# issue 40 item 8). Ray: a non-force cancel interrupts the running task (KeyboardInterrupt in it,
# TaskCancelledError at its get) even while it waits in get, and recursive=True (the default) also
# cancels the tasks and actor calls it submitted; recursive=False leaves them running.


@ray.remote
class Slow:
    def work(self, seconds):
        time.sleep(seconds)
        return "worked"


@ray.remote
def waits_on_actor(actor, started):
    open(started, "w").close()
    return ray.get(actor.work.remote(30))


@ray.remote
def ticker(path, seconds):
    """Appends a tick every 50 ms for `seconds`, then writes "done": its file shows whether it
    still runs."""
    end = time.time() + seconds
    while time.time() < end:
        with open(path, "a") as f:
            f.write(".")
        time.sleep(0.05)
    with open(path, "a") as f:
        f.write("done")
    return "ticked"


@ray.remote
def waits_on_child(path, seconds):
    return ray.get(ticker.remote(path, seconds))


def _wait_for(pred, timeout=30.0):
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(0.05)


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def test_a_task_blocked_in_get_on_an_actor_call_is_cancelled(ray_start, tmp_path):
    a = Slow.remote()
    started = str(tmp_path / "started")
    ref = waits_on_actor.remote(a, started)
    d = dep.remote(ref)
    _wait_for(lambda: _read(started) == "" and (tmp_path / "started").exists())
    time.sleep(0.5)  # blocked in get on the actor's call now
    ray.cancel(ref)
    for r in (ref, d):
        _fails_fast(r, ref.task_id().hex())
    ray.kill(a)


def test_recursive_cancel_stops_the_child_of_a_task_blocked_in_get(ray_start, tmp_path):
    path = str(tmp_path / "ticks")
    ref = waits_on_child.remote(path, 20)
    _wait_for(lambda: len(_read(path)) > 5)  # the child runs; the parent waits in get
    ray.cancel(ref)  # recursive=True is the default
    _fails_fast(ref, ref.task_id().hex())
    time.sleep(1.0)  # the child's cancel reaches it
    before = _read(path)
    time.sleep(1.5)
    after = _read(path)
    assert after == before and "done" not in after  # the child stopped


def test_non_recursive_cancel_leaves_the_child_running(ray_start, tmp_path):
    path = str(tmp_path / "ticks")
    ref = waits_on_child.remote(path, 14)
    _wait_for(lambda: len(_read(path)) > 5)
    ray.cancel(ref, recursive=False)
    _fails_fast(ref, ref.task_id().hex())  # long before its child ends
    assert "done" not in _read(path)
    _wait_for(lambda: _read(path).endswith("done"), timeout=30)  # the child ran to its end


@ray.remote
class Parent:
    async def run(self, path, seconds):
        return await ticker.remote(path, seconds)


def test_recursive_cancel_of_an_async_actor_call_stops_its_child(ray_start, tmp_path):
    path = str(tmp_path / "ticks")
    a = Parent.remote()
    ref = a.run.remote(path, 20)
    _wait_for(lambda: len(_read(path)) > 5)
    ray.cancel(ref)
    _fails_fast(ref, ref.task_id().hex())
    time.sleep(1.0)
    before = _read(path)
    time.sleep(1.5)
    assert _read(path) == before and "done" not in before  # the call's child stopped
    ray.kill(a)

