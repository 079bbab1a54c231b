"""Where an async actor's methods run (executor.core_loop_methods): the methods an actor class
of Ember's own names in `__ember_core_loop_methods__` run on the worker's core loop
(`ember-core`); everything else, and everything of a user's subclass, on the actor's own loop
(`ember-actor-loop`), so a user's `async def` that blocks never stalls the core loop. Real
worker processes on an embedded cluster."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

import ember
from ember.exceptions import TaskCancelledError


class _Marked:
    """Stands for Ember's own actor classes (Serve's replica): `fast`, `sleep` and `events`
    are declared safe on the core loop; `where` and `block` are not."""

    __ember_core_loop_methods__ = frozenset({"fast", "sleep", "events", "plain"})

    def __init__(self) -> None:
        self.cancelled = 0

    async def fast(self) -> str:
        return threading.current_thread().name

    def plain(self) -> str:
        return threading.current_thread().name

    async def where(self) -> str:
        return threading.current_thread().name

    async def block(self, seconds: float) -> str:
        time.sleep(seconds)  # a user's blocking call: stalls its own loop only
        return threading.current_thread().name

    async def sleep(self, seconds: float) -> str:
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return "slept"

    async def events(self) -> int:
        return self.cancelled


Marked = ember.remote(_Marked)


@ember.remote
class UserSubclass(_Marked):
    """A user's subclass of a marked class: it inherits the attribute, not the privilege."""

    async def fast(self) -> str:
        return threading.current_thread().name


@ember.remote
class Forged:
    """A user class whose marker is not a frozenset of names: ignored."""

    __ember_core_loop_methods__ = ["fast"]

    async def fast(self) -> str:
        return threading.current_thread().name


def test_marked_methods_run_on_the_core_loop(ray_start):
    a = Marked.remote()
    assert ember.get(a.fast.remote(), timeout=60) == "ember-core"
    assert ember.get(a.plain.remote(), timeout=60) == "ember-core"
    assert ember.get(a.where.remote(), timeout=60) == "ember-actor-loop"


def test_user_code_never_gets_the_core_loop(ray_start):
    assert ember.get(UserSubclass.remote().fast.remote(), timeout=60) == "ember-actor-loop"
    assert ember.get(UserSubclass.remote().plain.remote(), timeout=60) == "ember-actor-loop"
    assert ember.get(Forged.remote().fast.remote(), timeout=60) == "ember-actor-loop"


def test_a_blocking_user_method_stalls_no_core_loop_call(ray_start):
    a = Marked.remote()
    ember.get(a.fast.remote(), timeout=60)
    blocked = a.block.remote(4.0)
    time.sleep(0.3)  # the block has started on the actor loop
    t0 = time.monotonic()
    for _ in range(10):
        assert ember.get(a.fast.remote(), timeout=60) == "ember-core"
    took = time.monotonic() - t0
    # the fast calls were answered while the actor loop was still blocked
    assert not ember.wait([blocked], timeout=0)[0], "the blocking call ended before the fast ones"
    assert took < 3.0, f"10 core-loop calls took {took:.2f} s behind a blocked actor loop"
    assert ember.get(blocked, timeout=60) == "ember-actor-loop"


def test_a_core_loop_call_is_cancelled(ray_start):
    a = Marked.remote()
    ref = a.sleep.remote(30)
    time.sleep(0.5)
    ember.cancel(ref)
    with pytest.raises(TaskCancelledError):
        ember.get(ref, timeout=30)
    assert ember.get(a.events.remote(), timeout=30) == 1  # its coroutine saw the cancel
    assert ember.get(a.sleep.remote(0.01), timeout=30) == "slept"  # the actor keeps serving
