"""The one retry policy of every Ember process: exponential backoff with jitter, a cap and a deadline.

`Backoff` is the policy (frozen, pure): the n-th delay is `initial_s * multiplier**n`, capped at
`max_s`, then spread by +-`jitter` (a fraction) so that many clients that failed together do not
retry together. `deadline_s` bounds the whole effort (None: no bound) and `max_attempts` the
number of tries (None: no bound).

`Attempts` applies a policy to one retry loop: it is told each failure and answers how long to
sleep before the next try, or None to give up. Clock and random source are injected, so it is
unit-tested without sleeping. `retry_async` / `retry_sync` are the loops themselves (the sleep is
injected too); a loop that is not "call until it works" (a reconnecting subscription, a creation
loop with its own exit) uses `Attempts` directly and calls `reset()` after a success.

    policy = Backoff(initial_s=0.05, max_s=1.0, deadline_s=60)
    reply = await retry_async(lambda: stub.Get(req), policy, retry_on=is_transient)
"""
from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from typing import Awaitable, Callable, TypeVar

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter, a cap and an overall deadline (pure; no clock inside)."""

    initial_s: float = 0.05
    multiplier: float = 2.0
    max_s: float = 1.0
    # Each delay is scaled by a factor drawn uniformly from [1 - jitter, 1 + jitter].
    jitter: float = 0.2
    # Give up once this long has passed since the first failure (None: never).
    deadline_s: float | None = 60.0
    # Give up after this many failed tries (None: no limit).
    max_attempts: int | None = None

    def __post_init__(self) -> None:
        if self.initial_s < 0 or self.max_s < 0:
            raise ValueError(f"backoff delays must be >= 0 (initial_s={self.initial_s}, max_s={self.max_s})")
        if self.multiplier < 1:
            raise ValueError(f"backoff multiplier must be >= 1, got {self.multiplier}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"backoff jitter must be in [0, 1], got {self.jitter}")
        if self.deadline_s is not None and self.deadline_s < 0:
            raise ValueError(f"backoff deadline_s must be >= 0 or None, got {self.deadline_s}")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError(f"backoff max_attempts must be >= 1 or None, got {self.max_attempts}")

    def delay(self, failures: int, u: float = 0.5) -> float:
        """The sleep after the `failures`-th failure (1 = the first), for a uniform draw u in [0, 1).
        u = 0.5 gives the delay without jitter."""
        base = min(self.max_s, self.initial_s * self.multiplier ** max(0, failures - 1))
        return max(0.0, base * (1.0 + self.jitter * (2.0 * u - 1.0)))

    def replace(self, **changes: float | int | None) -> Backoff:
        """A copy with some fields changed (e.g. `policy.replace(deadline_s=5)`)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


# Policies named for what they are used for (one place to tune them).
NO_RETRY = Backoff(max_attempts=1, deadline_s=None)
# A call to a service that may be restarting (GCS on etcd, a raylet coming back).
SERVICE_RESTART = Backoff(initial_s=0.05, max_s=1.0, deadline_s=60.0)
# Loops that keep going until their owner stops them (subscriptions, actor creation).
FOREVER = Backoff(initial_s=0.1, max_s=2.0, deadline_s=None)


class Attempts:
    """One retry loop's state under a policy: failures in, sleep-or-give-up decisions out."""

    def __init__(self, policy: Backoff, clock: Callable[[], float] = time.monotonic,
                 rand: Callable[[], float] = random.random) -> None:
        self.policy = policy
        self.clock = clock
        self.rand = rand
        self.failures = 0
        self.started: float | None = None

    def failed(self) -> float | None:
        """Records a failure; returns the seconds to sleep before the next try, or None when the
        policy says to give up (attempts used up, or the deadline reached). The last sleep is
        cut short so that the final try happens at the deadline, not after it."""
        now = self.clock()
        if self.started is None:
            self.started = now
        self.failures += 1
        p = self.policy
        if p.max_attempts is not None and self.failures >= p.max_attempts:
            return None
        delay = p.delay(self.failures, self.rand())
        if p.deadline_s is not None:
            left = self.started + p.deadline_s - now
            if left <= 0:
                return None
            delay = min(delay, left)
        return delay

    def reset(self) -> None:
        """A try succeeded: the next failure starts a fresh sequence (and deadline)."""
        self.failures = 0
        self.started = None


async def retry_async(call: Callable[[], Awaitable[T]], policy: Backoff, *,
                      retry_on: Callable[[BaseException], bool],
                      keep_trying: Callable[[], bool] | None = None,
                      clock: Callable[[], float] = time.monotonic,
                      sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
                      rand: Callable[[], float] = random.random) -> T:
    """Awaits call() until it returns, retrying the exceptions retry_on accepts as the policy
    allows; the last exception is raised when the policy (or keep_trying()) says stop."""
    attempts = Attempts(policy, clock, rand)
    while True:
        try:
            return await call()
        except Exception as e:
            if not retry_on(e):
                raise
            delay = attempts.failed()
            if delay is None or (keep_trying is not None and not keep_trying()):
                raise
        await sleep(delay)


def retry_sync(call: Callable[[], T], policy: Backoff, *,
               retry_on: Callable[[BaseException], bool],
               clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], object] = time.sleep,
               rand: Callable[[], float] = random.random) -> T:
    """retry_async for blocking callers (CLI, start-up code)."""
    attempts = Attempts(policy, clock, rand)
    while True:
        try:
            return call()
        except Exception as e:
            if not retry_on(e):
                raise
            delay = attempts.failed()
            if delay is None:
                raise
        sleep(delay)
