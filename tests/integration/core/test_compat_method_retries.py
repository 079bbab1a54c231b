"""Per-method `max_task_retries` and `retry_exceptions` of actor calls, as Ray 2.60 has them
(compatibility issue 46, item 2): `@ember.method(...)` and `.options(...)` on a method; an
application error is retried only with `retry_exceptions` (an allowlist: only its classes), up
to the call's retries; actor death is retried with the method's `max_task_retries`."""
from __future__ import annotations

import os

import pytest

import ember as ray


class Flaky(Exception):
    pass


class Other(Exception):
    pass


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2)
    yield
    ray.shutdown()


@ray.remote(max_restarts=-1)
class Counter:
    def __init__(self):
        self.calls = 0

    def count(self):
        return self.calls

    @ray.method(max_task_retries=2, retry_exceptions=True)
    def fail_twice(self):
        self.calls += 1
        if self.calls <= 2:
            raise Flaky(f"call {self.calls}")
        return self.calls

    @ray.method(max_task_retries=5, retry_exceptions=[Flaky])
    def fail_other(self):
        self.calls += 1
        raise Other("not allowlisted")

    def plain(self, fail_until):
        self.calls += 1
        if self.calls < fail_until:
            raise Flaky(f"call {self.calls}")
        return self.calls

    @ray.method(max_task_retries=1)
    def die_once(self, marker):
        if not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)
        return "survived"

    def die_always(self, marker):
        if not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)
        return "survived"


def test_method_decorator_retries_application_errors(cluster):
    c = Counter.remote()
    assert ray.get(c.fail_twice.remote(), timeout=60) == 3


def test_allowlist_limits_what_is_retried(cluster):
    c = Counter.remote()
    with pytest.raises(Other):
        ray.get(c.fail_other.remote(), timeout=60)
    assert ray.get(c.count.remote()) == 1  # not retried


def test_options_on_a_method(cluster):
    c = Counter.remote()
    with pytest.raises(Flaky):  # no retry_exceptions: the first error is the answer
        ray.get(c.plain.remote(3), timeout=60)
    c = Counter.remote()
    ref = c.plain.options(max_task_retries=1, retry_exceptions=True).remote(3)
    with pytest.raises(Flaky):  # one retry is not enough for three tries
        ray.get(ref, timeout=60)
    c = Counter.remote()
    assert ray.get(c.plain.options(max_task_retries=2, retry_exceptions=[Flaky]).remote(3),
                   timeout=60) == 3
    with pytest.raises(ValueError, match="max_task_retries"):
        c.plain.options(max_task_retries=-2)
    with pytest.raises(TypeError, match="retry_exceptions"):
        c.plain.options(retry_exceptions="yes")


def test_method_max_task_retries_on_actor_death(cluster, tmp_path):
    c = Counter.remote()  # the actor's own max_task_retries is 0
    assert ray.get(c.die_once.remote(str(tmp_path / "a")), timeout=60) == "survived"
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(c.die_always.remote(str(tmp_path / "b")), timeout=60)
