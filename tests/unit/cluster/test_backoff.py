"""The kit's one retry policy (ember_common.backoff), driven by an injected clock, random source
and sleep: delays grow exponentially, are capped, spread by jitter, stop at the deadline or the
attempt limit, and the retry loops retry only what they are told to."""
from __future__ import annotations

import asyncio

import pytest

from ember_common import backoff, rpc
from ember_common.backoff import Attempts, Backoff


class FakeClock:
    """A clock that only moves when sleep() is called."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s

    async def asleep(self, s: float) -> None:
        self.sleep(s)


def test_delays_grow_exponentially_up_to_the_cap():
    p = Backoff(initial_s=0.1, multiplier=2.0, max_s=1.0, jitter=0.0, deadline_s=None)
    assert [p.delay(n) for n in range(1, 7)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])


def test_jitter_spreads_each_delay_within_its_bounds():
    p = Backoff(initial_s=1.0, multiplier=1.0, max_s=1.0, jitter=0.2, deadline_s=None)
    assert p.delay(1, u=0.0) == pytest.approx(0.8)
    assert p.delay(1, u=0.5) == pytest.approx(1.0)
    assert p.delay(1, u=0.999999) == pytest.approx(1.2, abs=1e-5)


def test_attempts_stop_at_the_deadline_and_cut_the_last_sleep_short():
    clock = FakeClock()
    a = Attempts(Backoff(initial_s=1.0, multiplier=2.0, max_s=4.0, jitter=0.0, deadline_s=6.0),
                 clock=clock, rand=lambda: 0.5)
    delays = []
    while (d := a.failed()) is not None:
        delays.append(d)
        clock.sleep(d)
    # 1 + 2 = 3 s, then 4 s would pass the 6 s deadline: only the 3 s left are slept.
    assert delays == pytest.approx([1.0, 2.0, 3.0])
    assert clock.now == pytest.approx(106.0)


def test_attempts_stop_after_max_attempts():
    a = Attempts(Backoff(initial_s=0.01, deadline_s=None, max_attempts=3), clock=FakeClock())
    assert a.failed() is not None
    assert a.failed() is not None
    assert a.failed() is None  # the third failure was the last try


def test_reset_starts_a_fresh_sequence_and_deadline():
    clock = FakeClock()
    a = Attempts(Backoff(initial_s=1.0, max_s=8.0, jitter=0.0, deadline_s=2.5), clock=clock)
    clock.sleep(a.failed())
    clock.sleep(a.failed())
    a.reset()
    clock.sleep(100)  # a long success: the old deadline no longer applies
    assert a.failed() == pytest.approx(1.0)


def test_no_retry_gives_up_at_once():
    assert Attempts(backoff.NO_RETRY).failed() is None


@pytest.mark.parametrize("bad", [dict(initial_s=-1), dict(multiplier=0.5), dict(jitter=2),
                                 dict(deadline_s=-1), dict(max_attempts=0)])
def test_bad_policies_are_refused_naming_the_field(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        Backoff(**bad)


def test_retry_sync_retries_transient_errors_until_success():
    clock = FakeClock()
    calls = []

    def flaky() -> str:
        calls.append(clock.now)
        if len(calls) < 3:
            raise rpc.Unavailable("GCS restarting")
        return "ok"

    policy = Backoff(initial_s=0.5, jitter=0.0, deadline_s=10)
    assert backoff.retry_sync(flaky, policy, retry_on=rpc.is_transient, clock=clock,
                              sleep=clock.sleep) == "ok"
    assert clock.sleeps == pytest.approx([0.5, 1.0])


def test_retry_sync_raises_the_last_error_at_the_deadline():
    clock = FakeClock()

    def down() -> None:
        raise rpc.DeadlineExceeded("no answer")

    with pytest.raises(rpc.DeadlineExceeded, match="no answer"):
        backoff.retry_sync(down, Backoff(initial_s=1.0, jitter=0.0, deadline_s=3.0),
                           retry_on=rpc.is_transient, clock=clock, sleep=clock.sleep)
    assert sum(clock.sleeps) == pytest.approx(3.0)


def test_retry_does_not_retry_other_errors():
    clock = FakeClock()
    calls = []

    def missing() -> None:
        calls.append(1)
        raise rpc.NotFound("no such key")

    with pytest.raises(rpc.NotFound):
        backoff.retry_sync(missing, backoff.SERVICE_RESTART, retry_on=rpc.is_transient,
                           clock=clock, sleep=clock.sleep)
    assert calls == [1] and clock.sleeps == []


def test_retry_async_honours_keep_trying():
    clock = FakeClock()
    calls = []

    async def down() -> None:
        calls.append(1)
        raise rpc.Unavailable("down")

    stop_after = 2

    async def main() -> None:
        await backoff.retry_async(down, backoff.FOREVER, retry_on=rpc.is_transient,
                                  keep_trying=lambda: len(calls) < stop_after, clock=clock,
                                  sleep=clock.asleep)

    with pytest.raises(rpc.Unavailable):
        asyncio.run(main())
    assert len(calls) == stop_after and len(clock.sleeps) == stop_after - 1
