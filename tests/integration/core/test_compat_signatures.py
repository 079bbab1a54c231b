"""Signature checks at submission (compatibility issue item 4), as Ray 2.60: arguments that do
not bind to a remote function's, actor constructor's or actor method's signature raise TypeError
in the caller, before anything is submitted (no task runs, no actor is created); calls that bind
run as before, from the driver and from inside tasks (handles passed to tasks keep the check)."""
from __future__ import annotations

import pytest

import ember as ray


@ray.remote
def add(a, b=1, *, scale=1):
    return (a + b) * scale


@ray.remote
def variadic(*args, **kwargs):
    return len(args), sorted(kwargs)


@ray.remote
class Acc:
    def __init__(self, start):
        self.total = start

    def add(self, x, y=0):
        self.total += x + y
        return self.total

    @staticmethod
    def double(z):
        return 2 * z

    @classmethod
    def name(cls, suffix):
        return cls.__name__ + suffix


@ray.remote
class NoInit:
    def ping(self):
        return "pong"


@pytest.mark.parametrize("args,kwargs,message", [
    ((), {}, "missing a required argument: 'a'"),
    ((1, 2, 3), {}, "too many positional arguments"),
    ((1,), {"c": 2}, "unexpected keyword argument 'c'"),
    ((1,), {"a": 2}, "multiple values for argument 'a'"),
])
def test_a_task_call_that_does_not_bind_fails_in_the_caller(ray_start, args, kwargs, message):
    with pytest.raises(TypeError, match=message) as info:
        add.remote(*args, **kwargs)
    assert "add(" in str(info.value)


def test_calls_that_bind_still_run(ray_start):
    assert ray.get([add.remote(1), add.remote(1, 2), add.remote(a=1, b=2, scale=3),
                    add.options(name="renamed").remote(2, scale=2)], timeout=60) == [2, 3, 9, 6]
    assert ray.get(variadic.remote(1, 2, x=3), timeout=60) == (2, ["x"])
    assert ray.get(variadic.remote(), timeout=60) == (0, [])


def test_nothing_is_submitted_for_a_bad_call(ray_start, tmp_path):
    marker = tmp_path / "ran"

    @ray.remote
    def touch(path):
        open(path, "w").close()

    with pytest.raises(TypeError):
        touch.remote(str(marker), 1)  # first call: not even exported
    with pytest.raises(TypeError):
        touch.remote()
    assert ray.get(touch.remote(str(marker) + ".ok"), timeout=60) is None
    assert not marker.exists() and (tmp_path / "ran.ok").exists()


def test_actor_constructor_and_methods_are_checked(ray_start):
    with pytest.raises(TypeError, match="missing a required argument: 'start'"):
        Acc.remote()
    with pytest.raises(TypeError, match="too many positional arguments"):
        NoInit.remote(1)
    a = Acc.remote(10)
    with pytest.raises(TypeError, match="missing a required argument: 'x'"):
        a.add.remote()
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        a.add.remote(1, z=2)
    with pytest.raises(TypeError, match="missing a required argument: 'z'"):
        a.double.remote()
    with pytest.raises(TypeError, match="too many positional arguments"):
        a.name.remote("a", "b")
    # The failed calls never reached the actor: its total only saw the good ones.
    assert ray.get([a.add.remote(1), a.add.remote(1, y=2)], timeout=60) == [11, 14]
    assert ray.get([a.double.remote(4), a.name.remote("!")], timeout=60) == [8, "Acc!"]
    assert ray.get(NoInit.remote().ping.remote(), timeout=60) == "pong"


def test_handles_from_get_actor_check_calls(ray_start):
    owner = Acc.options(name="acc-by-name").remote(1)  # keeps the (non-detached) actor alive
    h = ray.get_actor("acc-by-name")
    with pytest.raises(TypeError, match="missing a required argument: 'x'"):
        h.add.remote()
    assert ray.get(h.add.remote(2), timeout=60) == 3
    ray.kill(owner)


def test_tasks_check_calls_too(ray_start):
    @ray.remote
    def bad_nested_call():
        try:
            add.remote()
        except TypeError as e:
            return f"TypeError: {e}"
        return "submitted"

    @ray.remote
    def bad_call_through_handle(acc):
        try:
            acc.add.remote(1, 2, 3)
        except TypeError as e:
            return f"TypeError: {e}"
        return "submitted"

    assert ray.get(bad_nested_call.remote(), timeout=60).startswith(
        "TypeError: missing a required argument: 'a'")
    acc = Acc.remote(0)
    assert ray.get(bad_call_through_handle.remote(acc), timeout=60).startswith(
        "TypeError: too many positional arguments")
