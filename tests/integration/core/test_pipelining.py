"""Tasks pipelined onto leased workers (several in flight per worker) stay deadlock-free: a task
that blocks in get() on a task queued behind it on the same worker gets that task run elsewhere
(the worker gives back what it has not started), and an idle worker takes over a backlog.

Only functions known to be short are pipelined (task_queue.py): each test runs its functions
once quickly first (`warm`) so that their estimates are known, then submits back to back; the
tasks are then really pushed behind each other on the one worker, which the deadlock tests need
(without give-back and stealing, the first test times out). Run with the defaults and with an
explicit budget of 10 s (sleeping tasks still short: pipelined whatever the machine's load)."""
from __future__ import annotations

import os
import time

import pytest

import ember

SETTINGS = {
    # Explicit: sleeping tasks still count as short, so they are surely pushed behind each other.
    "explicit": {"EMBER_MAX_TASKS_IN_FLIGHT_PER_WORKER": "4", "EMBER_PIPELINE_BUDGET_S": "10"},
    "default": {},  # 16 in flight, 5 ms budget: warmed functions submitted back to back
}
NAMES = ("EMBER_MAX_TASKS_IN_FLIGHT_PER_WORKER", "EMBER_PIPELINE_BUDGET_S")


@pytest.fixture(scope="module", params=sorted(SETTINGS))
def one_cpu_pipelined(request):
    old = {k: os.environ.pop(k, None) for k in NAMES}
    os.environ.update(SETTINGS[request.param])
    ember.init(num_cpus=1)
    try:
        yield
    finally:
        ember.shutdown()
        for k, v in old.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v


def warm(fn, *args):
    """Runs fn quickly a few times so that the owner knows its tasks are short (its first run on
    a worker also loads it: that one can take longer than the budget)."""
    for _ in range(20):
        ember.get(fn.remote(*args), timeout=60)


@ember.remote
class Holder:
    def __init__(self):
        self.refs = None

    def set(self, refs):
        self.refs = refs

    def get(self):
        return self.refs


def test_task_blocked_on_a_task_queued_behind_it_does_not_hang(one_cpu_pipelined):
    """A and then B go to the only worker (one CPU, up to 4 in flight): A waits for B, which
    was queued behind A there. Without give-back this waits forever; the get is bounded."""
    holder = Holder.remote()
    ember.get(holder.get.remote(), timeout=60)  # the actor is up before the tasks go out

    @ember.remote
    def b():
        return os.getpid()

    @ember.remote
    def a(holder, warming=False):
        if warming:
            return None
        time.sleep(0.5)  # B has been pushed behind this task by now
        refs = None
        deadline = time.monotonic() + 30
        while refs is None and time.monotonic() < deadline:
            refs = ember.get(holder.get.remote())
            time.sleep(0.05)
        return os.getpid(), ember.get(refs[0])

    warm(a, None, True)
    warm(b)
    ra = a.remote(holder)
    rb = b.remote()
    holder.set.remote([rb])
    pid_a, pid_b = ember.get(ra, timeout=60)
    assert pid_a != pid_b  # B ran on another worker while A's lent its CPU
    assert ember.get(rb, timeout=10) == pid_b


def test_many_tasks_pipelined_all_complete_in_order_of_results(one_cpu_pipelined):
    @ember.remote
    def square(i):
        return i * i

    assert ember.get([square.remote(i) for i in range(300)], timeout=60) == [
        i * i for i in range(300)]


def test_nested_gets_with_pipelining(one_cpu_pipelined):
    @ember.remote
    def leaf(i):
        return i + 1

    @ember.remote
    def parent(n):
        return sum(ember.get([leaf.remote(i) for i in range(n)]))

    warm(parent, 0)
    # Parents queued behind each other on one worker, each blocking on children.
    assert ember.get([parent.remote(3) for _ in range(6)], timeout=90) == [6] * 6


def test_cancel_of_a_task_queued_behind_a_running_one(one_cpu_pipelined):
    @ember.remote
    def slow(t):
        time.sleep(t)
        return "slow"

    @ember.remote
    def quick():
        return "quick"

    warm(slow, 0)
    warm(quick)
    r1 = slow.remote(1.0)
    r2 = quick.remote()
    time.sleep(0.3)  # both pushed to the only worker; r2 has not started
    ember.cancel(r2)
    with pytest.raises(ember.exceptions.TaskCancelledError):
        ember.get(r2, timeout=30)
    assert ember.get(r1, timeout=30) == "slow"
