"""retry_exceptions as Ray 2.60 has it (compatibility issue item 3): a list of exception classes
retries only errors of those classes (subclasses included) up to max_retries; any other error
fails the task at once; bad values fail at the call site. Attempts are counted in a file."""
from __future__ import annotations

import os

import pytest

import ember as ray


class Transient(ConnectionError):
    pass


def _attempt(path: str) -> int:
    """Counts this attempt in the file at path; returns how many ran before it."""
    n = _attempts(path) if os.path.exists(path) else 0
    with open(path, "w") as f:
        f.write(str(n + 1))
    return n


def _attempts(path: str) -> int:
    with open(path) as f:
        return int(f.read())


@ray.remote(max_retries=2, retry_exceptions=[ConnectionError])
def always_fails(path: str, kind: str) -> None:
    _attempt(path)
    raise {"listed": ConnectionError, "subclass": Transient, "other": ValueError}[kind](kind)


def test_a_listed_class_is_retried_up_to_max_retries(ray_start, tmp_path):
    for kind in ("listed", "subclass"):
        path = str(tmp_path / kind)
        with pytest.raises(ConnectionError, match=kind):
            ray.get(always_fails.remote(path, kind), timeout=60)
        assert _attempts(path) == 3, kind  # the first run and max_retries=2 retries


def test_an_unlisted_class_fails_at_once(ray_start, tmp_path):
    path = str(tmp_path / "other")
    with pytest.raises(ValueError, match="other"):
        ray.get(always_fails.remote(path, "other"), timeout=60)
    assert _attempts(path) == 1


def test_a_listed_error_then_success(ray_start, tmp_path):
    @ray.remote
    def flaky(path):
        if _attempt(path) < 2:
            raise Transient("not yet")
        return "ok"

    path = str(tmp_path / "n")
    f = flaky.options(max_retries=3, retry_exceptions=(OSError, KeyError))
    assert ray.get(f.remote(path), timeout=60) == "ok"
    assert _attempts(path) == 3


def test_a_nested_failure_is_classified_by_its_innermost_exception(ray_start, tmp_path):
    @ray.remote(max_retries=0)
    def inner():
        raise Transient("deep")

    @ray.remote(max_retries=1, retry_exceptions=[ConnectionError])
    def outer(path):
        _attempt(path)
        return ray.get(inner.remote())

    path = str(tmp_path / "outer")
    with pytest.raises(Transient):
        ray.get(outer.remote(path), timeout=60)
    assert _attempts(path) == 2


@pytest.mark.parametrize("value,error", [
    ("ConnectionError", TypeError), (1, TypeError), (ConnectionError, TypeError),
    ([ConnectionError, "ValueError"], ValueError), ([KeyboardInterrupt], ValueError),
])
def test_bad_values_fail_at_the_call_site_naming_the_option(ray_start, value, error):
    def f():
        return 1

    with pytest.raises(error, match="retry_exceptions"):
        ray.remote(retry_exceptions=value)(f)
    with pytest.raises(error, match="retry_exceptions"):
        ray.remote(f).options(retry_exceptions=value)
    assert ray.get(ray.remote(f).remote(), timeout=60) == 1  # the cluster works on
